"""mr2_jax.linen: the cosine classifier's value against NumPy (needs the `flax` extra)."""

import jax
import numpy as np
import pytest

import mr2_jax

pytest.importorskip("flax")


def test_cosine_classifier_matches_numpy_and_is_bounded_by_scale():
  rng = np.random.default_rng(0)
  features = rng.normal(size=(4, 6)).astype(np.float32) * 100
  head = mr2_jax.CosineClassifier(num_classes=3, scale=30.0)
  params = head.init(jax.random.key(0), features)
  logits = head.apply(params, features)
  kernel = np.asarray(params["params"]["kernel"], np.float64)
  f = features / np.linalg.norm(features, axis=1, keepdims=True)
  expected = 30.0 * f @ (kernel / np.linalg.norm(kernel, axis=0, keepdims=True))
  np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
  assert np.all(np.abs(logits) <= 30.0 + 1e-4)


def test_l2_normalize_zero_vector_has_finite_gradient():
  grad = jax.grad(lambda x: mr2_jax.l2_normalize(x).sum())(np.zeros(3, np.float32))
  assert np.all(np.isfinite(grad))
