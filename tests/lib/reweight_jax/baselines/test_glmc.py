"""reweight_jax.baselines.glmc against the float64 loop reference (PIPELINES spec, §3 'GLMC')."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given
from hypothesis import note
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import reweight_jax
from tests import strategies as S
from tests.reference import numpy_glmc as ref

K, D = 6, 8
# Class 5 absent, class 4 once, class 0 four times: absent, singleton and repeated classes.
LABELS_A = np.array([0, 1, 0, 2, 3, 0, 1, 4, 2, 0, 3, 1], np.int32)
LABELS_B = np.array([3, 3, 2, 2, 4, 0, 1, 4, 4, 0, 3, 1], np.int32)  # some rows with a = b
# Training counts of a long tail; class 5 has no example.
COUNTS = np.array([50, 20, 8, 3, 1, 0], np.int64)
TRAIN_LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(K), COUNTS)).astype(
    np.int32)
LOSS_ARGS = ("logits_fc_g", "logits_fc_l", "logits_cb_g", "logits_cb_l", "pred_g", "proj_g",
             "pred_l", "proj_l")


def _loss_inputs(rng, batch, num_classes=K, dim=D, scale=3.0):
  """The eight float32 arrays of glmc_loss, in its argument order."""
  logits = [(scale * rng.normal(size=(batch, num_classes))).astype(np.float32) for _ in range(4)]
  heads = [rng.normal(size=(batch, dim)).astype(np.float32) for _ in range(4)]
  return logits + heads


def _f64(arrays):
  return [np.asarray(x, np.float64) for x in arrays]


# ------------------------------------------------------------------------------------------------
# Host side: re-balanced sampling and the CutMix box
# ------------------------------------------------------------------------------------------------

class RebalancedSamplingTest(parameterized.TestCase):

  @parameterized.parameters(0.0, 0.2, 1.0, 2.5)
  def test_probabilities_match_reference(self, r):
    probabilities = reweight_jax.baselines.glmc_rebalanced_probabilities(TRAIN_LABELS, COUNTS, r)
    self.assertEqual(probabilities.dtype, np.float64)
    np.testing.assert_allclose(probabilities, ref.rebalanced_probabilities(TRAIN_LABELS, COUNTS, r),
                               rtol=1e-12)
    np.testing.assert_allclose(probabilities.sum(), 1.0, rtol=1e-12)

  def test_r0_is_uniform_over_rows(self):
    probabilities = reweight_jax.baselines.glmc_rebalanced_probabilities(TRAIN_LABELS, COUNTS, 0)
    np.testing.assert_allclose(probabilities, 1.0 / TRAIN_LABELS.size, rtol=1e-12)

  def test_large_counts_and_exponents_stay_finite(self):
    counts = np.array([10**9, 1], np.int64)
    labels = np.array([0, 0, 1], np.int32)
    probabilities = reweight_jax.baselines.glmc_rebalanced_probabilities(labels, counts, 40.0)
    np.testing.assert_allclose(probabilities, [0.0, 0.0, 1.0], atol=1e-300)

  def test_draws_follow_the_class_frequencies(self):
    # Statistical tolerance: a class frequency over n = 200,000 independent draws has standard
    # deviation √(p(1 − p)/n) ≤ 1.2e-3; we allow 5σ (fixed seed, so the test is deterministic).
    draws = 200_000
    for r in (1.0, 0.2):
      indices = reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, r, draws,
                                                     np.random.default_rng(7))
      self.assertEqual(indices.shape, (draws,))
      self.assertEqual(indices.dtype, np.int64)
      self.assertTrue(0 <= indices.min() and indices.max() < TRAIN_LABELS.size)
      frequencies = np.bincount(TRAIN_LABELS[indices], minlength=K) / draws
      expected = ref.class_frequencies(TRAIN_LABELS, COUNTS, r)
      if r == 1.0:  # r = 1: every class with examples equally often
        np.testing.assert_allclose(expected[:5], 0.2, rtol=1e-12)
      sigma = np.sqrt(expected * (1 - expected) / draws)
      np.testing.assert_array_less(np.abs(frequencies - expected), 5 * sigma + 1e-12)
      self.assertEqual(frequencies[5], 0.0)  # the class without examples is never drawn

  def test_indices_are_a_function_of_the_generator(self):
    first = reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, 0.2, 64,
                                                 np.random.default_rng((3, 1, 5)))
    again = reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, 0.2, 64,
                                                 np.random.default_rng((3, 1, 5)))
    np.testing.assert_array_equal(first, again)

  def test_bad_arguments_raise_naming_them(self):
    rng = np.random.default_rng(0)
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(np.array([0, 6], np.int32), COUNTS, 0.2)
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(np.array([-1, 0], np.int32), COUNTS, 0.2)
    with self.assertRaisesRegex(TypeError, "labels"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(np.array([0.0, 1.0]), COUNTS, 0.2)
    with self.assertRaisesRegex(ValueError, r"class_counts.*\[5\]"):  # a label with n_c = 0
      reweight_jax.baselines.glmc_rebalanced_probabilities(np.array([0, 5], np.int32), COUNTS, 0.2)
    with self.assertRaisesRegex(ValueError, "class_counts"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(TRAIN_LABELS, -COUNTS, 0.2)
    with self.assertRaisesRegex(ValueError, "r:"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(TRAIN_LABELS, COUNTS, -0.2)
    with self.assertRaisesRegex(ValueError, "r:"):
      reweight_jax.baselines.glmc_rebalanced_probabilities(TRAIN_LABELS, COUNTS, np.inf)
    with self.assertRaisesRegex(ValueError, "size"):
      reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, 0.2, 0, rng)
    with self.assertRaisesRegex(TypeError, "size"):
      reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, 0.2, 4.0, rng)
    with self.assertRaisesRegex(TypeError, "rng"):
      reweight_jax.baselines.glmc_rebalanced_indices(TRAIN_LABELS, COUNTS, 0.2, 4, 0)


def _central_seed(height, width):
  """A seed whose generator draws the centre (H/2, W/2)."""
  for seed in range(100_000):
    rng = np.random.default_rng(seed)
    if rng.integers(height) == height // 2 and rng.integers(width) == width // 2:
      return seed
  raise AssertionError("no seed found")


class CutMixBoxTest(parameterized.TestCase):

  @parameterized.parameters((0.0, 32, 32), (0.37, 32, 32), (0.75, 32, 24), (0.9, 33, 17),
                            (1.0, 32, 32), (0.5, 1, 5))
  def test_matches_reference(self, lam, height, width):
    for seed in range(20):
      box = reweight_jax.baselines.cutmix_box(lam, height, width, np.random.default_rng(seed))
      rng = np.random.default_rng(seed)  # the centre: y first, then x
      centre_y, centre_x = int(rng.integers(height)), int(rng.integers(width))
      self.assertEqual(box, ref.cutmix_box(lam, height, width, centre_y, centre_x))
      self.assertTrue(all(isinstance(v, int) for v in box))

  def test_lam0_central_covers_the_image_and_lam1_is_empty(self):
    seed = _central_seed(32, 24)
    self.assertEqual(reweight_jax.baselines.cutmix_box(0.0, 32, 24, np.random.default_rng(seed)),
                     (0, 32, 0, 24))
    for seed in range(20):  # h = w = 0: an empty box wherever the centre is
      y0, y1, x0, x1 = reweight_jax.baselines.cutmix_box(1.0, 32, 24, np.random.default_rng(seed))
      self.assertEqual((y1 - y0, x1 - x0), (0, 0))

  def test_bad_arguments_raise_naming_them(self):
    rng = np.random.default_rng(0)
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.cutmix_box(1.5, 32, 32, rng)
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.cutmix_box(np.array([0.5, 0.5]), 32, 32, rng)
    with self.assertRaisesRegex(ValueError, "height"):
      reweight_jax.baselines.cutmix_box(0.5, 0, 32, rng)
    with self.assertRaisesRegex(TypeError, "width"):
      reweight_jax.baselines.cutmix_box(0.5, 32, 32.0, rng)
    with self.assertRaisesRegex(TypeError, "rng"):
      reweight_jax.baselines.cutmix_box(0.5, 32, 32, None)


# ------------------------------------------------------------------------------------------------
# Device side
# ------------------------------------------------------------------------------------------------

class MixturesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_cutmix_and_mixup_match_reference(self):
    rng = np.random.default_rng(1)
    images_a = rng.normal(size=(3, 7, 5, 2)).astype(np.float32)
    images_b = rng.normal(size=(3, 7, 5, 2)).astype(np.float32)
    cut = self.variant(reweight_jax.baselines.cutmix)  # the box is traced under jit: one compile
    for box in ((1, 4, 2, 5), (0, 7, 0, 5), (3, 3, 0, 5), (0, 2, 4, 5)):
      np.testing.assert_array_equal(cut(images_a, images_b, jnp.asarray(box, jnp.int32)),
                                    ref.cutmix(images_a, images_b, box))
    np.testing.assert_array_equal(cut(images_a, images_b, jnp.asarray((3, 3, 0, 5))), images_a)
    mix = self.variant(reweight_jax.baselines.mix_images)
    for lam in (0.0, 0.3, 1.0):
      np.testing.assert_allclose(mix(images_a, images_b, lam),
                                 ref.mix_images(images_a, images_b, lam), rtol=1e-6, atol=1e-6)
    self.assertEqual(mix(images_a.astype(jnp.bfloat16), images_b.astype(jnp.bfloat16),
                         0.5).dtype, jnp.bfloat16)

  def test_bad_arguments_raise_naming_them(self):
    images = np.zeros((2, 4, 4, 3), np.float32)
    with self.assertRaisesRegex(ValueError, "box"):
      reweight_jax.baselines.cutmix(images, images, (0, 5, 0, 2))
    with self.assertRaisesRegex(ValueError, "box"):
      reweight_jax.baselines.cutmix(images, images, (2, 1, 0, 2))
    with self.assertRaisesRegex(ValueError, "box"):
      reweight_jax.baselines.cutmix(images, images, (0.0, 1.0, 0.0, 2.0))
    with self.assertRaisesRegex(ValueError, "images_b"):
      reweight_jax.baselines.cutmix(images, images[:1], (0, 1, 0, 1))
    with self.assertRaisesRegex(TypeError, "images_b"):
      reweight_jax.baselines.mix_images(images, images.astype(np.float16), 0.5)
    with self.assertRaisesRegex(ValueError, "images_a"):
      reweight_jax.baselines.cutmix(images[0], images[0], (0, 1, 0, 1))
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.mix_images(images, images, -0.1)
    self.assertTrue(np.all(np.isnan(jax.jit(reweight_jax.baselines.mix_images)(images, images, 1.5))))


class TargetsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_soft_cross_entropy(self):
    rng = np.random.default_rng(2)
    logits = (4 * rng.normal(size=(LABELS_A.size, K))).astype(np.float32)
    targets = ref.mixed_targets(LABELS_A, LABELS_B, 0.3, K, ref.class_weights(COUNTS, 1.2))
    targets = targets.astype(np.float32)
    fn = self.variant(lambda z, t, w: reweight_jax.baselines.soft_cross_entropy(z, t, where=w))
    np.testing.assert_allclose(fn(logits, targets, None),
                               ref.soft_cross_entropy(logits, targets), rtol=2e-6, atol=1e-6)
    # one-hot targets: the ordinary cross-entropy
    onehot = np.eye(K, dtype=np.float32)[LABELS_A]
    np.testing.assert_allclose(fn(logits, onehot, None),
                               reweight_jax.cross_entropy_loss(logits, LABELS_A), rtol=1e-6)
    # a −inf logit where the target is 0 contributes nothing
    logits_inf = logits.copy()
    logits_inf[0, 5] = -np.inf
    self.assertTrue(np.isfinite(fn(logits_inf, onehot, None)[0]))
    # padding rows (NaN, inf) give 0 and no gradient
    where = np.arange(LABELS_A.size) % 3 != 1
    garbage = np.where(where[:, None], logits, np.nan).astype(np.float32)
    out = fn(garbage, np.where(where[:, None], targets, np.inf).astype(np.float32), where)
    np.testing.assert_allclose(out[where], ref.soft_cross_entropy(logits, targets)[where],
                               rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(out[~where], 0.0)
    grad = jax.jit(jax.grad(lambda z: jnp.sum(reweight_jax.baselines.soft_cross_entropy(
        z, targets, where=where))))(garbage)
    np.testing.assert_array_equal(grad[~where], 0.0)
    np.testing.assert_allclose(grad[where], ref.soft_cross_entropy_grad(logits, targets)[where],
                               rtol=1e-5, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_class_weights(self):
    fn = self.variant(reweight_jax.baselines.glmc_class_weights, static_argnums=1)
    for exponent in (0.0, 1.0, 1.2):
      weights = fn(COUNTS, exponent)
      self.assertEqual(weights.dtype, jnp.float32)
      np.testing.assert_allclose(weights, ref.class_weights(COUNTS, exponent), rtol=2e-6)
      np.testing.assert_allclose(np.mean(weights[COUNTS > 0]), 1.0, rtol=1e-6)  # mean 1
      self.assertEqual(weights[5], 0.0)  # no examples: weight 0, outside the mean
    all_present = np.array([500, 100, 20, 5, 2, 1], np.float32)
    np.testing.assert_allclose(np.mean(fn(all_present, 1.2)), 1.0, rtol=1e-6)
    # n^(−ℓw) underflows float32 for n = 1e30; in log space the weights stay exact
    huge = fn(np.array([1e30, 1, 0, 0, 0, 0], np.float32), 3.0)
    np.testing.assert_allclose(huge, [0.0, 2.0, 0, 0, 0, 0], atol=1e-30)

  def test_class_weights_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "class_counts"):
      reweight_jax.baselines.glmc_class_weights(np.zeros(3), 1.2)
    with self.assertRaisesRegex(ValueError, "class_counts"):
      reweight_jax.baselines.glmc_class_weights(np.array([3.0, -1.0]), 1.2)
    with self.assertRaisesRegex(ValueError, "exponent"):
      reweight_jax.baselines.glmc_class_weights(COUNTS, -1.0)
    traced = jax.jit(lambda n: reweight_jax.baselines.glmc_class_weights(n, 1.2))
    self.assertTrue(np.all(np.isnan(traced(np.array([3.0, -1.0], np.float32)))))
    self.assertTrue(np.all(np.isnan(traced(np.zeros(2, np.float32)))))

  @chex.variants(with_jit=True, without_jit=True)
  def test_mixed_targets(self):
    weights = ref.class_weights(COUNTS, 1.2).astype(np.float32)
    fn = self.variant(lambda a, b, lam, v: reweight_jax.baselines.mixed_targets(a, b, lam, K, v))
    for lam in (0.0, 0.37, 1.0):
      plain = fn(LABELS_A, LABELS_B, lam, None)
      np.testing.assert_allclose(plain, ref.mixed_targets(LABELS_A, LABELS_B, lam, K), rtol=1e-6)
      np.testing.assert_allclose(np.sum(plain, axis=1), 1.0, rtol=1e-6)  # rows sum to 1
      np.testing.assert_allclose(fn(LABELS_A, LABELS_B, lam, weights),
                                 ref.mixed_targets(LABELS_A, LABELS_B, lam, K, weights),
                                 rtol=1e-6)

  def test_mixed_targets_bad_labels(self):
    traced = jax.jit(lambda a, b: reweight_jax.baselines.mixed_targets(a, b, 1.0, K))
    bad = np.where(np.arange(LABELS_A.size) == 3, K, LABELS_A).astype(np.int32)
    out = traced(LABELS_A, bad)  # λ = 1: the bad label b has weight 0, still NaN
    self.assertTrue(np.all(np.isnan(out[3])))
    np.testing.assert_allclose(np.delete(np.asarray(out), 3, axis=0),
                               np.delete(ref.mixed_targets(LABELS_A, LABELS_A, 1.0, K), 3, axis=0))
    self.assertTrue(np.all(np.isnan(traced(np.where(bad == K, -1, bad).astype(np.int32),
                                           LABELS_B)[3])))
    with self.assertRaisesRegex(ValueError, "labels_b"):
      reweight_jax.baselines.mixed_targets(LABELS_A, bad, 0.5, K)
    with self.assertRaisesRegex(ValueError, "labels_a"):
      reweight_jax.baselines.mixed_targets(bad, LABELS_B, 0.5, K)
    with self.assertRaisesRegex(ValueError, "labels_b"):
      reweight_jax.baselines.mixed_targets(LABELS_A, LABELS_B[:-1], 0.5, K)
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.mixed_targets(LABELS_A, LABELS_B, 1.01, K)
    with self.assertRaisesRegex(ValueError, "class_weights"):
      reweight_jax.baselines.mixed_targets(LABELS_A, LABELS_B, 0.5, K, np.ones(K + 1, np.float32))

  @chex.variants(with_jit=True, without_jit=True)
  def test_consistency(self):
    rng = np.random.default_rng(3)
    heads = [rng.normal(size=(LABELS_A.size, D)).astype(np.float32) for _ in range(4)]
    heads[0][2] = 0.0  # a zero prediction: clamped norm, finite value and gradient
    fn = self.variant(jax.value_and_grad(
        lambda *h: jnp.sum(reweight_jax.baselines.glmc_consistency(*h)), argnums=(0, 1, 2, 3)))
    value, grads = fn(*heads)
    per_example = reweight_jax.baselines.glmc_consistency(*heads)
    np.testing.assert_allclose(per_example, ref.consistency(*heads), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, np.sum(ref.consistency(*heads)), rtol=1e-5)
    # no gradient into the projections (stop-gradient targets)
    np.testing.assert_array_equal(grads[1], 0.0)
    np.testing.assert_array_equal(grads[3], 0.0)
    self.assertTrue(np.all(np.isfinite(grads[0])))
    rows = np.arange(LABELS_A.size) != 2  # the closed form needs ‖p‖ > ε
    expected_g, expected_l = ref.consistency_grads(*[h[rows] for h in heads])
    np.testing.assert_allclose(grads[0][rows], expected_g, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads[2][rows], expected_l, rtol=1e-4, atol=1e-6)
    # identical directions: −2 per row
    np.testing.assert_allclose(reweight_jax.baselines.glmc_consistency(heads[1], 3 * heads[1], heads[1],
                                                             heads[1]), -2.0, rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "proj_l"):
      reweight_jax.baselines.glmc_consistency(heads[0], heads[1], heads[2], heads[3][:, :4])

  def test_alpha(self):
    self.assertEqual(float(reweight_jax.baselines.glmc_alpha(0, 200)), 1.0)
    self.assertEqual(float(reweight_jax.baselines.glmc_alpha(200, 200)), 0.0)
    traced = jax.jit(reweight_jax.baselines.glmc_alpha, static_argnums=1)
    for epoch in (0, 1, 100, 159, 199, 200):
      np.testing.assert_allclose(traced(epoch, 200), ref.alpha(epoch, 200), rtol=1e-6)
    self.assertTrue(np.isnan(traced(201, 200)))
    self.assertTrue(np.isnan(traced(-1, 200)))
    with self.assertRaisesRegex(ValueError, "epoch"):
      reweight_jax.baselines.glmc_alpha(201, 200)
    with self.assertRaisesRegex(ValueError, "num_epochs"):
      reweight_jax.baselines.glmc_alpha(0, 0)


# ------------------------------------------------------------------------------------------------
# The loss
# ------------------------------------------------------------------------------------------------

def _kw(lam, class_weights, alpha, w_con):
  """glmc_loss's keyword-only hyperparameters."""
  return {"lam": lam, "class_weights": class_weights, "alpha": alpha, "w_con": w_con}


