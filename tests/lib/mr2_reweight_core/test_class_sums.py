"""mr2_reweight_core.class_sums: example_class_counts and skipped_rows against NumPy counts, on one
and on 8 devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mr2_reweight_core import class_sums


@pytest.mark.parametrize("num_classes", [3, 50, 1000])  # K ≤ B, K > B local, K > B global
def test_example_class_counts(num_classes):
  rng = np.random.default_rng(num_classes)
  labels = rng.integers(0, min(num_classes, 12), size=32).astype(np.int32)
  labels[5] = num_classes - 1  # the last class, once
  valid = rng.random(32) > 0.25
  expected = np.array([np.sum(valid & (labels == y)) for y in labels], np.float64)
  single = np.asarray(class_sums.example_class_counts(jnp.asarray(labels), jnp.asarray(valid),
                                                      num_classes))
  np.testing.assert_array_equal(single[valid], expected[valid])
  assert np.all(np.isnan(single[~valid]))
  sharded = jax.pmap(lambda y, v: class_sums.example_class_counts(y, v, num_classes,
                                                                  axis_name="batch"),
                     axis_name="batch")(labels.reshape(8, 4), valid.reshape(8, 4))
  np.testing.assert_array_equal(np.asarray(sharded).reshape(-1), single)


@pytest.mark.parametrize("num_classes", [3, 1000])  # slot k is class k; compacted slots
@pytest.mark.parametrize("with_where", [False, True])
def test_skipped_rows(num_classes, with_where):
  """The real rows the counts leave out, from the counts: NumPy's count of real rows not counted,
  alone and psum-reduced over 8 devices (each device sees the global value)."""
  rng = np.random.default_rng(num_classes + with_where)
  labels = rng.integers(0, min(num_classes, 12), size=32).astype(np.int32)
  real = rng.random(32) > 0.3 if with_where else np.ones(32, bool)
  counted = real & (rng.random(32) > 0.2)  # a subset of the real rows, as the losses count
  expected = int(np.sum(real & ~counted))
  assert expected > 0

  def skipped(labels, real, counted, axis_name=None):
    slots = class_sums.class_slots(labels, real, num_classes, axis_name=axis_name,
                                   counted=counted)
    return class_sums.skipped_rows(real, slots, axis_name=axis_name)

  single = jax.jit(skipped)(labels, real, counted)
  assert single.dtype == jnp.int32 and int(single) == expected
  sharded = jax.pmap(lambda *a: skipped(*a, axis_name="batch"), axis_name="batch")(
      labels.reshape(8, 4), real.reshape(8, 4), counted.reshape(8, 4))
  np.testing.assert_array_equal(np.asarray(sharded), np.full(8, expected))
