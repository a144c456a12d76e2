"""mr2_reweight_core.checks: the one out-of-range label guard (no clipped or ad-hoc masked labels
anywhere else) and `take_class_values` (NaN for a label out of range, never another class's
value)."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

from mr2_reweight_core import checks

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_labels_are_guarded_in_one_place():
  """No clip of labels and no ad-hoc `where(in_range, labels, …)` outside `mr2_reweight_core.checks`."""
  for package in ("mr2_jax", "reweight_jax", "mr2_reweight_core", "experiments"):
    for path in (REPO / package).rglob("*.py"):
      if path.name == "checks.py" and package == "mr2_reweight_core":
        continue
      text = path.read_text()
      for pattern in ("clip(labels", "where(in_range, labels"):
        assert pattern not in text, f"{path.relative_to(REPO)}: {pattern}"
      # Any ad-hoc `where(mask, labels…, 0)`: index with `checks.index_labels` instead.
      found = re.search(r"where\([^,()]+, labels\w*, 0\)", text)
      assert found is None, f"{path.relative_to(REPO)}: {found and found.group()}"


def test_take_class_values_is_nan_for_out_of_range_labels():
  values = jnp.asarray([1.0, 2.0, 3.0])
  labels = jnp.asarray([0, 2, 3, -1])
  in_range = (labels >= 0) & (labels < 3)
  out = np.asarray(checks.take_class_values(values, labels, in_range))
  np.testing.assert_array_equal(out[:2], [1.0, 3.0])
  assert np.all(np.isnan(out[2:]))  # never class 2's or class 0's value


def test_finite_rows_flags_every_non_finite_value_and_no_finite_one():
  """Σ_j (x_ij − x_ij): NaN, +inf and −inf rows are flagged, huge finite rows are not (a sum of
  |x| would overflow), whatever the width; an empty batch gives an empty mask."""
  for width in (3, 64, 2048):
    x = np.random.default_rng(0).normal(size=(6, width)).astype(np.float32)
    x[0, width // 2] = np.nan
    x[1, -1] = np.inf
    x[2, 0] = -np.inf
    x[3] = 3e38
    for fn in (checks.finite_rows, jax.jit(checks.finite_rows)):
      np.testing.assert_array_equal(fn(x), [False, False, False, True, True, True])
  assert checks.finite_rows(np.zeros((0, 4), np.float32)).shape == (0,)