def _loss_and_grads(arrays, labels_a, labels_b, lam, weights, alpha, w_con, where=None,
                    axis_name=None):
  """(loss, aux, gradients wrt the eight arrays)."""

  def fn(*arrays):
    return reweight_jax.baselines.glmc_loss(*arrays, labels_a, labels_b, lam=lam,
                                            class_weights=weights, alpha=alpha, w_con=w_con,
                                            axis_name=axis_name, where=where)

  (loss, aux), grads = jax.value_and_grad(fn, argnums=tuple(range(8)), has_aux=True)(*arrays)
  return loss, aux, grads


class GLMCLossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_value_and_gradient_match_reference(self):
    rng = np.random.default_rng(4)
    arrays = _loss_inputs(rng, LABELS_A.size)
    weights = np.asarray(reweight_jax.baselines.glmc_class_weights(COUNTS, 1.2))
    lam, alpha, w_con = 0.37, 0.8, 4.0
    fn = self.variant(lambda *x: _loss_and_grads(x, LABELS_A, LABELS_B, lam, weights, alpha,
                                                 w_con))
    loss, aux, grads = fn(*arrays)
    loss_ref, bal_ref, reb_ref, con_ref, grads_ref = ref.glmc_loss(
        *_f64(arrays), LABELS_A, LABELS_B, lam, weights, alpha, w_con)
    np.testing.assert_allclose(loss, loss_ref, rtol=2e-6)
    np.testing.assert_allclose(aux.balanced, bal_ref, rtol=2e-6)
    np.testing.assert_allclose(aux.rebalanced, reb_ref, rtol=2e-6)
    np.testing.assert_allclose(aux.consistency, con_ref, rtol=2e-6, atol=1e-7)
    for name, grad in zip(LOSS_ARGS, grads):
      if name.startswith("proj"):
        np.testing.assert_array_equal(grad, 0.0)  # stop-gradient
      else:
        np.testing.assert_allclose(grad, grads_ref[name], rtol=1e-4, atol=1e-7, err_msg=name)

  def test_padding_rows_count_nowhere(self):
    rng = np.random.default_rng(5)
    arrays = _loss_inputs(rng, LABELS_A.size)
    where = np.arange(LABELS_A.size) % 4 != 1
    garbage = [np.where(where[:, None], x, np.nan).astype(np.float32) for x in arrays]
    bad_b = np.where(where, LABELS_B, K + 3).astype(np.int32)  # out of range on padding only
    weights = np.asarray(reweight_jax.baselines.glmc_class_weights(COUNTS, 1.2))
    loss, aux, grads = jax.jit(lambda *x: _loss_and_grads(
        x, LABELS_A, bad_b, 0.6, weights, 0.3, 2.0, where=where))(*garbage)
    loss_ref, bal_ref, reb_ref, con_ref, grads_ref = ref.glmc_loss(
        *[x[where] for x in _f64(arrays)], LABELS_A[where], LABELS_B[where], 0.6, weights, 0.3,
        2.0)
    np.testing.assert_allclose(loss, loss_ref, rtol=2e-6)
    np.testing.assert_allclose([aux.balanced, aux.rebalanced, aux.consistency],
                               [bal_ref, reb_ref, con_ref], rtol=2e-6, atol=1e-7)
    for name, grad in zip(LOSS_ARGS, grads):
      np.testing.assert_array_equal(grad[~where], 0.0)
      if not name.startswith("proj"):
        np.testing.assert_allclose(grad[where], grads_ref[name], rtol=1e-4, atol=1e-7,
                                   err_msg=name)

  def test_out_of_range_labels(self):
    arrays = _loss_inputs(np.random.default_rng(6), LABELS_A.size)
    weights = np.ones(K, np.float32)
    traced = jax.jit(lambda a, b: reweight_jax.baselines.glmc_loss(
        *arrays, a, b, **_kw(0.5, weights, 0.5, 1.0)))
    bad = np.where(np.arange(LABELS_A.size) == 7, K, LABELS_A).astype(np.int32)
    loss, aux = traced(bad, LABELS_B)
    self.assertTrue(np.isnan(loss))  # NaN, never a clipped class
    self.assertTrue(np.isnan(aux.balanced) and np.isnan(aux.rebalanced))
    self.assertTrue(np.isfinite(aux.consistency))
    self.assertTrue(np.isnan(traced(LABELS_A, np.where(bad == K, -1, bad).astype(np.int32))[0]))
    with self.assertRaisesRegex(ValueError, "labels_a"):
      reweight_jax.baselines.glmc_loss(*arrays, bad, LABELS_B, **_kw(0.5, weights, 0.5, 1.0))
    with self.assertRaisesRegex(ValueError, "labels_b"):
      reweight_jax.baselines.glmc_loss(*arrays, LABELS_A, bad, **_kw(0.5, weights, 0.5, 1.0))

  def test_bad_arguments_raise_naming_them(self):
    arrays = _loss_inputs(np.random.default_rng(7), LABELS_A.size)
    weights = np.ones(K, np.float32)
    args = (LABELS_A, LABELS_B)
    kw = _kw(0.5, weights, 0.5, 1.0)
    for index, name in enumerate(LOSS_ARGS[1:], start=1):
      broken = list(arrays)
      broken[index] = broken[index][:, :-1]
      with self.assertRaisesRegex(ValueError, name):
        reweight_jax.baselines.glmc_loss(*broken, *args, **kw)
    with self.assertRaisesRegex(ValueError, "logits_fc_g"):
      reweight_jax.baselines.glmc_loss(*arrays, LABELS_A[:-1], LABELS_B[:-1], **kw)
    with self.assertRaisesRegex(ValueError, "alpha"):
      reweight_jax.baselines.glmc_loss(*arrays, LABELS_A, LABELS_B, **_kw(0.5, weights, 1.2, 1.0))
    with self.assertRaisesRegex(ValueError, "w_con"):
      reweight_jax.baselines.glmc_loss(*arrays, LABELS_A, LABELS_B, **_kw(0.5, weights, 0.5, -1.0))
    with self.assertRaisesRegex(ValueError, "class_weights"):
      reweight_jax.baselines.glmc_loss(*arrays, LABELS_A, LABELS_B,
                                       **_kw(0.5, weights[:-1], 0.5, 1.0))
    with self.assertRaisesRegex(ValueError, "where"):
      reweight_jax.baselines.glmc_loss(*arrays, *args, **kw, where=np.ones(3, bool))
    with self.assertRaisesRegex(TypeError, "missing 1 required keyword-only argument: 'w_con'"):
      reweight_jax.baselines.glmc_loss(  # pyright: ignore[reportCallIssue]
          *arrays, *args, lam=0.5, class_weights=weights, alpha=0.5)
    with self.assertRaisesRegex(TypeError, "positional argument"):  # λ, v, α, w_con keyword-only
      reweight_jax.baselines.glmc_loss(*arrays, *args, 0.5, weights, 0.5, 1.0)

  def test_shard_map_8_devices_equals_one_device(self):
    # Means over the global batch (psum-ed count): pmean of the shares and of their gradients
    # equals one device on the concatenated batch.
    batch = 24
    rng = np.random.default_rng(8)
    arrays = _loss_inputs(rng, batch)
    labels_a = rng.integers(0, K - 1, batch).astype(np.int32)  # the last class absent
    labels_b = rng.integers(0, K, batch).astype(np.int32)
    where = rng.random(batch) < 0.8
    weights = np.asarray(reweight_jax.baselines.glmc_class_weights(COUNTS, 1.2))
    lam, alpha, w_con = 0.42, 0.6, 4.0

    def local(*inputs):
      *arrays, a, b, w = inputs
      loss, aux, grads = _loss_and_grads(arrays, a, b, lam, weights, alpha, w_con, where=w,
                                         axis_name="i")
      # the share's gradient is 8× the rows' gradient of the global mean: pmean over devices
      return (jax.lax.pmean(loss, "i"), jax.tree.map(lambda x: jax.lax.pmean(x, "i"), aux),
              tuple(g / 8 for g in grads))

    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = P("i")
    loss, aux, grads = jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=(rows,) * 11, out_specs=(P(), P(), (rows,) * 8),
        check_vma=False))(*arrays, labels_a, labels_b, where)
    loss1, aux1, grads1 = jax.jit(lambda *x: _loss_and_grads(
        x[:8], x[8], x[9], lam, weights, alpha, w_con, where=x[10]))(
            *arrays, labels_a, labels_b, where)
    np.testing.assert_allclose(loss, loss1, rtol=1e-6)
    np.testing.assert_allclose(np.array(aux), np.array(aux1), rtol=1e-6, atol=1e-7)
    for name, grad, grad1 in zip(LOSS_ARGS, grads, grads1):
      np.testing.assert_allclose(grad, grad1, rtol=1e-5, atol=1e-8, err_msg=name)
    loss_ref = ref.glmc_loss(*[x[where] for x in _f64(arrays)], labels_a[where], labels_b[where],
                             lam, weights, alpha, w_con)[0]
    np.testing.assert_allclose(loss, loss_ref, rtol=2e-6)


