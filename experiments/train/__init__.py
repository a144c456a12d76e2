"""Training: the train state, the jitted step, its runners (one device, jit over a mesh, pmap,
shard_map), checkpoints, the in-loop evaluation, metrics and the loop (`loop.train_and_evaluate`,
with what it does after each step in `loop_events`).

MaxText splits its trainers from its layers the same way; here what a method changes outside its
batch loss (a model wrapper, views, sampling, paired or mixed batches, an epoch-end pass) is its
recipe, declared with the method (`experiments.methods`) and read from the registry by the loop and
the step (`recipes.of`), so neither names a method nor imports a method's code."""
