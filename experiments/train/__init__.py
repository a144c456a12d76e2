"""Training: the train state, the jitted step, its runners (one device, jit over a mesh, pmap,
shard_map), checkpoints, the in-loop evaluation, metrics and the loop (`loop.train_and_evaluate`).

MaxText splits its trainers from its layers the same way; here the per-method parts that are not a
batch loss (JTT's sampler) live in `samplers`, so the loop does not name methods."""
