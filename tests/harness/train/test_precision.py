"""bfloat16 compute (`config.compute_dtype`, the models' `dtype`): the parameters, the optimizer
state, the BatchNorm statistics and the class statistics stay float32, the convolutions run in bf16,
the model returns float32 logits and features (`layers.pool`: why), and on the same batch and the
same parameters the MR2 class statistics, the MR2 loss and the inverse-reweighted loss agree with
the float32 run within a tolerance derived from bf16's rounding (`DEPTH`, `EPS`); one jitted train
step and a short trainer run in bf16 are finite.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax
import reweight_jax
from experiments.configs import schema
from experiments import models
from experiments.train import loop
from experiments.train import train_state
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from tests.harness.train.test_loop import digits_train
from tests.harness.train.test_loop import run_steps
from tests.harness.train.test_loop import tiny_config

EPS = 2.0 ** -8  # bf16's unit roundoff: 8 significant bits, |round(x) − x| ≤ 2⁻⁸·|x|
# Convolutions in sequence, each rounding its output (and its BatchNorm's) to bf16: SmallCNN's 3,
# ResNet-32's stem + 15 blocks × 2.
DEPTH = {"small_cnn": 3, "resnet32": 31}
# Tolerance (relative, per class for A_k and V_k, on the scalar for each loss): DEPTH·EPS. Each
# layer's rounding is a relative error of its output that the following layers carry (BatchNorm
# rescales an activation, and its error with it), so the errors add up layer by layer: the measured
# errors grow with the depth about linearly, ≈ 0.2·DEPTH·EPS for A in both networks.
# Measured max |bf16 − f32| / |f32| on a batch of 64 (32) long-tailed digits, as a fraction of
# DEPTH·EPS (0.0117 for small_cnn, 0.121 for resnet32), at initialisation (10 seeds small_cnn,
# 4 + 2 resnet32) / after f32 SGD steps (150 and 400 steps small_cnn, 40 resnet32; 3–4 seeds):
#   small_cnn  A 0.17 / 0.12    V 0.24 / 0.36    MR2 loss 0.024 / 0.09    reweighted CE 0.022 / 0.26
#   resnet32   A 0.18 / 0.06    V 0.15 / 0.26    MR2 loss 0.037 / 0.05    reweighted CE 0.025 / 0.03
# V's relative error grows as a class's spread shrinks against its mean (a perturbation δ of the
# features moves V by ~2·√V·|δ|, relative ∝ √((A + V)/V)): the trained small_cnn's 0.36 is at
# V/A = 2%. DEPTH·EPS leaves ≥ 2.7× over every measured value, ≥ 4× at initialisation, where the
# test runs (with the cosine head the losses' errors are 0.05 and 0.07 there).
SEEDS = (0, 1, 2)


def _dtypes(tree) -> set[str]:
  return {str(leaf.dtype) for leaf in jax.tree.leaves(tree)
          if jnp.issubdtype(leaf.dtype, jnp.floating)}


def bf16_config(loss="mr2+inverse_reweight"):
  config = tiny_config(loss)
  config.compute_dtype = "bfloat16"
  return config


def test_bf16_state_is_float32_and_convolutions_run_in_bf16():
  # Traced, not run (`eval_shape`, `make_jaxpr`): the dtypes are the trace's, the run's.
  config = bf16_config()
  split = digits_train()
  model = train_state.build_model(config, 10)
  lr_fn = train_state.create_learning_rate_fn(config, 10)
  state = jax.eval_shape(lambda key: train_state.create_train_state(
      config, model, split.images.shape[1:], 10, lr_fn, key), jax.random.key(0))
  for name in ("params", "opt_state", "batch_stats", "loss_state"):
    assert _dtypes(getattr(state, name)) == {"float32"}, name

  images = jnp.asarray(split.images[:8])
  variables = {"params": state.params, "batch_stats": state.batch_stats}
  apply = lambda v, x: model.apply(v, x, train=True, mutable=["batch_stats"])
  (logits, features), updates = jax.eval_shape(apply, variables, images)
  assert logits.dtype == features.dtype == jnp.float32  # the choice of `layers.pool`
  assert _dtypes(updates["batch_stats"]) == {"float32"}
  equations = jax.make_jaxpr(apply)(variables, images).jaxpr.eqns
  convolutions = [e for e in equations if e.primitive.name == "conv_general_dilated"]
  assert len(convolutions) == DEPTH["small_cnn"]
  for conv in convolutions:
    assert [v.aval.dtype for v in (*conv.invars, *conv.outvars)] == [jnp.bfloat16] * 3
  # The head (the one matmul) runs in float32 on the float32 pooled features.
  (head,) = [e for e in equations if e.primitive.name == "dot_general"]
  assert [v.aval.dtype for v in (*head.invars, *head.outvars)] == [jnp.float32] * 3


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_every_model_takes_the_compute_dtype(name):
  # `train_state.build_model` passes `dtype` to every model; traced only (WRN-28-10 is 36 M).
  model = models.create_model(name, 10, dtype=jnp.bfloat16)
  size = getattr(model, "image_size", 32)
  images = jnp.zeros((2, size, size, 3))
  variables = jax.eval_shape(functools.partial(model.init, train=False), jax.random.key(0), images)
  assert _dtypes(variables) == {"float32"}
  (logits, features), _ = jax.eval_shape(
      functools.partial(model.apply, train=True, mutable=["batch_stats"]), variables, images)
  assert logits.dtype == features.dtype == jnp.float32


def test_compute_dtype_is_validated_as_a_choice():
  config = digits_lt.get_config()
  assert config.compute_dtype == "float32"
  config.compute_dtype = "float16"
  with pytest.raises(ConfigError, match="config.compute_dtype"):
    schema.validate(config)


def _losses_and_stats(model, variables, images, labels):
  """One training-mode forward pass, then the MR2 statistics and loss (fresh statistics: the new
  A, V are the batch's a_k, v_k) and the inverse-reweighted CE (α = 0, uniform prior, γ = 1)."""
  (logits, features), _ = model.apply(variables, images, train=True, mutable=["batch_stats"])
  mr2_loss, stats, _ = mr2_jax.mr2_loss(logits, features, labels, mr2_jax.init_class_stats(10))
  reweighted, _, _ = reweight_jax.inverse_reweighted_loss(
      reweight_jax.cross_entropy_loss(logits, labels), labels,
      reweight_jax.init_reweight_state(10), alpha=0.0, gamma=1.0,
      prior=reweight_jax.class_prior(jnp.ones(10), "uniform"))
  return stats, mr2_loss, reweighted


@pytest.mark.parametrize("name", [
    "small_cnn", pytest.param("resnet32", marks=pytest.mark.slow)])
def test_bf16_statistics_and_losses_agree_with_float32(name):
  split = digits_train()
  run = {dtype: jax.jit(functools.partial(_losses_and_stats,
                                          models.create_model(name, 10, dtype=dtype)))
         for dtype in (jnp.float32, jnp.bfloat16)}
  init = jax.jit(functools.partial(models.create_model(name, 10).init, train=False))
  rtol = DEPTH[name] * EPS
  for seed in SEEDS:
    rows = np.random.default_rng(seed).permutation(len(split.labels))[:64]
    images, labels = jnp.asarray(split.images[rows]), jnp.asarray(split.labels[rows])
    variables = init(jax.random.key(seed), images[:1])
    (stats_32, mr2_32, reweighted_32), (stats_16, mr2_16, reweighted_16) = (
        run[dtype](variables, images, labels) for dtype in (jnp.float32, jnp.bfloat16))
    assert _dtypes(stats_16) == {"float32"}
    np.testing.assert_array_equal(stats_16.seen, stats_32.seen)
    assert np.count_nonzero(stats_32.mean_sq_deviation) >= 5  # classes with a spread to compare
    np.testing.assert_allclose(stats_16.sq_mean_norm, stats_32.sq_mean_norm, rtol=rtol, atol=0,
                               err_msg=f"A, seed {seed}")
    np.testing.assert_allclose(stats_16.mean_sq_deviation, stats_32.mean_sq_deviation, rtol=rtol,
                               atol=0, err_msg=f"V, seed {seed}")
    np.testing.assert_allclose(mr2_16, mr2_32, rtol=rtol, err_msg=f"MR2 loss, seed {seed}")
    np.testing.assert_allclose(reweighted_16, reweighted_32, rtol=rtol,
                               err_msg=f"reweighted CE, seed {seed}")
    # Not vacuous: bf16 compute changes the result.
    assert float(mr2_16) != float(mr2_32)


@pytest.mark.slow  # ≈ 10 s; the trainer run below covers the same step
def test_bf16_jitted_train_step_is_finite_with_float32_updates():
  state, metrics = run_steps(bf16_config(), 1, [("none", 1)])["none", 1]
  assert int(state.step) == 1 and bool(metrics["finite"]) and np.isfinite(metrics["loss"])
  for name in ("params", "opt_state", "batch_stats", "loss_state"):
    assert _dtypes(getattr(state, name)) == {"float32"}, name


def _numbers(tree):
  if isinstance(tree, dict):
    return [x for value in tree.values() for x in _numbers(value)]
  if isinstance(tree, (list, tuple)):
    return [x for value in tree for x in _numbers(value)]
  return [tree] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def test_bf16_trainer_run_finishes_with_a_finite_summary(tmp_path):
  config = digits_lt.get_config()
  config.compute_dtype = "bfloat16"
  config.num_epochs = 2
  config.progress_bar = False
  config.nc_metrics = False  # its passes read the same float32 features; their compiles are 1/3
  summary = loop.train_and_evaluate(config, tmp_path, max_steps=3)
  assert summary["steps"] == 3
  numbers = _numbers(summary)
  assert numbers and all(math.isfinite(x) for x in numbers), summary
