"""The machine a run of `experiments.benchmarks.run` timed on (CPU, versions, date) and a probe of
how fast it runs right now (`machine_speed`), recorded in every run's header."""

from __future__ import annotations

import os
import pathlib
import platform
import time
from typing import Any

import flax
import jaxlib
import numpy as np

from experiments.benchmarks.timing import interleaved
from experiments.train import loop


def machine_speed(repeats: int = 15) -> dict[str, float]:
  """A code-independent probe of how fast this (shared, virtual) machine runs right now: NumPy's
  [1024, 1024] float32 matmul (GFLOP/s) and a 64 MB array copy (GB/s), medians of `repeats`.

  The same code has run 2–2.5× slower on this machine in the evening than early in the morning;
  absolute times from different runs compare only alongside this probe (ratios within a run, which
  interleave their methods, need no probe).
  """
  a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
  big = np.ones(16 << 20, np.float32)
  out = np.empty_like(big)
  seconds = interleaved({"matmul": lambda: a @ a, "copy": lambda: np.copyto(out, big)},
                        rounds=repeats, per_round=1)
  return {"numpy_matmul_gflops": 2 * 1024 ** 3 / float(np.median(seconds["matmul"])) / 1e9,
          "copy_gb_per_s": 2 * big.nbytes / float(np.median(seconds["copy"])) / 1e9}


def machine_info() -> dict[str, Any]:
  cpu = "unknown"
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return {**loop.runtime_info(), "cpu": cpu, "cores": os.cpu_count(),
          "python": platform.python_version(), "jaxlib": jaxlib.__version__,
          "flax": flax.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          "speed_probe": machine_speed()}