# ------------------------------------------------------------------------------------------------
# Property: random batches against the float64 reference
# ------------------------------------------------------------------------------------------------

BUCKET = 32  # real rows 1 … 32 padded to one size
CLASS_BUCKET = 20  # K = 2 … 20 padded with classes of logit −inf and weight 0: one compile in all


@st.composite
def _examples(draw):
  rows = draw(st.integers(1, BUCKET))
  num_classes = draw(st.integers(2, CLASS_BUCKET))
  lam = draw(st.floats(0.0, 1.0))
  alpha = draw(st.floats(0.0, 1.0))
  w_con = draw(st.sampled_from([0.0, 1.0, 4.0, 10.0]))
  exponent = draw(st.sampled_from([0.0, 1.0, 1.2]))
  pattern_a = draw(st.sampled_from(S.PATTERNS))
  pattern_b = draw(st.sampled_from(S.PATTERNS))
  scale = 10.0 ** draw(st.floats(-2.0, 2.0))
  seed = draw(st.integers(0, 2**32 - 1))
  return rows, num_classes, lam, alpha, w_con, exponent, pattern_a, pattern_b, scale, seed


@jax.jit
def _padded_loss(arrays, labels_a, labels_b, lam, weights, alpha, w_con, where):
  return _loss_and_grads(arrays, labels_a, labels_b, lam, weights, alpha, w_con, where=where)


