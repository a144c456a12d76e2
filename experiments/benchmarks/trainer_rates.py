"""Training speed through the trainer's own loop, for the benchmarks that compare ways of running
it (`seed_axis`, `sweep`): the examples/s of a solo run or of a stack of runs per logging window,
and variants run each in its own process, round by round."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Sequence

import numpy as np

from experiments.benchmarks.timing import REPO
from experiments.train import loop
from experiments.train import seed_axis


def window_rates(configs: Sequence, workdirs: Sequence[pathlib.Path], steps: int, *,
                 stacked: bool, by: str = "vmap") -> list[float]:
  """Aggregate examples/s per logging window after the first (which holds the compilation), the
  trainer's `images_per_sec` summed over the runs: `configs` trained `steps` steps in `workdirs`,
  as one solo run (`stacked` False, one config) or stacked in one program (`seed_axis`, the
  members' swept values as it reads them)."""
  if stacked:
    seed_axis.check_stackable(configs)
    runs = [loop.plan(c, w, steps) for c, w in zip(configs, workdirs)]
    seed_axis.train_seeds(runs, *seed_axis.start_seeds(runs, False), by=by,
                          swept=seed_axis.swept_values(configs))
  else:
    run = loop.plan(configs[0], workdirs[0], steps)
    loop.train(run, *loop.start(run, False))
  per_run = [[json.loads(line)["images_per_sec"]
              for line in (w / "metrics.jsonl").read_text().splitlines()][1:] for w in workdirs]
  return [float(x) for x in np.sum(per_run, axis=0)]


def interleaved(module: str, flag_args: Sequence[str], workers: dict[str, str], rounds: int,
                unit: str) -> dict[str, list[float]]:
  """{variant: its rates over the rounds}: each variant `python -m <module> <flag_args>
  --worker=<its value>` in its own process, which prints its rates after 'RATES '; `rounds` rounds
  over the variants in turn (this machine is shared: only ratios within one run mean something)."""
  rates: dict[str, list[float]] = {name: [] for name in workers}
  for round_index in range(rounds):
    for name, worker_value in workers.items():
      worker = subprocess.run([sys.executable, "-m", module, *flag_args,
                               f"--worker={worker_value}"], cwd=REPO, capture_output=True,
                              text=True, check=False)
      if worker.returncode:
        raise RuntimeError(f"{name}: the worker failed:\n{worker.stderr[-3000:]}")
      rates[name] += json.loads(worker.stdout.split("RATES ", 1)[1])
      print(f"round {round_index + 1}, {name}: {np.median(rates[name]):.0f} {unit}/s", flush=True)
  return rates


def summary(rates: dict[str, list[float]], unit: str) -> dict[str, dict]:
  """Per variant: the median of its window rates (`<unit>_per_sec_median`), their min and max,
  the number of windows, and the median's ratio to the first variant's (`ratio_to_first`)."""
  base = float(np.median(next(iter(rates.values()))))
  return {name: {f"{unit}_per_sec_median": float(np.median(r)), "min": float(np.min(r)),
                 "max": float(np.max(r)), "windows": len(r),
                 "ratio_to_first": float(np.median(r)) / base} for name, r in rates.items()}


def markdown_rows(variants: dict[str, dict], unit: str, ratio_header: str) -> list[str]:
  """The table of `summary`'s rows: variant, rate, min–max, ratio to the first."""
  lines = [f"| variant | {unit}/s | min–max | × {ratio_header} |", "|---|---|---|---|"]
  for name, r in variants.items():
    lines.append(f"| {name} | {r[f'{unit}_per_sec_median']:.0f} | {r['min']:.0f}–{r['max']:.0f} "
                 f"| {r['ratio_to_first']:.2f} |")
  return lines
