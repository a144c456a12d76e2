"""Section 'ablations' of `experiments.benchmarks.run`: the two library choices behind the scaling
numbers, each against its alternative in the same run — a jitted function with and without one
(unused) `checkify.check`, and the MR2 loss with ℓ_s̄ tiled over same-class pairs vs forced to the
dense [B, B] product."""

from __future__ import annotations

import unittest.mock

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from experiments.benchmarks.loss_scaling import _loss_fns
from experiments.benchmarks.timing import interleaved, summarize_times
from mr2_jax import representation_margin_forms


def bench_ablations(quick: bool) -> dict:

  x = jnp.ones(10)

  def with_check(x):
    checkify.check(jnp.all(x > -100), "x: {lo}", lo=jnp.min(x), debug=True)
    return x + 1

  calls = {"plain": jax.jit(lambda x: x + 1), "with_unused_check": jax.jit(with_check)}
  reps = 3 if quick else 5
  times = interleaved({k: (lambda f=f: f(x)) for k, f in calls.items()}, reps, 2000, warmup=1)
  dispatch = {k: {**summarize_times(v), "median_us": 1e3 * summarize_times(v)["median_ms"]}
              for k, v in times.items()}

  rows = []
  for batch, dim, classes in ([(512, 2048, 1000)] if quick else
                              [(512, 2048, 10), (512, 2048, 1000), (512, 2048, 8142)]):
    fns = {}
    tiled_fn, args, _ = _loss_fns(batch, dim, classes, 1)[0]["mr2"]
    fns["tiled"] = lambda f=tiled_fn, a=args: f(*a)
    with unittest.mock.patch.object(representation_margin_forms, "TILED_MIN_WORK", float("inf")):
      dense_fn, dense_args, _ = _loss_fns(batch, dim, classes, 1)[0]["mr2"]
      jax.block_until_ready(dense_fn(*dense_args))  # traced and compiled with the dense form
    fns["dense"] = lambda f=dense_fn, a=dense_args: f(*a)
    times = interleaved(fns, reps, 10, warmup=1)
    rows.append({"batch": batch, "dim": dim, "classes": classes,
                 **{k: summarize_times(v) for k, v in times.items()}})
  return {"dispatch": dispatch, "representation_margin": rows}
