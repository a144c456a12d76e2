"""Where MR2's guards cost time at K > B: the class-statistics update alone and the whole loss
(statistics, forward and backward), per iteration of a compiled loop, for an earlier version of the
libraries against this checkout, this checkout compiled a second time (the spread of two identical
programs), and this checkout without the finite-row check of the features (every row taken as
finite: what the guard that keeps non-finite rows out of the statistics costs).

    git worktree add /tmp/v42 42fd559
    python -m experiments.benchmarks.guard_parts --against=/tmp/v42 --size=512,512,1000 \
        --rounds=40 [--noxla_cpu_tuning] [--out=FILE.json]

Each round calls every variant's compiled loop once (20 iterations, inputs offset by a zero XLA
cannot prove zero, as in `loss_scaling._loss_fns`), in an order that reverses from round to round;
a variant's figure is the median over rounds, its ratio the median of the rounds' paired ratios to
the earlier version. Diagnostic: the figures of record come from `experiments.benchmarks.run`
('against').
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

import mr2_jax
from experiments.benchmarks.loss_against import import_version
from experiments.benchmarks.loss_scaling import benchmark_batch
from experiments.benchmarks.machine import machine_info
from experiments.common import xla_cpu
from mr2_reweight_core import checks


def define_flags() -> None:
  """The command's flags (defined when it runs, not on import: the tests import this module
  beside other benchmarks that define flags of the same names)."""
  flags.DEFINE_string("against", None, "Source tree of the earlier version (a git worktree "
                      "holding mr2_jax, reweight_jax, mr2_reweight_core).", required=True)
  flags.DEFINE_list("size", ["512", "512", "1000"], "B, d, K.")
  flags.DEFINE_integer("rounds", 40, "Rounds of one call per variant.")
  flags.DEFINE_bool("xla_cpu_tuning", True, "Add experiments.common.xla_cpu.TUNED_FLAGS to "
                    "XLA_FLAGS (the trainer's); --noxla_cpu_tuning: XLA's defaults.")
  flags.DEFINE_string("out", None, "Write the table as JSON here.")


LOOP = 20
PARTS = ("update", "loss")


def looped(lib, part: str, num_classes: int):
  """(logits, features, labels) → the compiled loop of `part` with `lib` (an mr2_jax module)."""

  def one(stats, logits, features, labels):
    if part == "update":
      new = lib.update_class_stats(stats, features, labels, decay=0.9, p=2.0)
      return new, jnp.sum(new.sq_mean_norm)

    def loss(lg, f):
      value, new, _ = lib.mr2_loss(lg, f, labels, stats)
      return value, new
    (value, new), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(logits, features)
    return new, value + 1e-12 * sum(jnp.sum(g) for g in grads)

  def run_loop(stats, logits, features, labels):
    def body(_, carry):
      stats, acc = carry
      zero = acc > 1e30  # never true; XLA cannot hoist the inputs out of the loop
      new, value = one(stats, logits + zero, features + zero, labels + zero.astype(labels.dtype))
      return new, acc + value
    return jax.lax.fori_loop(0, LOOP, body, (stats, jnp.float32(0)))

  compiled = jax.jit(run_loop)
  stats0 = lib.init_class_stats(num_classes)
  return lambda logits, features, labels: compiled(stats0, logits, features, labels)


def variants(against: str, part: str, args) -> dict:
  """{name: loop}: the earlier version, this checkout twice, and this checkout with every row
  taken as finite, each compiled for `args` (logits, features, labels)."""
  num_classes = args[0].shape[1]
  earlier = import_version(against)["mr2_jax"]
  fns = {"earlier": looped(earlier, part, num_classes),
         "this checkout": looped(mr2_jax, part, num_classes),
         "this checkout, compiled again": looped(mr2_jax, part, num_classes)}
  check = checks.check_finite_rows
  checks.check_finite_rows = lambda x, real, name: jnp.ones(x.shape[0], bool)
  try:
    fns["without the finite-row check"] = looped(mr2_jax, part, num_classes)
    # traced and compiled now, while the check is replaced
    jax.block_until_ready(fns["without the finite-row check"](*args))
  finally:
    checks.check_finite_rows = check
  return fns


def time_part(against: str, part: str, size: tuple[int, int, int], rounds: int) -> dict:
  args = benchmark_batch(*size)
  fns = variants(against, part, args)
  for fn in fns.values():
    jax.block_until_ready(fn(*args))
  seconds = {name: [] for name in fns}
  for r in range(rounds):
    for name in (list(fns) if r % 2 else list(fns)[::-1]):
      start = time.perf_counter()
      jax.block_until_ready(fns[name](*args))
      seconds[name].append((time.perf_counter() - start) / LOOP)
  base = np.asarray(seconds["earlier"])
  return {name: {"ms_per_iteration": 1e3 * float(np.median(s)),
                 "ratio": float(np.median(np.asarray(s) / base))}
          for name, s in seconds.items()}


def main(argv):
  del argv
  args = flags.FLAGS
  xla_cpu.configure(args.xla_cpu_tuning)
  size = tuple(int(x) for x in args.size)
  result = {"command": "python -m experiments.benchmarks.guard_parts " + " ".join(sys.argv[1:]),
            "size": {"B": size[0], "d": size[1], "K": size[2]}, "against": args.against,
            "rounds": args.rounds, "loop": LOOP, "machine": machine_info(),
            "parts": {part: time_part(args.against, part, size, args.rounds) for part in PARTS}}
  for part, rows in result["parts"].items():
    for name, row in rows.items():
      print(f"{part:7s} {name:32s} {row['ms_per_iteration']:7.3f} ms  {row['ratio']:.3f}×")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(result, f, indent=2)
      f.write("\n")


if __name__ == "__main__":
  define_flags()
  app.run(main)
