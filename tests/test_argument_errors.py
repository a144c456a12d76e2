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