@given(example=_examples())
def test_property_matches_reference(example):
  _check_against_reference(example)


@pytest.mark.slow
@S.SLOW
@given(example=_examples())
def test_property_matches_reference_slow(example):
  _check_against_reference(example)


def _pad(x, rows, columns, fill, column_fill):
  out = np.full((rows, columns), fill, np.float32)
  out[:, x.shape[1]:] = column_fill
  out[:x.shape[0], :x.shape[1]] = x
  return out


def _check_against_reference(example):
  """glmc_loss of `rows` real rows (padded with garbage rows and −inf classes) vs the float64
  loops, value, terms and gradients."""
  rows, num_classes, lam, alpha, w_con, exponent, pattern_a, pattern_b, scale, seed = example
  S.before_example()
  rng = np.random.default_rng(seed)
  labels_a = S.make_labels(rng, rows, num_classes, pattern_a)
  labels_b = S.make_labels(rng, rows, num_classes, pattern_b)
  counts = rng.integers(0, 500, num_classes)
  counts[0] = max(counts[0], 1)
  weights = ref.class_weights(counts, exponent).astype(np.float32)
  arrays = _loss_inputs(rng, rows, num_classes, D, scale)
  note(f"rows={rows} K={num_classes} λ={lam:.3g} α={alpha:.3g} w_con={w_con} ℓw={exponent} "
       f"{pattern_a}/{pattern_b} scale={scale:.3g}")
  # Padding rows hold NaN and out-of-range labels; padded classes a −inf logit, never a label,
  # weight 0: softmax and targets are those of the K real classes.
  padded = ([_pad(x, BUCKET, CLASS_BUCKET, np.nan, -np.inf) for x in arrays[:4]]
            + [_pad(x, BUCKET, D, np.nan, np.nan) for x in arrays[4:]])
  where = np.arange(BUCKET) < rows
  pad_labels = lambda y: np.where(where, np.pad(y, (0, BUCKET - rows)), BUCKET).astype(np.int32)
  loss, aux, grads = _padded_loss(
      padded, pad_labels(labels_a), pad_labels(labels_b), np.float32(lam),
      np.pad(weights, (0, CLASS_BUCKET - num_classes)), np.float32(alpha), np.float32(w_con),
      where)
  loss_ref, bal_ref, reb_ref, con_ref, grads_ref = ref.glmc_loss(
      *_f64(arrays), labels_a, labels_b, np.float64(np.float32(lam)), weights,
      np.float64(np.float32(alpha)), w_con)
  # float32 rounding of log-softmax: a few ε per term times |z| + log K, weighted by the targets
  # (Σ y = 1, Σ y^w ≤ max v), plus the cosines' few ε each.
  logit_size = np.max(np.abs(np.stack(arrays[:4]))) + np.log(num_classes) + 1.0
  bal_bound = 2 * 4 * S.EPS32 * logit_size
  reb_bound = 2 * 4 * S.EPS32 * logit_size * max(1.0, float(np.max(weights)))
  con_bound = 2 * 4 * S.EPS32
  S.assert_close(aux.balanced, bal_ref, bal_bound, "GLMC L_bal vs reference")
  S.assert_close(aux.rebalanced, reb_ref, reb_bound, "GLMC L_reb vs reference")
  S.assert_close(aux.consistency, con_ref, con_bound, "GLMC L_con vs reference")
  S.assert_close(loss, loss_ref,
                 alpha * bal_bound + (1 - alpha) * reb_bound + w_con * con_bound
                 + 4 * S.EPS32 * abs(loss_ref), "GLMC loss vs reference")
  for name, grad in zip(LOSS_ARGS, grads):
    grad = np.asarray(grad)
    S.assert_close(grad[rows:], np.zeros_like(grad[rows:]), 0.0, f"GLMC ∂/∂{name} padding rows")
    if name.startswith("logits"):
      S.assert_close(grad[:, num_classes:], np.zeros_like(grad[:, num_classes:]), 0.0,
                     f"GLMC ∂/∂{name} padded classes")
      grad = grad[:, :num_classes]
    if name in grads_ref:
      expected = grads_ref[name]
      S.assert_close(grad[:rows], expected, 1e-5 * np.max(np.abs(expected)) + 1e-7,
                     f"GLMC ∂/∂{name} vs reference")
    else:  # projections: stop-gradient
      S.assert_close(grad, np.zeros_like(grad), 0.0, f"GLMC ∂/∂{name} (stop-gradient)")
