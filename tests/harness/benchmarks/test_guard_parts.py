"""experiments/benchmarks/guard_parts.py: its variants at a tiny size, against this checkout as the
earlier version: every variant times, and the one without the finite-row check really compiles
without it: a class with one non-finite row of several is then left out whole (its moments
overflow), where the checkout's check keeps only that row out and updates the class."""

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import guard_parts
from experiments.benchmarks.loss_scaling import benchmark_batch

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.slow  # ≈ 7 s: eight small compilations
def test_every_variant_times_and_only_one_lacks_the_row_check():
  logits, features, labels = benchmark_batch(16, 8, 40)
  labels = np.asarray(labels).copy()
  labels[:3] = 7  # class 7: three rows, one of them non-finite
  features = np.asarray(features).copy()
  features[1, 2] = np.inf
  args = (logits, jnp.asarray(features), jnp.asarray(labels))
  fns = guard_parts.variants(str(REPO), "update", args)
  assert list(fns) == ["earlier", "this checkout", "this checkout, compiled again",
                       "without the finite-row check"]
  seen = {name: bool(fn(*args)[0].seen[7]) for name, fn in fns.items()}
  assert seen["this checkout"] and seen["this checkout, compiled again"]
  assert not seen["without the finite-row check"]
  rows = guard_parts.time_part(str(REPO), "loss", (16, 8, 40), rounds=2)
  assert set(rows) == set(fns)
  assert all(row["ms_per_iteration"] > 0 and np.isfinite(row["ratio"]) for row in rows.values())
  assert rows["earlier"]["ratio"] == 1.0
