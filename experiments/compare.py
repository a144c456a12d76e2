"""Train several methods on the same recipe and seeds and print a per-class comparison table.

    python -m experiments.compare                       # embedded long-tailed digits
    python -m experiments.compare --config=experiments/configs/cifar10_lt.py \
        --config.data_dir=../shared/data/cifar10_jpeg --methods=ce,ldam_drw,inverse_reweight \
        --seeds=0,1,2 --workdir=workdirs/c10lt [--stack_seeds]
    python -m experiments.compare --methods=ce,mr2 --sweep=mr2.lam=0,0.01,0.1 --seeds=0-4


Each (method, seed) is a run of `experiments.train.loop` in `<workdir>/<method>/seed<s>` (resumed if it
exists; with `--stack_seeds` a method's seeds train as one vmapped program, each with its solo
run's files; with `--sweep`, each method that reads a swept field trains as one program of its
members, values × seeds, each member a run `<method>-<field><value>` of its own); the report
(Markdown tables, comparison.json, PNG plots) goes to `<workdir>/report`. The first method is the
reference (ERM) that fixes the Easy / Medium / Hard groups.
"""

from __future__ import annotations

import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.configs import schema
from experiments.studies import method_comparison
from experiments.methods import registry
from experiments.report import seed_stats
from experiments.common import xla_cpu

_CONFIG = schema.define_config_flag("config", "experiments/configs/digits_lt.py",
                                    "Base configuration; `loss` and `seed` are set per run.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/compare", "Output folder.")
_METHODS = flags.DEFINE_list(
    "methods", ["ce", "mr2", "inverse_reweight"],
    f"Methods to compare, the first is the reference (ERM). A method is a loss from "
    f"{tuple(registry.REGISTRY)}, "
    "or `name=loss:field=value:...` for a variant, e.g. `mr2_gamma_only=mr2:mr2.lam=0`.")


_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds per method: numbers and ranges a-b.")
_SWEEP = flags.DEFINE_multi_string(
    "sweep", [],
    "A sweep, `<tree>.<field>=v1,v2,...` (repeat for a grid): each method that reads the field "
    "trains its members (values × seeds) as one program, the values a traced array "
    "(experiments.train.seed_axis); only fields its method declares traceable "
    "(experiments.methods.registry.traceable_fields), others are refused before anything runs.")
_STACK_SEEDS = flags.DEFINE_bool(
    "stack_seeds", False,
    "Train a method's seeds as one program, the seeds on a leading axis of the train state and "
    "the batch (experiments.train.seed_axis; for an accelerator); each seed's files are those of "
    "its solo run.")
_STACK_SEEDS_BY = flags.DEFINE_enum(
    "stack_seeds_by", "vmap", ["vmap", "map"],
    "With --stack_seeds: 'vmap' (one batched step, for an accelerator) or 'map' (the seeds' solo "
    "steps in sequence in one program). On a CPU both are slower than separate runs "
    "(results/benchmarks/RESULTS.md).")
_XLA_CPU_TUNING = flags.DEFINE_bool(
    "xla_cpu_tuning", True, "Add experiments.common.xla_cpu.TUNED_FLAGS to XLA_FLAGS (CPU backend only).")
_REPORT_DIR = flags.DEFINE_string("report_dir", None,
                                  "Where the report goes (default <workdir>/report).")
_SHARE_REFERENCE = flags.DEFINE_bool(
    "start_deferred_from_reference", True,
    "A deferred method starts at its start epoch (config.init_from) from the first earlier method "
    "of the same seed whose run it equals until then: its `before` loss (reweighting or IB after "
    "CE, DRW after LDAM, the reweighting inside ETF-DR / GLMC after them) in the same config but "
    "for the loss. Bit-for-bit the run it would train itself, without training those epochs again.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  xla_cpu.configure(_XLA_CPU_TUNING.value)
  base = _CONFIG.value
  workdir = pathlib.Path(_WORKDIR.value)
  report_dir = pathlib.Path(_REPORT_DIR.value) if _REPORT_DIR.value else workdir / "report"
  with cli.one_line_errors():
    seeds = method_comparison.parse_seeds(_SEEDS.value)
    markdown = method_comparison.compare(base, _METHODS.value, seeds, workdir, report_dir,
                                  start_deferred_from_reference=_SHARE_REFERENCE.value,
                                  stack_seeds=_STACK_SEEDS.value,
                                  stack_by=_STACK_SEEDS_BY.value,
                                  sweep=method_comparison.parse_sweep(_SWEEP.value))
  print(f"\n{base.dataset}, imbalance factor {base.imbalance_factor:g}, {base.num_epochs} epochs, "
        f"final-epoch test accuracy (%), {seed_stats.MEAN_STD} over seeds {seeds}; groups from "
        f"{method_comparison.parse_method(_METHODS.value[0])[0]}:\n")
  print(markdown)
  print(f"report: {report_dir}; per-run summaries: {workdir}")


if __name__ == "__main__":
  cli.run_app(main, sys.argv)
