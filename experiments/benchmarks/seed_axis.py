"""Images/s of the trainer with seeds on a batch axis (issue 49.7): one run (S = 1) against S seeds
stacked in one program (`experiments.train.seed_axis`), each with the input cut on the host and
with the training split in device memory (`config.input_on_device`).

    python -m experiments.benchmarks.seed_axis --config=experiments/configs/cifar10_lt_200.py \
        --config.data_dir=../shared/data/cifar10_jpeg --seeds=3 --steps=40 --rounds=2 \
        --out=results/benchmarks

Each variant trains in its own process through the trainer's own loop (`loop.plan`, `start`,
`train`; `seed_axis.start_seeds`, `train_seeds`), `--steps` steps logged every `--window` steps, no
evaluation pass; its images/s are the trainer's own (metrics.jsonl's `images_per_sec`, training
time only) over the windows after the first (which holds the compilation), summed over the seeds.
Variants run interleaved, round by round (this machine is shared and noisy: only ratios within one
run mean something). Writes benchmarks_seed_axis_<tag>.{json,md}.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
from typing import Any

from absl import app
from absl import flags
from ml_collections import config_flags

from experiments.benchmarks.machine import machine_info
from experiments.benchmarks.report import write_report
from experiments.benchmarks import trainer_rates
from experiments.benchmarks.timing import REPO
from experiments.benchmarks.timing import timed_config

# key → (name, seeds on the axis (None: --seeds), input on the device, how the step runs over them)
VARIANTS = {"s1_host": ("S=1, host input", 1, False, "vmap"),
            "s1_device": ("S=1, device input", 1, True, "vmap"),
            "vmap_host": ("S={S} vmap, host input", None, False, "vmap"),
            "vmap_device": ("S={S} vmap, device input", None, True, "vmap"),
            "map_host": ("S={S} map, host input", None, False, "map"),
            "map_device": ("S={S} map, device input", None, True, "map")}

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/cifar10_lt_200.py",
                                          "The recipe timed (its data_dir, batch size, model).")
_SEEDS = flags.DEFINE_integer("seeds", 3, "S of the stacked variants.")
_STEPS = flags.DEFINE_integer("steps", 40, "Training steps per variant and round.")
_WINDOW = flags.DEFINE_integer("window", 10, "Steps per logging window (images/s per window).")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Rounds over the variants.")
_OUT = flags.DEFINE_string("out", str(REPO / "results" / "benchmarks"), "Output folder.")
_TAG = flags.DEFINE_string("tag", "cpu", "Output file suffix.")
_VARIANTS = flags.DEFINE_list("variants", list(VARIANTS), f"The variants to run, of {list(VARIANTS)}.")
_WORKER = flags.DEFINE_string("worker", None, "Internal: run one variant, 'S,device_input,by'.")



def train_variant(config, seeds: int, device_input: bool, by: str, steps: int, window: int,
                  workdir: pathlib.Path) -> list[float]:
  """Aggregate images/s per logging window after the first: `seeds` runs stacked (`by`: the step
  vmapped or mapped over them) or one solo run, trained `steps` steps by the trainer's loop in
  `workdir`."""
  configs = [timed_config(config, s, device_input, window) for s in range(seeds)]
  return trainer_rates.window_rates(configs, [workdir / f"seed{s}" for s in range(seeds)], steps,
                                    stacked=seeds > 1, by=by)


def run_worker(spec: str) -> None:
  seeds, device_input, by = spec.split(",")
  with tempfile.TemporaryDirectory() as workdir:
    rates = train_variant(_CONFIG.value, int(seeds), device_input == "1", by, _STEPS.value,
                          _WINDOW.value, pathlib.Path(workdir))
  print("RATES " + json.dumps(rates), flush=True)


def measure(flag_args: list[str]) -> dict[str, Any]:
  """Every variant in its own process (given this command's `flag_args`), `--rounds` rounds,
  interleaved."""
  unknown = sorted(set(_VARIANTS.value) - set(VARIANTS))
  if unknown:
    raise ValueError(f"--variants: unknown {unknown}; known: {list(VARIANTS)}")
  variants = {name.format(S=_SEEDS.value): (seeds or _SEEDS.value, device, by)
              for key, (name, seeds, device, by) in VARIANTS.items() if key in _VARIANTS.value}
  rates = trainer_rates.interleaved(
      "experiments.benchmarks.seed_axis", flag_args,
      {name: f"{seeds},{int(device)},{by}" for name, (seeds, device, by) in variants.items()},
      _ROUNDS.value, "images")
  return trainer_rates.summary(rates, "images")


def to_markdown(results: dict[str, Any]) -> list[str]:
  config = results["config"]
  lines = [f"Aggregate training images/s (all seeds), {config['model']} on {config['dataset']}, "
           f"batch {config['batch_size']} per seed, {results['steps']} steps per variant, median "
           f"over {results['rounds']} rounds' windows after the first (min–max); ratios within "
           "this run.", ""]
  return lines + trainer_rates.markdown_rows(results["variants"], "images",
                                             next(iter(results["variants"])))


def main(argv):
  del argv  # the flags are passed on to the workers from sys.argv
  if _WORKER.value:
    run_worker(_WORKER.value)
    return
  config = _CONFIG.value
  flag_args = [arg for arg in sys.argv[1:] if not arg.startswith(("--out", "--tag"))]
  results = {"machine": machine_info(), "command": " ".join(["python -m experiments.benchmarks."
                                                              "seed_axis", *sys.argv[1:]]),
             "config": {k: config[k] for k in ("model", "dataset", "batch_size", "loss")},
             "steps": _STEPS.value, "window": _WINDOW.value, "rounds": _ROUNDS.value,
             "variants": measure(flag_args)}
  write_report(_OUT.value, f"benchmarks_seed_axis_{_TAG.value}", results, to_markdown(results))


if __name__ == "__main__":
  app.run(main)
