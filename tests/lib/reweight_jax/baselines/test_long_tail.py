"""Tests for reweight_jax.baselines against the float64 reference."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

import reweight_jax as rw
from tests.reference import numpy_reweight as ref

RTOL = 1e-5
COUNTS = np.array([5000, 1200, 300, 80, 20, 5], np.float32)
NUM_CLASSES = 6


def _inputs(seed=0, batch=24):
  rng = np.random.default_rng(seed)
  logits = (2.0 * rng.normal(size=(batch, NUM_CLASSES))).astype(np.float32)
  labels = rng.integers(0, NUM_CLASSES, batch).astype(np.int32)
  features = rng.normal(size=(batch, 5)).astype(np.float32)
  where = rng.random(batch) < 0.8
  return logits, labels, features, where


class WeightsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_inverse_frequency(self):
    np.testing.assert_allclose(self.variant(rw.baselines.inverse_frequency_weights)(COUNTS),
                               ref.inverse_frequency_weights(COUNTS), rtol=RTOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.0, 0.9, 0.999, 0.9999)
  def test_class_balanced(self, beta):
    weights = self.variant(functools.partial(rw.baselines.class_balanced_weights, beta=beta))(COUNTS)
    np.testing.assert_allclose(weights, ref.class_balanced_weights(COUNTS, beta), rtol=RTOL)
    np.testing.assert_allclose(np.mean(weights), 1.0, rtol=RTOL)

  @chex.variants(with_jit=True, without_jit=True)
  def test_drw_schedule(self):
    fn = self.variant(rw.baselines.ldam_drw_weights)
    np.testing.assert_allclose(fn(COUNTS, 159), np.ones(NUM_CLASSES))
    np.testing.assert_allclose(fn(COUNTS, 160), ref.class_balanced_weights(COUNTS, 0.9999),
                               rtol=RTOL)
    np.testing.assert_allclose(fn(COUNTS, 199), ref.class_balanced_weights(COUNTS, 0.9999),
                               rtol=RTOL)

  def test_bad_inputs_name_argument(self):
    with self.assertRaisesRegex(ValueError, "beta"):
      rw.baselines.class_balanced_weights(COUNTS, beta=1.0)
    with self.assertRaisesRegex(ValueError, "class_counts"):
      rw.baselines.class_balanced_weights(-COUNTS)
    with self.assertRaisesRegex(ValueError, "class_counts"):
      rw.baselines.inverse_frequency_weights(COUNTS[:, None])
    with self.assertRaisesRegex(ValueError, "class_counts"):
      rw.baselines.class_balanced_weights(COUNTS[:, None])


class LossesTest(chex.TestCase):

  def _check(self, fn, expected, masked=True):
    logits, labels, features, where = _inputs()
    values = fn(logits, labels, features, where if masked else None)
    chex.assert_shape(values, labels.shape)
    expected = expected(logits, labels, features)
    if masked:
      expected = np.where(where, expected, 0.0)
    np.testing.assert_allclose(values, expected, rtol=RTOL, atol=1e-6)
    return values

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.0, 1.0, 2.0)
  def test_focal(self, gamma):
    fn = self.variant(lambda z, y, h, m: rw.baselines.focal_loss(z, y, gamma=gamma, where=m))
    self._check(fn, lambda z, y, h: ref.focal_loss(z, y, gamma))

  def test_focal_class_weights(self):
    weights = rw.baselines.class_balanced_weights(COUNTS)
    fn = jax.jit(lambda z, y, h, m: rw.baselines.focal_loss(z, y, class_weights=weights, where=m))
    self._check(fn, lambda z, y, h: np.asarray(weights, np.float64)[y] * ref.focal_loss(z, y, 1.0))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(False, True)
  def test_ldam(self, drw):
    weights = rw.baselines.ldam_drw_weights(COUNTS, 180) if drw else None
    fn = self.variant(lambda z, y, h, m: rw.baselines.ldam_loss(z, y, COUNTS, class_weights=weights, where=m))
    self._check(fn, lambda z, y, h: ref.ldam_loss(
        z, y, COUNTS, weights=None if weights is None else np.asarray(weights, np.float64)))

  def test_ldam_margins(self):
    margins = rw.baselines.ldam_margins(COUNTS)
    np.testing.assert_allclose(np.max(margins), 0.5, rtol=RTOL)
    np.testing.assert_allclose(margins, 0.5 * (COUNTS.min() / COUNTS) ** 0.25, rtol=RTOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.5, 1.0, 2.0)
  def test_logit_adjusted(self, tau):
    fn = self.variant(lambda z, y, h, m: rw.baselines.logit_adjusted_loss(z, y, COUNTS, tau=tau, where=m))
    self._check(fn, lambda z, y, h: ref.logit_adjusted_loss(z, y, COUNTS, tau))

  @chex.variants(with_jit=True, without_jit=True)
  def test_balanced_softmax(self):
    fn = self.variant(lambda z, y, h, m: rw.baselines.balanced_softmax_loss(z, y, COUNTS, where=m))
    self._check(fn, lambda z, y, h: ref.balanced_softmax_loss(z, y, COUNTS))

  @chex.variants(with_jit=True, without_jit=True)
  def test_ib(self):
    weights = rw.baselines.inverse_frequency_weights(COUNTS)
    fn = self.variant(lambda z, y, h, m: rw.baselines.ib_loss(z, y, h, class_weights=weights, where=m))
    values = self._check(fn, lambda z, y, h: ref.ib_loss(z, y, h, COUNTS))
    chex.assert_tree_all_finite(values)

  def test_ib_gradient_is_finite(self):
    logits, labels, features, _ = _inputs()
    grads = jax.jit(jax.grad(lambda z, h: jnp.mean(rw.baselines.ib_loss(z, labels, h)), argnums=(0, 1)))(
        logits, features)
    chex.assert_tree_all_finite(grads)

  def test_masked_examples_are_zero_even_if_nan(self):
    logits, labels, _, _ = _inputs()
    logits[0] = np.nan
    where = np.ones(labels.shape, bool)
    where[0] = False
    values = rw.baselines.focal_loss(logits, labels, where=where)
    self.assertEqual(float(values[0]), 0.0)
    chex.assert_tree_all_finite(values)

  def test_out_of_range_label_under_jit_is_nan(self):
    logits, labels, _, _ = _inputs()
    labels[3] = NUM_CLASSES
    values = jax.jit(functools.partial(rw.baselines.ldam_loss, class_counts=COUNTS))(logits, labels)
    self.assertTrue(np.isnan(values[3]))
    self.assertEqual(int(np.sum(np.isnan(values))), 1)

  def test_bad_inputs_name_argument(self):
    logits, labels, features, _ = _inputs()
    with self.assertRaisesRegex(ValueError, "labels"):
      rw.baselines.focal_loss(logits, labels + NUM_CLASSES)
    with self.assertRaisesRegex(ValueError, "logits"):
      rw.baselines.focal_loss(logits[:-1], labels)
    with self.assertRaisesRegex(ValueError, "logits"):
      rw.baselines.focal_loss(logits[0], labels)
    with self.assertRaisesRegex(ValueError, "features"):
      rw.baselines.ib_loss(logits, labels, features[:-1])
    with self.assertRaisesRegex(ValueError, "class_counts"):
      rw.baselines.ldam_loss(logits, labels, COUNTS[:-1])
    with self.assertRaisesRegex(ValueError, "class_counts"):
      rw.baselines.logit_adjusted_loss(logits, labels, -COUNTS)
    with self.assertRaisesRegex(ValueError, "class_weights"):
      rw.baselines.focal_loss(logits, labels, class_weights=np.ones(3, np.float32))


class MaskedGradientTest(parameterized.TestCase):
  """Padding rows (here inf logits and features) give 0 loss and exactly 0 gradient, not NaN."""

  @parameterized.named_parameters(
      ("ce", lambda z, y, h, w: rw.cross_entropy_loss(z, y, where=w)),
      ("focal", lambda z, y, h, w: rw.baselines.focal_loss(z, y, gamma=2.0, where=w)),
      ("ldam", lambda z, y, h, w: rw.baselines.ldam_loss(z, y, np.array([50., 5., 1.]), where=w)),
      ("logit_adjusted",
       lambda z, y, h, w: rw.baselines.logit_adjusted_loss(z, y, np.array([50., 5., 1.]), where=w)),
      ("ib", lambda z, y, h, w: rw.baselines.ib_loss(z, y, h, where=w)),
  )
  def test_padding_sends_no_nan_gradient(self, loss_fn):
    logits = np.array([[1.0, 2.0, 0.5], [np.inf, -np.inf, 0.0]], np.float32)
    features = np.array([[0.5, -1.0], [np.inf, np.nan]], np.float32)
    labels, where = np.array([1, 0]), np.array([True, False])
    grad = jax.grad(lambda z: jnp.sum(loss_fn(z, labels, features, where)))(logits)
    self.assertTrue(np.all(np.isfinite(grad)))
    np.testing.assert_array_equal(grad[1], np.zeros(3))
    self.assertTrue(np.any(grad[0] != 0))


def test_cross_entropy_loss_matches_reference_with_weights():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(12, 4)).astype(np.float32) * 3
  labels = rng.integers(0, 4, 12)
  weights = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
  out = rw.cross_entropy_loss(logits, labels, class_weights=weights)
  log_probs = logits.astype(np.float64) - np.logaddexp.reduce(logits.astype(np.float64), axis=1,
                                                             keepdims=True)
  expected = -weights[labels] * log_probs[np.arange(12), labels]
  np.testing.assert_allclose(out, expected, rtol=1e-5)
