"""Rebuild every committed report under results/ from the committed per-run files,
without training: the comparison reports (report.md, comparison.json, PNG plots) with
`experiments.report.run_tables`, the imbalance-factor table (sweep.md, sweep.json) with
`experiments.report.sweep_table`, and the linear probe's results.json / tables.md / plots with
`experiments.studies.linear_probe report`.

    python -m experiments.studies.regenerate_reports                 # all of results/
    python -m experiments.studies.regenerate_reports --results DIR   # a copy elsewhere
    python -m experiments.studies.regenerate_reports --export=WORKDIR --export_study=STUDY
                                                      # a compare workdir's runs first

A study's runs are committed as `runs/<method>-seed<s>.json` (the run's summary.json) beside
`<method>-seed<s>.config.json` and, where logged, `.metrics.jsonl` and `.class_history.jsonl`; they
are linked into `<method>/seed<s>/` workdirs in a temporary folder, the layout
`experiments.report.run_tables` reads. Which methods a report shows, in which order, and its
reference are listed in `STUDIES` (the `--methods` of each `experiments.compare` call in
`tools/run_studies.sh` and `tools/standard_size.sh`).
"""

from __future__ import annotations

import pathlib
import re
import shutil
import sys
import tempfile
from typing import NamedTuple, Sequence

from absl import flags

from experiments.common import cli
from experiments.report import run_tables
from experiments.report import sweep_table
from experiments.studies import linear_probe
from experiments.train import checkpoints

# The committed results sit at the top of the checkout, outside the code folders.
RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results"
RUN_FILES = {"json": "summary.json", "metrics.jsonl": "metrics.jsonl",
             "class_history.jsonl": "class_history.jsonl", "config.json": "config.json"}
# The final parameters and BatchNorm statistics of an exported run (`checkpoints.write_variables_npz`).
VARIABLES = "variables.npz"
IF_SWEEP = ("IF 50", "if_sweep/if50"), ("IF 100", "if_sweep/if100"), ("IF 200", "if_sweep/if200")


class Study(NamedTuple):
  """One comparison report: `out` (relative to the results folder) and its methods in table order,
  each as (name, runs folder relative to the results folder); the first is the reference (ERM).
  `seeds`, where given, are the seeds the report reads (each method must have all of them): a study
  still training reports the seeds every method has finished, and says so."""
  out: str
  methods: tuple[tuple[str, str], ...]
  paired_against: str | None = None
  seeds: tuple[int, ...] | None = None


def _from(runs: str, *names: str) -> tuple[tuple[str, str], ...]:
  return tuple((name, runs) for name in names)


