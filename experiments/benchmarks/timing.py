"""Timing helpers of the sections of `experiments.benchmarks.run`: methods timed interleaved, round
by round; medians with their min–max; the share of CPU time the hypervisor stole while timing; and
`REPO`, the folder the sections' worker processes run in."""

from __future__ import annotations

import pathlib
import time
from typing import Any, Callable

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]


def summarize_times(seconds: list[float]) -> dict[str, float]:
  ms = 1e3 * np.asarray(seconds)
  return {"median_ms": float(np.median(ms)), "min_ms": float(ms.min()), "max_ms": float(ms.max()),
          "n": int(ms.size)}


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, per_round: int,
                block: Callable[[Any], Any]) -> dict[str, list[float]]:
  """Times each fn `per_round` times per round, round-robin over fns for `rounds` rounds."""
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      for _ in range(per_round):
        start = time.perf_counter()
        block(fn())
        times[name].append(time.perf_counter() - start)
  return times


def cpu_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
  """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is none.

  Steal is the time the hypervisor ran other guests while this machine had work: on this shared
  virtual machine it is what makes one run's step times 1.5–2× another's. A timed block records
  the share of its CPU time that was stolen (`steal_share`).
  """
  try:
    with open(path) as f:
      fields = [int(x) for x in f.readline().split()[1:]]
  except OSError:
    return None
  return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(start: tuple[int, int] | None, path: str = "/proc/stat") -> float | None:
  """The stolen share of the CPU time since `start` (`cpu_ticks()`), or None."""
  end = cpu_ticks(path)
  if start is None or end is None or end[1] == start[1]:
    return None
  return (end[0] - start[0]) / (end[1] - start[1])

