"""mr2_reweight_core, the per-class core: the dependency direction of the three packages, the one
out-of-range label guard, and class means (NaN for a class without examples)."""

import ast
import pathlib
import re

import jax.numpy as jnp
import numpy as np
import pytest

from mr2_reweight_core import checks
from mr2_reweight_core import metrics

REPO = pathlib.Path(__file__).resolve().parents[3]


def imported_packages(package):
  found = set()
  for path in (REPO / package).rglob("*.py"):
    name = path.relative_to(REPO / package).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        found |= {(name, alias.name.split(".")[0]) for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module:
        found.add((name, node.module.split(".")[0]))
  return found


@pytest.mark.parametrize("package, forbidden", [
    ("mr2_jax", {"reweight_jax", "experiments"}),
    ("reweight_jax", {"mr2_jax", "experiments"}),
    ("mr2_reweight_core", {"mr2_jax", "reweight_jax", "experiments"}),
])
def test_dependency_direction(package, forbidden):
  """mr2_jax → mr2_reweight_core ← reweight_jax; neither method package imports the other, in any of
  their modules (sub-packages included)."""
  offending = sorted((f, m) for f, m in imported_packages(package) if m in forbidden)
  assert not offending, offending


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


def test_class_mean_is_nan_for_absent_classes():
  sums = np.array([3.0, 0.0, 5.0])
  counts = np.array([2.0, 0.0, 4.0])
  out = metrics.class_mean(sums, counts)
  np.testing.assert_allclose(out[[0, 2]], [1.5, 1.25])
  assert np.isnan(out[1])
  np.testing.assert_allclose(metrics.class_mean(np.ones((3, 2)), counts)[2], [0.25, 0.25])