_IF_METHODS = ("ce", "class_balanced", "focal", "ldam_drw", "logit_adjust", "ir_macro")
_LT_SHORT = ("ce", "inverse_reweight", "ldam_drw", "logit_adjust", "mr2_inverse_reweight", "mr2")
_BALANCED = ("ce", "mr2", "mr2_released", "mr2_gamma_only")
_PIPELINES = ("ce", "released", "released_rw", "etf_dr", "etf_dr_rw", "glmc", "glmc_rw")
STUDIES = (
    Study("reweight_cifar10_lt", _from(
        "reweight_cifar10_lt/runs", "ce", "class_balanced", "focal", "ldam_drw", "logit_adjust",
        "ir_batch", "ir_macro", "ir_macro_stopgrad")),
    Study("mr2_cifar10", _from("mr2_cifar10/runs", "ce", "mr2", "mr2_gamma_only", "mr2_sbar_only",
                               "gamma_only_cbar1.5", "uniform_cbar1.5")),
    Study("mr2_cifar10/uniform_margin",
          _from("mr2_cifar10/runs", "ce", "gamma_only_cbar1.5", "uniform_cbar1.5"),
          paired_against="uniform_cbar1.5"),
    Study("mr2_mnist", _from("mr2_mnist/runs", "ce", "mr2", "mr2_gamma_only", "mr2_sbar_only")),
    # Study 4 shares study 1's workdir: its CE and reweighting runs are study 1's.
    Study("combined_cifar10_lt", _from("reweight_cifar10_lt/runs", "ce")
          + _from("combined_cifar10_lt/runs", "mr2") + _from("reweight_cifar10_lt/runs", "ir_macro")
          + _from("combined_cifar10_lt/runs", "mr2_ir_macro")),
    *(Study(folder, _from(f"{folder}/runs", *_IF_METHODS)) for _, folder in IF_SWEEP),
    # Study 7 (issue 14): the pipelines against CE, and each reweighting against its own pipeline.
    Study("pipelines_cifar10_lt", _from("pipelines_cifar10_lt/runs", *_PIPELINES)),
    *(Study(f"pipelines_cifar10_lt/{rw}_vs_{base}", _from("pipelines_cifar10_lt/runs", base, rw))
      for base, rw in (("released", "released_rw"), ("etf_dr", "etf_dr_rw"),
                       ("glmc", "glmc_rw"))),
    # Issue 17.1 (full CIFAR-10-LT, ResNet-32, short recipe): every method on every committed seed
    # (seeds 0-2), and CE against the reweighting on every seed both have.
    Study("cifar10_lt_short", _from("cifar10_lt_short/runs", *_LT_SHORT)),
    Study("cifar10_lt_short/ce_vs_inverse_reweight",
          _from("cifar10_lt_short/runs", "ce", "inverse_reweight")),
    # Issue 17.2 (balanced CIFAR-10, 1,000 per class, ResNet-32): ERM and MR2's three forms on the
    # seeds all four have finished, and ERM against MR2 (paper form) on every seed both have.
    Study("cifar10_balanced", _from("cifar10_balanced/runs", *_BALANCED)),
    Study("cifar10_balanced/ce_vs_mr2", _from("cifar10_balanced/runs", "ce", "mr2")),
    # Issue 39 (200 epochs; seed 0, trained on an H200 by tools/accelerator_runs.py):
    # CIFAR-10-LT at the LDAM-DRW release's schedule, and balanced CIFAR-10 with ERM and MR2's two
    # forms.
    # The four methods on the seed all four have; CE against the reweighting on every seed both
    # have (seeds 1 and 2 train those two only).
    Study("cifar10_lt_200", _from("cifar10_lt_200/runs", "ce", "inverse_reweight", "logit_adjust",
                                  "ldam_drw"), seeds=(0,)),
    Study("cifar10_lt_200/ce_vs_inverse_reweight",
          _from("cifar10_lt_200/runs", "ce", "inverse_reweight")),
    Study("cifar10_balanced_200", _from("cifar10_balanced_200/runs", "ce", "mr2_released", "mr2")),
)


def link_runs(runs_dir: pathlib.Path, method: str, into: pathlib.Path,
              seeds: Sequence[int] | None = None) -> list[pathlib.Path]:
  """`<into>/<method>/seed<s>/{summary.json, ...}` linked to `runs_dir/<method>-seed<s>.*`, one
  workdir per seed in seed order: every committed seed, or exactly `seeds` (each must exist)."""
  pattern = re.compile(rf"{re.escape(method)}-seed(\d+)\.json")
  committed = sorted(int(m.group(1)) for p in runs_dir.iterdir()
                     if (m := pattern.fullmatch(p.name)))
  if not committed:
    raise SystemExit(f"error: {runs_dir}: no {method}-seed<s>.json")
  if seeds is None:
    seeds = committed
  elif absent := sorted(set(seeds) - set(committed)):
    raise SystemExit(f"error: {runs_dir}: no {method}-seed<s>.json for seeds {absent} "
                     f"(committed: {committed})")
  else:
    seeds = sorted(seeds)
  workdirs = []
  for seed in seeds:
    workdir = into / method / f"seed{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    for suffix, name in RUN_FILES.items():
      source = runs_dir / f"{method}-seed{seed}.{suffix}"
      if source.exists() and not (workdir / name).exists():
        (workdir / name).symlink_to(source.resolve())
    workdirs.append(workdir)
  return workdirs


