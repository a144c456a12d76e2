"""Where a small loss call's time goes: the loss benchmark's MR2 call (loss, statistics, forward and
backward, jitted; `loss_scaling._loss_fns`) against the floor of any jitted call that takes and
returns the same arrays — a compiled function that returns its inputs' shapes filled with zeros,
so no loss work — and against one iteration of the compiled loop (no dispatch).

    python -m experiments.benchmarks.call_floor --size=128,64,10 --calls=2000 [--noxla_cpu_tuning]

Calls alternate (loss, floor, loss, floor, ...) in one process, so that a drift of this shared
machine's speed falls on both; each row gives the median and 10th percentile of its calls. The
floor is the dispatch and buffer handling a call of this signature costs whatever it computes;
what is above it is the loss's own work.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import numpy as np
from absl import app
from absl import flags

from experiments.benchmarks.loss_scaling import _loss_fns
from experiments.benchmarks.machine import machine_info
from experiments.benchmarks.timing import call_floor
from experiments.common import xla_cpu

_SIZE = flags.DEFINE_list("size", ["128", "64", "10"], "B, d, K.")
_CALLS = flags.DEFINE_integer("calls", 2000, "Timed calls of each function.")
_TUNING = flags.DEFINE_bool("xla_cpu_tuning", True, "Add experiments.common.xla_cpu.TUNED_FLAGS to "
                            "XLA_FLAGS (the trainer's); --noxla_cpu_tuning: XLA's defaults.")
_LOOP = 20


def _alternated(fns, calls: int) -> list[list[float]]:
  seconds = [[] for _ in fns]
  for _ in range(calls):
    for i, fn in enumerate(fns):
      start = time.perf_counter()
      jax.block_until_ready(fn())
      seconds[i].append(time.perf_counter() - start)
  return seconds


def measure(batch: int, dim: int, classes: int, calls: int) -> dict:
  fns, _ = _loss_fns(batch, dim, classes, _LOOP)
  out = {}
  for name in ("mr2", "inverse_reweight"):
    fn, args, looped = fns[name]
    compiled = fn.lower(*args).compile()
    shapes = jax.eval_shape(fn, *args)
    floor = call_floor(fn, args)
    loss_call = lambda compiled=compiled, args=args: compiled(*args)
    floor_call = lambda floor=floor, args=args: floor(*args)
    for f in (loss_call, floor_call, looped):
      jax.block_until_ready(f())
      jax.block_until_ready(f())
    loss_s, floor_s = _alternated([loss_call, floor_call], calls)
    loop_s = [t / _LOOP for t in _alternated([looped], max(calls // _LOOP, 20))[0]]
    row = {}
    for label, seconds in (("call", loss_s), ("floor", floor_s), ("loop_iteration", loop_s)):
      ms = 1e3 * np.asarray(seconds)
      row[label] = {"median_ms": float(np.median(ms)), "p10_ms": float(np.percentile(ms, 10)),
                    "n": int(ms.size)}
    row["arrays_in"] = len(jax.tree.leaves(args))
    row["arrays_out"] = len(jax.tree.leaves(shapes))
    out[name] = row
    print(f"{name} B={batch} d={dim} K={classes}: call {row['call']['median_ms']:.3f} ms, "
          f"floor {row['floor']['median_ms']:.3f} ms, loop iteration "
          f"{row['loop_iteration']['median_ms']:.3f} ms ({row['arrays_in']} arrays in, "
          f"{row['arrays_out']} out)", flush=True)
  return out


def main(argv):
  del argv
  xla_cpu.configure(_TUNING.value)
  batch, dim, classes = (int(x) for x in _SIZE.value)
  result = {"machine": machine_info(), "command": "python -m experiments.benchmarks.call_floor "
            + " ".join(sys.argv[1:]), "size": [batch, dim, classes],
            "rows": measure(batch, dim, classes, _CALLS.value)}
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  app.run(main)
