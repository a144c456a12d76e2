"""Tests for experiments/models (the networks by name, `zoo`): parameter counts, output shapes, heads, BatchNorm state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import models


def init(model, shape, seed=0):
  x = jax.random.normal(jax.random.key(seed), shape)
  return model.init(jax.random.key(1), x, train=False), x


def abstract_variables(model, shape):
  """Shapes of the variables without allocating or computing them (WRN-28-10 is 36 M parameters)."""
  return jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(shape), train=False))


def check_forward(model, shape, feature_dim, num_classes):
  variables, x = init(model, shape)
  assert set(variables) == {"params", "batch_stats"}
  (logits, features), updates = model.apply(variables, x, train=True, mutable=["batch_stats"])
  assert logits.shape == (shape[0], num_classes) and features.shape == (shape[0], feature_dim)
  assert jnp.isfinite(logits).all() and jnp.isfinite(features).all()
  # Training mode moves the running statistics; evaluation mode reads them and mutates nothing.
  changed = jax.tree.map(lambda a, b: not np.allclose(a, b), variables["batch_stats"],
                         updates["batch_stats"])
  assert any(jax.tree.leaves(changed))
  eval_logits, eval_features = model.apply(variables, x, train=False)
  assert eval_logits.shape == logits.shape and eval_features.shape == features.shape
  # In evaluation an example's output does not depend on the rest of the batch.
  single_logits, _ = model.apply(variables, x[:1], train=False)
  np.testing.assert_allclose(single_logits, eval_logits[:1], rtol=1e-4, atol=1e-4)
  return variables, logits, features


def test_resnet32_parameter_count():
  variables = abstract_variables(models.create_model("resnet32", 10), (1, 32, 32, 3))
  num_params = models.count_params(variables["params"])
  assert 450_000 <= num_params <= 480_000
  # 464,154 is the count of the PyTorch reference with option-A (parameter-free) shortcuts.
  assert num_params == 464_154


def test_wrn28_10_parameter_count_and_shapes():
  model = models.create_model("wrn28_10", 10)
  variables = abstract_variables(model, (1, 32, 32, 3))
  assert 36_400_000 <= models.count_params(variables["params"]) <= 36_600_000
  logits, features = jax.eval_shape(lambda v: model.apply(v, jnp.zeros((1, 32, 32, 3)),
                                                          train=False), variables)
  assert logits.shape == (1, 10) and features.shape == (1, 640)


@pytest.mark.parametrize("head", ["linear", "cosine"])
@pytest.mark.parametrize("name,shape,feature_dim", [
    pytest.param("resnet32", (3, 8, 8, 3), 64, marks=pytest.mark.slow),  # ≈ 20 s; counts above
    ("small_cnn", (3, 8, 8, 1), 128),
    ("small_cnn", (3, 28, 28, 1), 128),
])
def test_output_shapes(name, shape, feature_dim, head):
  model = models.create_model(name, 7, head=head)
  variables, logits, _ = check_forward(model, shape, feature_dim, 7)
  head_params = variables["params"]["head"]
  if head == "cosine":
    assert set(head_params) == {"kernel"}
    assert jnp.abs(logits).max() <= 30.0 + 1e-4
  else:
    assert set(head_params) == {"kernel", "bias"}


@pytest.mark.parametrize("head", ["linear", "cosine"])
def test_tiny_wide_resnet_forward(head):
  model = models.WideResNet(num_classes=5, depth=10, widen=2, head=head, cosine_scale=16.0)
  _, logits, _ = check_forward(model, (2, 8, 8, 3), 128, 5)
  if head == "cosine":
    assert jnp.abs(logits).max() <= 16.0 + 1e-4


def test_cosine_scale_is_passed_through():
  model = models.create_model("small_cnn", 4, head="cosine", cosine_scale=2.0)
  variables, x = init(model, (4, 8, 8, 1))
  logits, _ = model.apply(variables, x, train=False)
  assert jnp.abs(logits).max() <= 2.0 + 1e-5


def test_axis_name_averages_batch_statistics_across_devices():
  x = jax.random.normal(jax.random.key(0), (2, 4, 8, 8, 1)) + jnp.arange(2.0)[:, None, None, None,
                                                                            None]
  local = models.create_model("small_cnn", 3)
  variables = local.init(jax.random.key(1), x[0], train=False)
  _, whole_batch = local.apply(variables, x.reshape(8, 8, 8, 1), train=True,
                               mutable=["batch_stats"])
  synced = models.create_model("small_cnn", 3, axis_name="batch")
  _, per_device = jax.vmap(
      lambda xs: synced.apply(variables, xs, train=True, mutable=["batch_stats"]),
      axis_name="batch")(x)
  for expected, got in zip(jax.tree.leaves(whole_batch), jax.tree.leaves(per_device)):
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], expected, rtol=1e-5, atol=1e-6)


def test_unknown_names_raise():
  with pytest.raises(ValueError, match="resnet1000"):
    models.create_model("resnet1000", 10)
  with pytest.raises(ValueError, match="arcface"):
    models.create_model("resnet32", 10, head="arcface")


def test_count_params():
  assert models.count_params({"a": jnp.zeros((3, 4)), "b": {"c": jnp.zeros(5)}}) == 17


def _resnet32_param_count(width, num_classes):
  """Conv weights (3×3, no bias), two BatchNorm parameters per channel, the linear head."""
  total = 27 * width + 2 * width  # stem conv + its BN
  channels = width
  for stage in range(3):
    filters = width * 2 ** stage
    for block in range(5):
      total += 9 * channels * filters + 9 * filters * filters + 4 * filters
      channels = filters
  return total + channels * num_classes + num_classes


@pytest.mark.parametrize("name, width", [("resnet32", 16), ("resnet32_w32", 32),
                                         ("resnet32_w64", 64)])
def test_resnet32_widths(name, width):
  """ETF-DR's CIFAR-100 (w = 32, d = 128) and GLMC's (w = 64, d = 256) ResNet-32: parameter counts
  from the layer formula (464,154 at w = 16, the PyTorch reference's) and the feature width 4w."""
  variables = abstract_variables(models.create_model(name, 10), (1, 32, 32, 3))
  assert models.count_params(variables["params"]) == _resnet32_param_count(width, 10)
  assert variables["params"]["head"]["kernel"].shape == (4 * width, 10)


def test_etf_head_is_the_fixed_simplex_etf_on_normalised_features():
  """head='etf': the parameter 'etf' is `reweight_jax.baselines.etf_classifier(K, d, etf_seed)`, the features
  the model returns are BatchNorm-ed and L2-normalised (unit norm) and the logits are hᵀM."""
  import reweight_jax
  model = models.create_model("small_cnn", 5, head="etf", etf_seed=3)
  x = np.random.default_rng(0).normal(size=(4, 8, 8, 3)).astype(np.float32)
  variables = model.init(jax.random.key(0), x, train=False)
  etf = np.asarray(variables["params"]["head"]["etf"])
  np.testing.assert_array_equal(etf, np.asarray(reweight_jax.baselines.etf_classifier(5, 128, 3)))
  assert "norm" in variables["batch_stats"]["head"]
  logits, features = model.apply(variables, x, train=False)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(features), axis=1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(features) @ etf, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="dim"):  # d = 128 < K = 200: no simplex ETF
    models.create_model("small_cnn", 200, head="etf").init(jax.random.key(0), x, train=False)
