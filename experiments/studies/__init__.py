"""Studies: several methods × seeds on one recipe (`method_comparison`, the engine of
`python -m experiments.compare` and `experiments.demo`), the frozen-feature study commands
(`linear_probe`; `probe_comparison` with its `probe_comparison_methods` and
`probe_comparison_report`; both run the trainer through `probe_runs` and tabulate with
`probe_tables`) and the command that rebuilds every committed report from the per-run files
(`regenerate_reports`). Their committed results are in the checkout's top-level `results/`; the
shell scripts that run them are in `tools/`."""
