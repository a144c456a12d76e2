"""Training: the train state, the jitted step, its runners (one device, jit over a mesh, pmap,
shard_map), checkpoints, the in-loop evaluation, metrics and the loop (`loop.train_and_evaluate`).

MaxText splits its trainers from its layers the same way; here what a method changes outside its
batch loss (a model wrapper, views, sampling, paired or mixed batches, an epoch-end pass) is its
recipe, declared once in `recipes` and read by the loop and the step, so neither names a method."""
