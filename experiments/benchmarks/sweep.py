"""Examples/s of a sweep in one program against the same members as separate runs: S = 1, 8, 32
members (`experiments.train.seed_axis`: the members differ in one traceable field, its values a
stacked array) through the trainer's own loop.

    python -m experiments.benchmarks.sweep --config=experiments/configs/probe_cifar10.py \
        --config.imbalance_factor=100 --loss=inverse_reweight --field=reweight.alpha \
        --members=1,8,32 --steps=60 --window=10 --rounds=2 --tag=probe

Each variant trains in its own process, `--steps` steps logged every `--window` steps, no
evaluation pass, no checkpoint; its examples/s are the trainer's own (metrics.jsonl's
`images_per_sec`, training time only) over the windows after the first (which holds the
compilation), summed over the members. 'separate runs' is one member trained alone (the member
with the middle value): S separate runs, one after another, train at its rate together, whatever S
(on this 2-core CPU two at once would share the cores). Variants run interleaved, round by round;
only ratios within one run mean something. Writes benchmarks_sweep_<tag>.{json,md}.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
from typing import Any

import numpy as np
from absl import app
from absl import flags
from ml_collections import config_flags

from experiments.benchmarks.machine import machine_info
from experiments.benchmarks.report import write_report
from experiments.benchmarks import trainer_rates
from experiments.benchmarks.timing import REPO
from experiments.benchmarks.timing import timed_config
from experiments.data import cached_features
from experiments.studies import method_comparison
from experiments.train import seed_axis

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/digits_lt.py",
                                          "The recipe timed (its data, batch size, model).")
_LOSS = flags.DEFINE_string("loss", "mr2", "The method swept.")
_FIELD = flags.DEFINE_string("field", "mr2.lam", "The traceable field the members differ in.")
_LOW = flags.DEFINE_float("low", 0.0, "The smallest value (the members' values are evenly spaced).")
_HIGH = flags.DEFINE_float("high", 0.3, "The largest value.")
_MEMBERS = flags.DEFINE_list("members", ["1", "8", "32"], "S of the sweep variants.")
_STEPS = flags.DEFINE_integer("steps", 60, "Training steps per variant and round.")
_WINDOW = flags.DEFINE_integer("window", 10, "Steps per logging window (examples/s per window).")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Rounds over the variants.")
_BY = flags.DEFINE_enum("by", "vmap", list(seed_axis.BY), "How the step runs over the members.")
_OUT = flags.DEFINE_string("out", str(REPO / "results" / "benchmarks"), "Output folder.")
_TAG = flags.DEFINE_string("tag", "cpu", "Output file suffix.")
_WORKER = flags.DEFINE_integer("worker", None, "Internal: run one variant (0: one run alone).")
_SYNTHETIC = flags.DEFINE_string(
    "synthetic_features", None,
    "N,d: train on synthetic features of the shape of a cached encoder's (10 Gaussian classes, "
    "`features:synthetic`, written to a temporary folder) instead of the config's dataset: where "
    "the real features are not at hand (an accelerator machine); the cost of a step is the same.")


def recipe(workdir: pathlib.Path):
  """The config timed: --config's, or on `--synthetic_features` in `workdir`."""
  config = _CONFIG.value
  if _SYNTHETIC.value:
    rows, dim = (int(x) for x in _SYNTHETIC.value.split(","))
    cached_features.write_synthetic(workdir / "features", "synthetic", rows, dim)
    config = config.copy_and_resolve_references()
    config.dataset, config.data_dir = "features:synthetic", str(workdir / "features")
  return config


def values(members: int) -> list[float]:
  """The members' values of the swept field, evenly spaced from --low to --high."""
  if members == 1:
    return [(_LOW.value + _HIGH.value) / 2]
  return [float(v) for v in np.linspace(_LOW.value, _HIGH.value, members)]


def member_configs(config, members: int, window: int) -> list[Any]:
  """The members' configs: `compare`'s method spec `--loss` with the member's value of `--field`
  (seed 0), timed (`timed_config`)."""
  return [timed_config(method_comparison.method_config(
      config, f"member={_LOSS.value}:{_FIELD.value}={value!r}", 0)[1], 0, False, window)
          for value in values(members)]


def train_variant(config, members: int, steps: int, window: int, workdir: pathlib.Path,
                  by: str) -> list[float]:
  """Aggregate examples/s per logging window after the first: `members` (0: one run alone, the
  trainer's solo loop) trained `steps` steps in `workdir`."""
  configs = member_configs(config, max(members, 1), window)
  return trainer_rates.window_rates(configs, [workdir / f"member{i}" for i in range(len(configs))],
                                    steps, stacked=members > 0, by=by)


def measure(flag_args: list[str]) -> dict[str, Any]:
  """Every variant in its own process (given this command's `flag_args`), `--rounds` rounds,
  interleaved; ratios to the run alone (`ratio_to_first`)."""
  variants = {"one run alone (= S separate runs together)": 0}
  variants.update({f"S = {int(s)} in one program": int(s) for s in _MEMBERS.value})
  rates = trainer_rates.interleaved("experiments.benchmarks.sweep", flag_args,
                                    {name: str(members) for name, members in variants.items()},
                                    _ROUNDS.value, "examples")
  return {name: {"members": variants[name], **row}
          for name, row in trainer_rates.summary(rates, "examples").items()}


def to_markdown(results: dict[str, Any]) -> list[str]:
  config = results["config"]
  lines = [f"Aggregate training examples/s of a sweep of {results['field']} "
           f"({results['loss']}), {config['model']} on {config['dataset']}"
           f"{', imbalance factor %g' % config['imbalance_factor'] if config['imbalance_factor'] > 1 else ''}, "
           f"batch {config['batch_size']} per member, {results['steps']} steps per variant, "
           f"median over {results['rounds']} rounds' windows after the first (min–max); ratios "
           "within this run.", ""]
  return lines + trainer_rates.markdown_rows(results["variants"], "examples", "separate runs")


def main(argv):
  del argv  # the flags are passed on to the workers from sys.argv
  if _WORKER.value is not None:
    with tempfile.TemporaryDirectory() as workdir:
      rates = train_variant(recipe(pathlib.Path(workdir)), _WORKER.value, _STEPS.value,
                            _WINDOW.value, pathlib.Path(workdir) / "runs", _BY.value)
    print("RATES " + json.dumps(rates), flush=True)
    return
  config = _CONFIG.value
  flag_args = [arg for arg in sys.argv[1:] if not arg.startswith(("--out", "--tag"))]
  results = {"machine": machine_info(), "command": " ".join(["python -m experiments.benchmarks."
                                                              "sweep", *sys.argv[1:]]),
             "config": {**{k: config[k] for k in ("model", "dataset", "batch_size",
                                                  "imbalance_factor")},
                        **({"dataset": f"features:synthetic ({_SYNTHETIC.value})"}
                           if _SYNTHETIC.value else {})},
             "loss": _LOSS.value, "field": _FIELD.value, "steps": _STEPS.value,
             "window": _WINDOW.value, "rounds": _ROUNDS.value, "by": _BY.value,
             "variants": measure(flag_args)}
  write_report(_OUT.value, f"benchmarks_sweep_{_TAG.value}", results, to_markdown(results))


if __name__ == "__main__":
  app.run(main)
