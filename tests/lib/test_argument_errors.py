"""Errors name the argument at fault: a state of the wrong type or class count, a tuple for MR2's
statistics (issue: "errors that blame the wrong argument")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax
import reweight_jax

K = 4
LABELS = jnp.array([0, 1, 2, 3, 0, 1])
FEATURES = jnp.asarray(np.random.default_rng(0).normal(size=(6, 3)), jnp.float32)
LOGITS = jnp.asarray(np.random.default_rng(1).normal(size=(6, K)), jnp.float32)
PER_EXAMPLE = jnp.linspace(0.2, 1.2, 6)


def test_a_reweighting_state_for_another_k_blames_the_state_and_names_both():
  state = reweight_jax.init_reweight_state(K + 1)
  for loss in (lambda: reweight_jax.inverse_reweighted_loss(
                   PER_EXAMPLE, LABELS, state, alpha=0.0, prior=jnp.ones(K), gamma=1.0),
               lambda: reweight_jax.mixed_inverse_reweighted_loss(
                   PER_EXAMPLE, PER_EXAMPLE, LABELS, LABELS, 0.5, state, alpha=0.0,
                   prior=jnp.ones(K), gamma=1.0)):
    with pytest.raises(ValueError, match=r"^state: built for 5 classes .* the prior has 4 entries"):
      loss()


@pytest.mark.parametrize("bad", [(jnp.zeros(K), jnp.zeros(K), jnp.zeros(K, bool)),
                                 {"sq_mean_norm": jnp.zeros(K)}])
def test_mr2_statistics_of_another_type_are_a_type_error_naming_stats(bad):
  calls = [lambda: mr2_jax.update_class_stats(bad, FEATURES, LABELS),
           lambda: mr2_jax.class_margins(bad),
           lambda: mr2_jax.mean_class_deviation(bad),
           lambda: mr2_jax.mr2_loss(LOGITS, FEATURES, LABELS, bad),
           lambda: jax.jit(mr2_jax.mr2_loss)(LOGITS, FEATURES, LABELS, bad)]
  for call in calls:
    with pytest.raises(TypeError, match=r"^stats: expected mr2_jax.ClassStats"):
      call()


def test_a_reweighting_state_of_another_type_is_a_type_error_naming_state():
  with pytest.raises(TypeError, match=r"^state: expected reweight_jax.ReweightState"):
    reweight_jax.inverse_reweighted_loss(PER_EXAMPLE, LABELS, mr2_jax.init_class_stats(K),
                                         alpha=0.0, prior=jnp.ones(K), gamma=1.0)


@pytest.mark.parametrize("weights", [
    reweight_jax.baselines.inverse_frequency_weights,
    lambda counts: reweight_jax.baselines.class_balanced_weights(counts, 0.99),
    lambda counts: reweight_jax.baselines.ldam_margins(counts, 0.5),
    lambda counts: reweight_jax.class_prior(counts, "inv_sqrt_freq")])
def test_a_class_with_no_example_gets_the_documented_one_example_value(weights):
  """The documented convention (each docstring states it): n_c = 0 is read as one example, so a
  class without training data gets the rarest possible weight or margin, finite, never NaN; a
  negative count is an error eagerly and NaN traced."""
  with_zero = np.asarray(weights(jnp.array([50, 0, 7, 1])), np.float64)
  with_one = np.asarray(weights(jnp.array([50, 1, 7, 1])), np.float64)
  np.testing.assert_allclose(with_zero, with_one, rtol=1e-6)
  assert with_zero[1] == with_zero[3] and np.all(np.isfinite(with_zero))
  with pytest.raises(ValueError, match=r"counts must be non-negative"):
    weights(jnp.array([50, -1, 7, 1]))
  assert np.all(np.isnan(jax.jit(weights)(jnp.array([50, -1, 7, 1]))))
