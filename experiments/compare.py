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

import ast
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
from experiments import reporting
from experiments import losses
from experiments import train
from experiments.config_errors import ConfigError
from experiments.config_validation import validate_config
from experiments import xla_cpu

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/digits_lt.py",
                                          "Base configuration; `loss` and `seed` are set per run.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/compare", "Output folder.")
_METHODS = flags.DEFINE_list(
    "methods", ["ce", "mr2", "inverse_reweight"],
    f"Methods to compare, the first is the reference (ERM). A method is a loss from {losses.LOSSES}, "
    "or `name=loss:field=value:...` for a variant, e.g. `mr2_gamma_only=mr2:mr2.lam=0`.")


def parse_method(spec: str) -> tuple[str, str, dict[str, object]]:
  """'name=loss:a.b=1:c=x' → (name, loss, {'a.b': 1, 'c': 'x'}); a bare loss is its own name."""
  name, _, rest = spec.partition("=")
  if not rest:
    return spec, spec, {}
  loss, *assignments = rest.split(":")
  overrides = {}
  for assignment in assignments:
    field, _, value = assignment.partition("=")
    try:
      overrides[field] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      overrides[field] = value
  return name, loss, overrides


def method_config(base, spec: str, seed: int):
  name, loss, overrides = parse_method(spec)
  config = copy.deepcopy(base)
  config.loss, config.seed, config.progress_bar = loss, seed, False
  for field, value in overrides.items():
    try:
      holder = config
      *path, last = field.split(".")
      for part in path:
        holder = holder[part]
      if last not in holder:
        raise KeyError(field)
      holder[last] = value  # ConfigDict checks the type (an int for a float field is widened)
    except (KeyError, AttributeError):
      raise ConfigError(f"--methods: {name}: unknown config field {field!r}") from None
    except TypeError as error:
      raise ConfigError(f"--methods: {name}: {field}: {error}") from None
  return name, config
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds per method.")
_XLA_CPU_TUNING = flags.DEFINE_bool(
    "xla_cpu_tuning", True, "Add experiments.xla_cpu.TUNED_FLAGS to XLA_FLAGS (CPU backend only).")
_REPORT_DIR = flags.DEFINE_string("report_dir", None,
                                  "Where the report goes (default <workdir>/report).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  xla_cpu.configure(_XLA_CPU_TUNING.value)
  base = _CONFIG.value
  workdir = pathlib.Path(_WORKDIR.value)
  seeds = [int(s) for s in _SEEDS.value]
  runs = {}
  with cli_errors.one_line_errors():
    for spec in _METHODS.value:
      validate_config(method_config(base, spec, seeds[0])[1])  # all checked before any run
    for spec in _METHODS.value:
      method = parse_method(spec)[0]
      runs[method] = []
      for seed in seeds:
        _, config = method_config(base, spec, seed)
        run_dir = workdir / method.replace("+", "_") / f"seed{seed}"
        start = time.perf_counter()
        summary = train.train_and_evaluate(config, run_dir)
        print(f"{method:>22s} seed {seed}: test accuracy {100 * summary['overall_accuracy']:5.1f} %"
              f"  ({time.perf_counter() - start:.0f} s, {summary['steps']} steps)", flush=True)
        runs[method].append(run_dir)
    report_dir = pathlib.Path(_REPORT_DIR.value) if _REPORT_DIR.value else workdir / "report"
    markdown = evaluate.write_report(runs, parse_method(_METHODS.value[0])[0], report_dir)
  print(f"\n{base.dataset}, imbalance factor {base.imbalance_factor:g}, {base.num_epochs} epochs, "
        f"final-epoch test accuracy (%), {reporting.MEAN_STD} over seeds {seeds}; groups from "
        f"{parse_method(_METHODS.value[0])[0]}:\n")
  print(markdown)
  print(f"report: {report_dir}; per-run summaries: {workdir}")


if __name__ == "__main__":
  cli_errors.run_app(main, sys.argv)
