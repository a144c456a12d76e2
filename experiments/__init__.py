"""The harness around `mr2_jax` and `reweight_jax`: packages by role, each importing only the ones
below it (checked by tests/test_harness_layout.py):

    common   errors and their one-line CLI form, XLA's CPU flags
    data     sources, long-tailed subsets and splits, augmentation, batches, the input pipeline
    models   the networks and their heads, pretrained weights
    losses   the loss registry: one batch objective per method
    configs  one Python file per recipe, returning an ml_collections.ConfigDict
    train    train state, the step, runners (jit / pmap / shard_map), checkpoints, the loop
    report   seed statistics, tables and plots over finished runs, the diagnosis
    probe    linear probes on frozen features
    studies  methods × seeds on one recipe, the one-off studies, their scripts and results/
    benchmarks  timing of the pieces above

The entry points stay at the top: `python -m experiments.main` (one run), `compare` (methods ×
seeds), `demo` (the main job on the embedded data), `launch` (multi-process on one machine) and
`diagnose` (a run's per-class diagnosis).
"""
