"""The harness around `mr2_jax` and `reweight_jax`: packages by role, each importing only the ones
below it (checked by tests/harness/test_layout.py):

    common   errors and their one-line CLI form, XLA's CPU flags
    data     sources, long-tailed subsets and splits, augmentation, batches, the input pipeline
    models   the networks and their heads, pretrained weights
    methods  one module per method: its objective, config sub-tree, state, recipe (model wrapper,
             views, sampler, paired batches, epoch-end pass) and per-example loss; the loss
             registry built from them (`methods.registry`: the reweighting wraps every method
             with a per-example loss)
    configs  the shared fields (default.py, ml_collections alone), the one check (schema.py:
             ranges, the methods' sub-trees, a run's config) and a file per recipe, returning an
             ml_collections.ConfigDict (a family's data block, cifar10_lt_data.py, shared)
    train    train state, the step, runners (jit / pmap / shard_map), checkpoints, the loop
    report   seed statistics, tables and plots over finished runs, the diagnosis
    probe    linear probes on frozen features
    studies  methods × seeds on one recipe, the one-off studies, the reports' rebuild
    benchmarks  timing of the pieces above

The entry points are the commands at the top: `python -m experiments.main` (one run), `compare`
(methods × seeds), `demo` (the main job on the embedded data), `launch` (multi-process on one
machine) and `diagnose` (a run's per-class diagnosis). A command that belongs to one package keeps
its `main` in its module, run as `python -m experiments.<package>.<module>`: every benchmark, the
study commands (`studies.linear_probe`, `studies.probe_comparison`, `studies.regenerate_reports`),
the reports over finished runs (`report.run_tables`, `report.sweep_table`, `report.setting_curves`,
`report.progress`) and the ArrayRecord conversion (`data.sources`). No other module has a `__main__`
(tests/harness/test_layout.py). The committed results are in the checkout's `results/`, the
operational scripts (accelerator runs, parking, the reference script, wheels) in `tools/`.
"""
