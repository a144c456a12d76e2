"""mr2_reweight_core.class_sums.example_class_counts against NumPy counts, on one and on 8 devices."""

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
