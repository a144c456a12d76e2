"""The main job: train several methods on the same data and print a per-class comparison table.

    python -m experiments.compare                       # embedded default: long-tailed digits
    python -m experiments.compare --config=experiments/configs/cifar10_lt.py \
        --config.data_dir=../shared/data/cifar10_jpeg --methods=ce,ldam_drw,inverse_reweight \
        --seeds=0,1,2 --workdir=workdirs/c10lt

Each (method, seed) is a run of `experiments.train` in `<workdir>/<method>/seed<s>` (resumed if it
exists); the report (Markdown tables, comparison.json, PNG plots) goes to `<workdir>/report`.
The first method is the reference (ERM) that fixes the Easy / Medium / Hard groups.
"""

from __future__ import annotations

import copy
import pathlib
import sys
import time

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from experiments import cli_errors
from experiments import evaluate
from experiments import train

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/digits_lt.py",
                                          "Base configuration; `loss` and `seed` are set per run.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/compare", "Output folder.")
_METHODS = flags.DEFINE_list("methods", ["ce", "mr2", "inverse_reweight"],
                             f"Losses to compare, first is the reference; from {train.LOSSES}.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds per method.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  base = _CONFIG.value
  workdir = pathlib.Path(_WORKDIR.value)
  seeds = [int(s) for s in _SEEDS.value]
  runs = {}
  with cli_errors.one_line_errors():
    for method in _METHODS.value:
      config = copy.deepcopy(base)
      config.loss = method
      train.validate_config(config)  # every method is checked before the first run starts
    for method in _METHODS.value:
      runs[method] = []
      for seed in seeds:
        config = copy.deepcopy(base)
        config.loss, config.seed, config.progress_bar = method, seed, False
        run_dir = workdir / method.replace("+", "_") / f"seed{seed}"
        start = time.perf_counter()
        summary = train.train_and_evaluate(config, run_dir)
        print(f"{method:>22s} seed {seed}: test accuracy {100 * summary['overall_accuracy']:5.1f} %"
              f"  ({time.perf_counter() - start:.0f} s, {summary['steps']} steps)", flush=True)
        runs[method].append(run_dir)
    markdown = evaluate.write_report(runs, _METHODS.value[0], workdir / "report")
  print(f"\n{base.dataset}, imbalance factor {base.imbalance_factor:g}, {base.num_epochs} epochs, "
        f"final-epoch test accuracy (%), mean ± std over seeds {seeds}; groups from "
        f"{_METHODS.value[0]}:\n")
  print(markdown)
  print(f"report, plots and per-run summaries: {workdir}")


if __name__ == "__main__":
  cli_errors.run_app(main, sys.argv)
