"""Where long runs stand: for every run folder under the given folders (one holding a config.json:
a training workdir, or a run parked by `tools/standard_size.sh --park`), its last
logged step of the total, the epoch, the loss, the training speed (median images/s of the last
logging windows), the latest checkpoint and, at that speed, the hours left.

    python -m experiments.report.progress -- workdirs/cifar10_lt_200 \\
        results/cifar10_lt_200/unfinished

It reads the files only (config.json, metrics.jsonl, checkpoints/, summary.json): it can run beside
the training it reports on.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
import sys
from collections.abc import Sequence
from typing import NamedTuple

from absl import flags

from experiments.common import cli
from experiments.report import run_tables
from experiments.report import seed_stats


class RunProgress(NamedTuple):
  """One run's position. `steps_total` is config.num_epochs × the steps per epoch the log shows
  (None before the first training record); `images_per_sec` the median of the last logging windows;
  `hours_left` the remaining steps at that speed (0 when finished, None when unknown)."""
  run: str
  finished: bool
  step: int
  steps_total: int | None
  epoch: float
  loss: float | None
  train_accuracy: float | None
  images_per_sec: float | None
  checkpoint: int | None
  hours_left: float | None


def find_runs(roots: Sequence[str | pathlib.Path]) -> list[pathlib.Path]:
  """The run folders (those with a config.json) under each root, the root itself included, in
  path order; a root that does not exist is an error."""
  runs = []
  for root in map(pathlib.Path, roots):
    if not root.is_dir():
      raise FileNotFoundError(f"{root}: no such folder")
    runs += sorted(path.parent for path in root.rglob("config.json")
                   if "checkpoints" not in path.parts[len(root.parts):])
  return runs


def latest_checkpoint(run: pathlib.Path) -> int | None:
  steps = [int(p.name) for p in (run / "checkpoints").glob("*") if p.name.isdigit()]
  return max(steps, default=None)


def run_progress(run: str | pathlib.Path, window: int = 20) -> RunProgress:
  """The position of the run in folder `run`, its speed from the last `window` training records
  (those with a loss)."""
  run = pathlib.Path(run)
  config = json.loads((run / "config.json").read_text())
  training = [r for r in run_tables.read_jsonl(run / "metrics.jsonl")
              if "loss" in r and r.get("epoch", 0) > 0]
  finished = (run / "summary.json").exists()
  if not training:
    return RunProgress(str(run), finished, 0, None, 0.0, None, None, None, latest_checkpoint(run),
                       0.0 if finished else None)
  last = training[-1]
  steps_per_epoch = round(last["step"] / last["epoch"])
  steps_total = int(config["num_epochs"] * steps_per_epoch)
  speeds = [r["images_per_sec"] for r in training[-window:] if "images_per_sec" in r]
  images_per_sec = statistics.median(speeds) if speeds else None
  if finished:
    hours_left = 0.0
  elif images_per_sec:
    remaining = max(steps_total - last["step"], 0)
    hours_left = remaining * config["batch_size"] / images_per_sec / 3600
  else:
    hours_left = None
  return RunProgress(str(run), finished, int(last["step"]), steps_total, float(last["epoch"]),
                     last.get("loss"), last.get("train_accuracy"), images_per_sec,
                     latest_checkpoint(run), hours_left)


def _number(value, fmt: str) -> str:
  return "" if value is None or (isinstance(value, float) and math.isnan(value)) else (
      format(value, fmt))


def progress_markdown(rows: Sequence[RunProgress]) -> str:
  """One table row per run."""
  lines = seed_stats.markdown_table(
      ["run", "state", "step", "epoch", "loss", "train acc", "images/s", "checkpoint",
       "hours left"],
      [[row.run, "finished" if row.finished else "unfinished",
        f"{row.step} / {_number(row.steps_total, 'd') or '?'}", _number(row.epoch, ".1f"),
        _number(row.loss, ".3f"), _number(row.train_accuracy, ".3f"),
        _number(row.images_per_sec, ".0f"), _number(row.checkpoint, "d"),
        _number(row.hours_left, ".1f")] for row in rows])
  return "\n".join(lines) + "\n"


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_integer("window", 20, "Training records (logging windows) the speed is the median "
                       "of.", lower_bound=1, flag_values=flag_values)


def progress_command(args: flags.FlagValues, roots: list[str]) -> int:
  if not roots:
    return cli.report("expected one or more folders (after --)")
  runs = find_runs(roots)
  if not runs:
    return cli.report(f"no run (a folder with a config.json) under {', '.join(roots)}")
  print(progress_markdown([run_progress(run, args.window) for run in runs]), end="")
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m experiments.report.progress FOLDER...`; `argv` (without the program name) runs it
  from Python."""
  return cli.run_command(define_flags, progress_command, argv, passthrough=True)


if __name__ == "__main__":
  sys.exit(main())
