"""Tests for reweight_jax.inverse_weights: per-class batch losses and the closed-form weights."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from absl.testing import parameterized

import reweight_jax as rw
from tests.reference import numpy_reweight as ref

RTOL = 1e-5
COUNTS = np.array([900, 300, 120, 40, 12, 5], np.float32)


def _batch(seed, batch, num_classes, high=None):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes if high is None else high, batch).astype(np.int32)
  losses = rng.uniform(0.05, 4.0, batch).astype(np.float32)
  return labels, losses, rng


class BatchClassLossesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("dense", 6, 40, None, False),            # K ≤ B: slot k is class k
      ("dense_absent_masked", 6, 40, 4, True),  # classes 4, 5 absent, padding masked
      ("compact", 50, 8, None, False),          # K > B: compacted slots
      ("compact_masked", 8142, 32, None, True),
  )
  def test_matches_reference(self, num_classes, batch, high, masked):
    labels, losses, rng = _batch(0, batch, num_classes, high)
    where = rng.random(batch) < 0.7 if masked else None
    fn = self.variant(functools.partial(rw.batch_class_losses, num_classes=num_classes))
    out = fn(losses, labels, where=where)
    expected_losses, expected_present, expected_counts = ref.batch_class_losses(
        losses, labels, num_classes, where=where)
    chex.assert_shape([out.class_losses, out.present, out.class_counts], (num_classes,))
    np.testing.assert_array_equal(out.present, expected_present)
    np.testing.assert_array_equal(out.class_counts, expected_counts)
    np.testing.assert_allclose(out.class_losses, expected_losses, rtol=RTOL)

  def test_one_class_batch(self):
    labels = np.full(16, 3, np.int32)
    losses = np.linspace(0.1, 2.0, 16).astype(np.float32)
    out = rw.batch_class_losses(losses, labels, 5)
    np.testing.assert_array_equal(out.present, [False, False, False, True, False])
    np.testing.assert_allclose(out.class_losses[3], losses.astype(np.float64).mean(), rtol=RTOL)

  def test_masked_nan_loss_counts_nowhere(self):
    labels = np.array([0, 1, 1, 2], np.int32)
    losses = np.array([1.0, 2.0, np.nan, 3.0], np.float32)
    out = jax.jit(functools.partial(rw.batch_class_losses, num_classes=3))(
        losses, labels, where=np.array([True, True, False, True]))
    np.testing.assert_allclose(out.class_losses, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(out.class_counts, [1, 1, 1])

  def test_out_of_range_label_under_jit_is_not_clipped_into_a_class(self):
    labels = jnp.array([0, 1, 7], jnp.int32)
    losses = jnp.array([1.0, 2.0, 5.0])
    out = jax.jit(functools.partial(rw.batch_class_losses, num_classes=3))(losses, labels)
    np.testing.assert_allclose(out.class_losses, [1.0, 2.0, 0.0])
    np.testing.assert_array_equal(out.present, [True, True, False])

  def test_bad_inputs_name_argument(self):
    labels, losses, _ = _batch(0, 8, 4)
    with self.assertRaisesRegex(ValueError, "labels"):
      rw.batch_class_losses(losses, labels + 4, 4)
    with self.assertRaisesRegex(ValueError, "per_example_loss"):
      rw.batch_class_losses(losses[:5], labels, 4)
    with self.assertRaisesRegex(ValueError, "where"):
      rw.batch_class_losses(losses, labels, 4, where=np.ones(5, bool))
    with self.assertRaisesRegex(TypeError, "labels"):
      rw.batch_class_losses(losses, labels.astype(np.float32), 4)


class InverseWeightsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(alpha=(0.0, 0.3, 5.0), kind=("uniform", "inv_freq", "inv_sqrt_freq"))
  def test_matches_reference(self, alpha, kind):
    labels, losses, _ = _batch(1, 30, 6, high=5)  # class 5 absent
    class_losses, present, _ = ref.batch_class_losses(losses, labels, 6)
    prior = rw.class_prior(COUNTS, kind)
    weights = self.variant(functools.partial(rw.inverse_weights, alpha=alpha))(
        class_losses.astype(np.float32), present, prior=prior)
    expected = ref.inverse_weights(class_losses, present, ref.class_prior(COUNTS, kind), alpha)
    np.testing.assert_allclose(weights, expected, rtol=RTOL)
    np.testing.assert_allclose(weights[5], prior[5], rtol=RTOL)

  def test_all_absent_gives_prior(self):
    prior = rw.class_prior(COUNTS, "inv_freq")
    weights = rw.inverse_weights(np.zeros(6, np.float32), np.zeros(6, bool), prior=prior)
    np.testing.assert_allclose(weights, prior)

  def test_one_present_class(self):
    present = np.array([False, False, True, False, False, False])
    losses = np.array([0, 0, 1.7, 0, 0, 0], np.float32)
    weights = rw.inverse_weights(losses, present, prior=np.ones(6, np.float32))
    np.testing.assert_allclose(weights, ref.inverse_weights(losses, present, np.ones(6)), rtol=RTOL)
    np.testing.assert_allclose(weights[2], 1.0, rtol=RTOL)  # L̄ = L_c

  def test_zero_class_loss_is_finite(self):
    present = np.ones(3, bool)
    losses = np.array([0.0, 0.0, 0.0], np.float32)
    weights, grads = jax.value_and_grad(
        lambda l: jnp.sum(rw.inverse_weights(l, present, prior=jnp.ones(3))))(losses)
    chex.assert_tree_all_finite((weights, grads))
    weights = rw.inverse_weights(np.array([0.0, 1.0, 2.0], np.float32), present,
                                 prior=np.ones(3, np.float32))
    chex.assert_tree_all_finite(weights)
    np.testing.assert_allclose(weights, ref.inverse_weights([0.0, 1.0, 2.0], present, np.ones(3)),
                               rtol=RTOL)

  @parameterized.parameters(0.0, 0.05, 1.0, 20.0)
  def test_closed_form_is_the_tikhonov_minimiser(self, alpha):
    """w* minimises Σ_c (w_c L_c − L̄)² + α (w_c − w⁰_c)² (present classes, L̄ held at its value)."""
    labels, losses, _ = _batch(2, 40, 6, high=5)
    class_losses, present, _ = ref.batch_class_losses(losses, labels, 6)
    prior = np.asarray(rw.class_prior(COUNTS, "inv_sqrt_freq"), np.float64)
    target = class_losses[present].mean()

    def objective(w):
      return np.sum((w * class_losses[present] - target) ** 2
                    + alpha * (w - prior[present]) ** 2)

    result = scipy.optimize.minimize(objective, prior[present], method="BFGS",
                                     options={"gtol": 1e-12})
    weights = rw.inverse_weights(class_losses.astype(np.float32), present, prior=prior, alpha=alpha)
    np.testing.assert_allclose(weights[present], result.x, rtol=1e-5)
    # The minimum is not at the prior or at 1 (the test could fail).
    self.assertGreater(np.max(np.abs(result.x - 1.0)), 1e-2)

  def test_bad_inputs_name_argument(self):
    losses = np.ones(4, np.float32)
    present = np.ones(4, bool)
    with self.assertRaisesRegex(ValueError, "present"):
      rw.inverse_weights(losses, present[:3], prior=np.ones(4, np.float32))
    with self.assertRaisesRegex(TypeError, "present"):
      rw.inverse_weights(losses, present.astype(np.float32), prior=np.ones(4, np.float32))
    with self.assertRaisesRegex(ValueError, "prior"):
      rw.inverse_weights(losses, present, prior=np.ones(5, np.float32))
    with self.assertRaisesRegex(ValueError, "alpha"):
      rw.inverse_weights(losses, present, prior=np.ones(4, np.float32), alpha=-1.0)
    with self.assertRaisesRegex(ValueError, "class_losses"):
      rw.inverse_weights(np.ones((2, 2), np.float32), present, prior=np.ones(4, np.float32))