def export_runs(workdir: pathlib.Path, runs_dir: pathlib.Path, *,
                keep_existing: bool = False) -> list[pathlib.Path]:
  """The inverse of `link_runs`: each finished run `<workdir>/<method>/seed<s>/` (one with a
  summary.json) copied as `runs_dir/<method>-seed<s>.{json, config.json, metrics.jsonl,
  class_history.jsonl}`, and its final parameters and BatchNorm statistics as
  `<method>-seed<s>.variables.npz` (`checkpoints.write_variables_npz`; not the optimiser's state,
  nor earlier checkpoints). With `keep_existing`, a run whose summary is already in
  `runs_dir` is left as it is (a resumed finished run re-evaluates and rewrites its summary).
  Returns the summaries written."""
  written = []
  runs_dir.mkdir(parents=True, exist_ok=True)
  for summary in sorted(workdir.glob("*/seed*/summary.json")):
    run = summary.parent
    if keep_existing and (runs_dir / f"{run.parent.name}-{run.name}.json").exists():
      continue
    for suffix, name in RUN_FILES.items():
      if (run / name).exists():
        shutil.copyfile(run / name, runs_dir / f"{run.parent.name}-{run.name}.{suffix}")
    if (run / "checkpoints").is_dir() and any(p.name.isdigit() for p in
                                              (run / "checkpoints").iterdir()):
      try:
        checkpoints.write_variables_npz(
            run, runs_dir / f"{run.parent.name}-{run.name}.{VARIABLES}")
      except (FileNotFoundError, checkpoints.CheckpointError) as error:
        # The run's results still go; only its variables are missing, and that is said.
        print(f"warning: {run}: exported without its variables: {error}", file=sys.stderr)
    written.append(runs_dir / f"{run.parent.name}-{run.name}.json")
  return written


def regenerate_study(results: pathlib.Path, study: Study) -> str:
  with tempfile.TemporaryDirectory() as scratch:
    runs = {name: link_runs(results / runs_dir, name, pathlib.Path(scratch), study.seeds)
            for name, runs_dir in study.methods}
    return run_tables.write_report(runs, study.methods[0][0], results / study.out,
                                 study.paired_against)


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_string("results", str(RESULTS), "The results folder.", flag_values=flag_values)
  flags.DEFINE_bool("skip_linear_probe", False, "Leave the linear probe's reports as they are.",
                    flag_values=flag_values)
  flags.DEFINE_string("export", None, "First copy the finished runs of this experiments.compare "
                      "workdir into <results>/<export_study>/runs (then regenerate as usual).",
                      flag_values=flag_values)
  flags.DEFINE_string("export_study", None, "With --export: the study folder the runs go to.",
                      flag_values=flag_values)
  flags.register_multi_flags_validator(
      ["export", "export_study"], lambda values: (values["export"] is None)
      == (values["export_study"] is None), "--export and --export_study go together",
      flag_values=flag_values)
  flags.DEFINE_bool("keep_existing", False, "With --export: leave the runs already in "
                    "<results>/<export_study>/runs as they are, copy only the new ones.",
                    flag_values=flag_values)
  flags.DEFINE_bool("export_only", False, "With --export: stop after the export, regenerate "
                    "nothing.", flag_values=flag_values)


def regenerate_command(args: flags.FlagValues) -> int:
  """Exports (`--export`), then rebuilds every report of STUDIES, the sweep table and the linear
  probe's tables; returns the exit status."""
  results = pathlib.Path(args.results)
  if args.export:
    for path in export_runs(pathlib.Path(args.export), results / args.export_study / "runs",
                            keep_existing=args.keep_existing):
      print(f"exported {path}")
    if args.export_only:
      return 0
  for study in STUDIES:
    regenerate_study(results, study)
    print(f"{results / study.out}: report.md, comparison.json, plots")
  status = sweep_table.main([f"--out={results / 'if_sweep'}", "--quiet",
                             *(f"--reports={label}={results / folder}"
                               for label, folder in IF_SWEEP)])
  if status:
    return status
  print(f"{results / 'if_sweep'}: sweep.md, sweep.json, overall_accuracy.png")
  if not args.skip_linear_probe:
    status = linear_probe.main(["report", "--noxla_cpu_tuning", "--quiet",
                                f"--out={results / 'linear_probe'}"])
    if status:
      return status
    print(f"{results / 'linear_probe'}: results.json, tables.md, per_class_*.png")
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m experiments.studies.regenerate_reports`; `argv` (without the program name) runs
  it from Python."""
  return cli.run_command(define_flags, regenerate_command, argv)


if __name__ == "__main__":
  sys.exit(main())
