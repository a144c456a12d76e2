"""experiments/models/feature_heads.py: the linear head and the MLP adapter on features."""

import jax
import jax.numpy as jnp
import numpy as np

from experiments import models


def test_linear_head_is_phi_w_plus_b_from_a_small_normal_draw():
  model = models.create_model("linear_head", 10)
  x = jax.random.normal(jax.random.key(1), (5, 1280))
  variables = model.init(jax.random.key(0), x, train=False)
  kernel, bias = variables["params"]["head"]["kernel"], variables["params"]["head"]["bias"]
  assert kernel.shape == (1280, 10) and not np.any(bias)
  # 12,800 draws of N(0, 0.01²): their std within 3 % of 0.01.
  np.testing.assert_allclose(float(jnp.std(kernel)), 0.01, rtol=0.03)
  logits, features = model.apply(variables, x, train=True)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(x) @ np.asarray(kernel), rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_array_equal(features, x)


def test_mlp_adapter_classifies_its_hidden_features():
  model = models.create_model("mlp_adapter", 3)
  x = jax.random.normal(jax.random.key(1), (4, 12))
  variables = model.init(jax.random.key(0), x, train=False)
  params = variables["params"]
  logits, hidden = model.apply(variables, x, train=True)
  expected = np.maximum(np.asarray(x) @ params["adapter"]["kernel"] + params["adapter"]["bias"], 0)
  assert hidden.shape == (4, 256)
  np.testing.assert_allclose(np.asarray(hidden), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(logits),
                             expected @ params["head"]["kernel"] + params["head"]["bias"],
                             rtol=1e-5, atol=1e-5)
