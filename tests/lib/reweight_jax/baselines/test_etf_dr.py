"""reweight_jax.baselines.etf_dr against the float64 loop reference (PIPELINES spec, 'ETF-DR')."""

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
from tests.reference import numpy_etf_dr as ref

K, D = 6, 8
# Class 5 absent, class 4 once, class 0 four times: absent, singleton and repeated classes.
LABELS = np.array([0, 1, 0, 2, 3, 0, 1, 4, 2, 0, 3, 1], np.int32)


def _features(rng, rows, dim=D, scale=1.0):
  return (scale * rng.normal(size=(rows, dim))).astype(np.float32)


class ETFClassifierTest(parameterized.TestCase):

  @parameterized.parameters((2, 2), (3, 3), (6, 8), (10, 64), (100, 128))
  def test_simplex_etf_and_reference(self, num_classes, dim):
    etf = reweight_jax.baselines.etf_classifier(num_classes, dim, seed=3)
    self.assertEqual(etf.shape, (dim, num_classes))
    self.assertEqual(etf.dtype, jnp.float32)
    gram = np.asarray(etf, np.float64).T @ np.asarray(etf, np.float64)
    np.testing.assert_allclose(np.diag(gram), 1.0, atol=1e-5)  # unit columns
    off = gram[~np.eye(num_classes, dtype=bool)]
    np.testing.assert_allclose(off, -1.0 / (num_classes - 1), atol=1e-5)  # m_jᵀm_k = −1/(K−1)
    np.testing.assert_allclose(np.sum(np.asarray(etf, np.float64), axis=1), 0.0, atol=1e-5)
    if num_classes <= 10:  # the loop Gram–Schmidt is O(d·K²) in Python
      np.testing.assert_allclose(etf, ref.etf_classifier(num_classes, dim, 3), atol=1e-6)

  def test_seed_determines_the_draw(self):
    first = reweight_jax.baselines.etf_classifier(5, 16, seed=0)
    np.testing.assert_array_equal(first, reweight_jax.baselines.etf_classifier(5, 16, seed=0))
    np.testing.assert_array_equal(first, reweight_jax.baselines.etf_classifier(5, 16, seed=np.int64(0)))
    self.assertGreater(float(jnp.max(jnp.abs(first - reweight_jax.baselines.etf_classifier(5, 16, 1)))), 0.1)

  def test_bad_sizes_raise_naming_the_argument(self):
    with self.assertRaisesRegex(ValueError, "dim.*d ≥ K"):
      reweight_jax.baselines.etf_classifier(5, 4, seed=0)
    with self.assertRaisesRegex(ValueError, "num_classes.*at least 2"):
      reweight_jax.baselines.etf_classifier(1, 4, seed=0)
    with self.assertRaisesRegex(ValueError, "num_classes"):
      reweight_jax.baselines.etf_classifier(0, 4, seed=0)
    with self.assertRaisesRegex(TypeError, "num_classes"):
      reweight_jax.baselines.etf_classifier(2.0, 4, seed=0)
    with self.assertRaisesRegex(TypeError, "dim"):
      reweight_jax.baselines.etf_classifier(2, 4.0, seed=0)
    with self.assertRaisesRegex(ValueError, "seed"):
      reweight_jax.baselines.etf_classifier(2, 4, seed=-1)


class GivenEwTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference(self):
    fn = self.variant(lambda y, w: reweight_jax.baselines.given_ew(y, K, where=w))
    # absent (5), singleton (4) and repeated (0) classes
    np.testing.assert_allclose(fn(LABELS, None), ref.given_ew(LABELS, K), rtol=1e-6)
    # one class: E = √(B/(1·B)) = 1 for it, 1 for the others
    np.testing.assert_allclose(fn(np.full(7, 2, np.int32), None), np.ones(K), rtol=1e-6)
    # padding counts nowhere
    where = np.arange(LABELS.size) % 3 != 1
    np.testing.assert_allclose(fn(LABELS, where), ref.given_ew(LABELS[where], K), rtol=1e-6)
    # every row padding: every class absent
    np.testing.assert_allclose(fn(LABELS, np.zeros(LABELS.size, bool)), np.ones(K))

  def test_out_of_range_label(self):
    traced = jax.jit(lambda y, w: reweight_jax.baselines.given_ew(y, K, where=w))
    bad = np.where(np.arange(LABELS.size) == 3, K, LABELS).astype(np.int32)
    self.assertTrue(np.all(np.isnan(traced(bad, None))))  # NaN, never a clipped class
    where = np.arange(LABELS.size) != 3  # the bad label on a padding row counts nowhere
    np.testing.assert_allclose(traced(bad, where), ref.given_ew(LABELS[where], K), rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.given_ew(bad, K)


class DotRegressionTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("normalised_given_ew", True, True, False),
      ("unnormalised_given_ew", False, True, False),
      ("unit_scale", False, False, False),
      ("padded", False, True, True),
  )
  def test_value_and_gradient_match_reference(self, normalised, scaled, padded):
    rng = np.random.default_rng(0)
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=0)
    features = _features(rng, LABELS.size, scale=1.0 if normalised else 3.0)
    features[4] = 0.0  # ‖h‖ = 0: the clamped norm, no NaN
    if normalised:
      features = np.asarray(reweight_jax.baselines.etf_normalize(features))
    where = (np.arange(LABELS.size) % 4 != 2) if padded else None
    real = np.ones(LABELS.size, bool) if where is None else where
    if padded:
      features[~real] = np.nan  # padding may hold anything
    scale = reweight_jax.baselines.given_ew(LABELS, K, where=where) if scaled else None

    fn = self.variant(jax.value_and_grad(lambda h: reweight_jax.baselines.dot_regression_loss(
        h, LABELS, etf, class_scale=scale, where=where), has_aux=True))
    (loss, per_example), grad = fn(features)

    ref_scale = ref.given_ew(LABELS[real], K) if scaled else None
    loss_ref, per_ref = ref.dot_regression(features[real], LABELS[real], etf, ref_scale)
    grad_ref = ref.dot_regression_grad(features[real], LABELS[real], etf, ref_scale)
    np.testing.assert_allclose(loss, loss_ref, rtol=2e-5)
    np.testing.assert_allclose(per_example[real], per_ref, rtol=2e-5, atol=1e-7)
    np.testing.assert_array_equal(per_example[~real], 0.0)
    np.testing.assert_allclose(grad[real], grad_ref, rtol=2e-4, atol=1e-6)
    np.testing.assert_array_equal(grad[~real], 0.0)  # padding gets no gradient (no NaN)

  def test_unit_features_give_the_class_balanced_mean(self):
    # ‖h‖ = 1 and GivenEw: ℓ_i = ½E_{y_i}²(1 − cos_i)², so the mean over the batch is
    # (1/C_b) Σ_c mean_{i∈c} ½(1 − cos_i)²: a per-batch class-balanced mean.
    rng = np.random.default_rng(1)
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=1)
    features = np.asarray(reweight_jax.baselines.etf_normalize(_features(rng, LABELS.size)))
    loss, _ = jax.jit(lambda h, y: reweight_jax.baselines.dot_regression_loss(
        h, y, etf, class_scale=reweight_jax.baselines.given_ew(y, K)))(features, LABELS)
    np.testing.assert_allclose(loss, ref.class_balanced_cosine_loss(features, LABELS, etf),
                               rtol=2e-5)
    # a one-class batch: E = 1 and the loss is the plain mean
    one = np.full(5, 3, np.int32)
    loss, _ = reweight_jax.baselines.dot_regression_loss(features[:5], one, etf,
                                               class_scale=reweight_jax.baselines.given_ew(one, K))
    np.testing.assert_allclose(loss, ref.class_balanced_cosine_loss(features[:5], one, etf),
                               rtol=2e-5)

  def test_zero_features_are_finite(self):
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=0)
    zeros = np.zeros((3, D), np.float32)
    labels = np.array([0, 1, 2], np.int32)
    (loss, _), grad = jax.value_and_grad(lambda h: reweight_jax.baselines.dot_regression_loss(
        reweight_jax.baselines.etf_normalize(h), labels, etf), has_aux=True)(zeros)
    self.assertTrue(np.isfinite(loss))
    self.assertTrue(np.all(np.isfinite(grad)))
    np.testing.assert_array_equal(reweight_jax.baselines.etf_normalize(zeros), 0.0)

  def test_etf_normalize(self):
    rng = np.random.default_rng(2)
    features = _features(rng, 5, scale=7.0)
    normalised = reweight_jax.baselines.etf_normalize(features)
    np.testing.assert_allclose(np.linalg.norm(normalised, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalised * np.linalg.norm(features, axis=1, keepdims=True),
                               features, rtol=1e-5)
    self.assertEqual(reweight_jax.baselines.etf_normalize(features.astype(jnp.bfloat16)).dtype, jnp.bfloat16)

  @chex.variants(with_jit=True, without_jit=True)
  def test_mixup(self):
    rng = np.random.default_rng(3)
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=0)
    features = np.asarray(reweight_jax.baselines.etf_normalize(_features(rng, LABELS.size)))
    labels_b = LABELS[rng.permutation(LABELS.size)]
    scale = reweight_jax.baselines.given_ew(LABELS, K)  # E from the unmixed labels
    fn = self.variant(lambda lam: reweight_jax.baselines.mixup_dot_regression_loss(
        features, LABELS, labels_b, lam, etf, class_scale=scale))
    plain, plain_per = reweight_jax.baselines.dot_regression_loss(features, LABELS, etf, class_scale=scale)
    loss, per_example = fn(1.0)
    np.testing.assert_allclose(loss, plain, rtol=1e-6)  # jit fuses differently
    np.testing.assert_allclose(per_example, plain_per, rtol=1e-6)
    ref_scale = ref.given_ew(LABELS, K)
    for lam in (0.0, 0.3):
      np.testing.assert_allclose(
          fn(lam)[0], ref.mixup_dot_regression(features, LABELS, labels_b, lam, etf, ref_scale),
          rtol=2e-5)

  def test_out_of_range_labels_are_nan_under_jit(self):
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=0)
    features = _features(np.random.default_rng(4), LABELS.size)
    bad = np.where(np.arange(LABELS.size) == 5, -1, LABELS).astype(np.int32)
    loss_fn = jax.jit(lambda h, y, w: reweight_jax.baselines.dot_regression_loss(
        h, y, etf, class_scale=reweight_jax.baselines.given_ew(y, K, where=w), where=w))
    loss, per_example = loss_fn(features, bad, None)
    self.assertTrue(np.isnan(loss))
    self.assertTrue(np.isnan(per_example[5]))
    unscaled, per_unscaled = jax.jit(lambda h, y: reweight_jax.baselines.dot_regression_loss(h, y, etf))(
        features, bad)
    self.assertTrue(np.isnan(unscaled))  # NaN from the label itself, not only from E
    self.assertTrue(np.all(np.isfinite(np.delete(per_unscaled, 5))))
    where = np.arange(LABELS.size) != 5  # on a padding row the bad label counts nowhere
    loss, _ = loss_fn(features, bad, where)
    loss_ref, _ = ref.dot_regression(features[where], LABELS[where], etf,
                                     ref.given_ew(LABELS[where], K))
    np.testing.assert_allclose(loss, loss_ref, rtol=2e-5)
    mixed = jax.jit(lambda y_b: reweight_jax.baselines.mixup_dot_regression_loss(
        features, LABELS, y_b, 1.0, etf)[0])(np.where(bad == -1, K, bad).astype(np.int32))
    self.assertTrue(np.isnan(mixed))  # a bad label_b with λ = 1 is still NaN
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.dot_regression_loss(features, bad, etf)
    with self.assertRaisesRegex(ValueError, "labels_b"):
      reweight_jax.baselines.mixup_dot_regression_loss(features, LABELS, bad, 0.5, etf)

  def test_bad_arguments_raise_naming_them(self):
    etf = reweight_jax.baselines.etf_classifier(K, D, seed=0)
    features = np.zeros((LABELS.size, D), np.float32)
    with self.assertRaisesRegex(ValueError, "classifier"):
      reweight_jax.baselines.dot_regression_loss(features, LABELS, etf.T)
    with self.assertRaisesRegex(ValueError, "features"):
      reweight_jax.baselines.dot_regression_loss(features[:-1], LABELS, etf)
    with self.assertRaisesRegex(TypeError, "features"):
      reweight_jax.baselines.dot_regression_loss(features.astype(np.int32), LABELS, etf)
    with self.assertRaisesRegex(ValueError, "class_scale"):
      reweight_jax.baselines.dot_regression_loss(features, LABELS, etf, class_scale=np.ones(K + 1))
    with self.assertRaisesRegex(ValueError, "where"):
      reweight_jax.baselines.dot_regression_loss(features, LABELS, etf, where=np.ones(3, bool))
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.mixup_dot_regression_loss(features, LABELS, LABELS, 1.5, etf)
    with self.assertRaisesRegex(ValueError, "lam"):
      reweight_jax.baselines.mixup_dot_regression_loss(features, LABELS, LABELS, np.ones(2), etf)

  @parameterized.named_parameters(
      ("dense_slots", 64, 6, 8),     # K ≤ global batch: slot k is class k
      ("compact_slots", 16, 40, 40),  # K > global batch: compacted present classes
  )
  def test_shard_map_8_devices_equals_one_device(self, batch, num_classes, dim):
    # E from psum-ed counts, the loss (pmean of the shares) and the gradient equal one device's.
    rng = np.random.default_rng(5)
    labels = rng.integers(0, num_classes - 1, batch).astype(np.int32)  # the last class absent
    labels_b = labels[rng.permutation(batch)]
    where = rng.random(batch) < 0.8
    features = _features(rng, batch, dim)
    features[~where] = 0.0  # padding rows pass etf_normalize: zero rows (its edge case)
    etf = reweight_jax.baselines.etf_classifier(num_classes, dim, seed=2)
    lam = 0.7

    def step(h, y, y_b, w, axis_name=None):
      scale = reweight_jax.baselines.given_ew(y, num_classes, where=w, axis_name=axis_name)

      def loss_fn(h):
        loss, per_example = reweight_jax.baselines.dot_regression_loss(
            reweight_jax.baselines.etf_normalize(h), y, etf, class_scale=scale, where=w, axis_name=axis_name)
        mixed, _ = reweight_jax.baselines.mixup_dot_regression_loss(
            reweight_jax.baselines.etf_normalize(h), y, y_b, lam, etf, class_scale=scale, where=w,
            axis_name=axis_name)
        return loss + mixed, (loss, mixed, per_example)

      (_, (loss, mixed, per_example)), grad = jax.value_and_grad(loss_fn, has_aux=True)(h)
      return scale, loss, mixed, per_example, grad

    def local(h, y, y_b, w):
      scale, loss, mixed, per_example, grad = step(h, y, y_b, w, axis_name="i")
      return (scale[None], jax.lax.pmean(loss, "i"), jax.lax.pmean(mixed, "i"), per_example,
              grad / 8)  # the share's gradient is 8× the rows' gradient: pmean over devices

    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = P("i")
    scale, loss, mixed, per_example, grad = jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=(rows, rows, rows, rows),
        out_specs=(rows, P(), P(), rows, rows), check_vma=False))(features, labels, labels_b, where)
    scale1, loss1, mixed1, per_example1, grad1 = jax.jit(step)(features, labels, labels_b, where)
    np.testing.assert_allclose(scale, np.broadcast_to(scale1, (8, num_classes)), rtol=1e-6)
    np.testing.assert_allclose(scale1, ref.given_ew(labels[where], num_classes), rtol=1e-6)
    np.testing.assert_allclose(loss, loss1, rtol=1e-6)
    np.testing.assert_allclose(mixed, mixed1, rtol=1e-6)
    np.testing.assert_allclose(per_example, per_example1, rtol=1e-6)
    np.testing.assert_allclose(grad, grad1, rtol=1e-5, atol=1e-8)
    self.assertTrue(np.all(np.isfinite(grad)))


# ------------------------------------------------------------------------------------------------
# Property: random batches against the float64 reference
# ------------------------------------------------------------------------------------------------

BUCKET = 32  # real rows 1 … 32 padded to one size: one compile per (K, d)


@st.composite
def _examples(draw):
  num_classes = draw(st.integers(2, 12))
  dim = num_classes + draw(st.integers(0, 4))
  rows = draw(st.integers(1, BUCKET))
  pattern = draw(st.sampled_from(S.PATTERNS))
  normalised = draw(st.booleans())
  scale = 10.0 ** draw(st.floats(-2.0, 2.0))
  garbage = draw(st.sampled_from(S.GARBAGE))
  seed = draw(st.integers(0, 2**32 - 1))
  return num_classes, dim, rows, pattern, normalised, scale, garbage, seed


@jax.jit
def _given_ew_and_loss(features, labels, where, etf):
  scale = reweight_jax.baselines.given_ew(labels, etf.shape[1], where=where)
  return (scale,) + reweight_jax.baselines.dot_regression_loss(features, labels, etf, class_scale=scale,
                                                     where=where)


@given(example=_examples())
def test_property_matches_reference(example):
  _check_against_reference(example)


@pytest.mark.slow
@S.SLOW
@given(example=_examples())
def test_property_matches_reference_slow(example):
  _check_against_reference(example)


def _check_against_reference(example):
  """given_ew, ℓ_i and the loss of `rows` real rows padded with garbage vs the float64 loops."""
  num_classes, dim, rows, pattern, normalised, scale, garbage, seed = example
  S.before_example()
  rng = np.random.default_rng(seed)
  labels = S.make_labels(rng, rows, num_classes, pattern)
  features = scale * rng.normal(size=(rows, dim))
  if normalised:
    features /= np.linalg.norm(features, axis=1, keepdims=True)
  features = features.astype(np.float32)
  etf = reweight_jax.baselines.etf_classifier(num_classes, dim, seed=seed % 1000)
  note(f"K={num_classes} d={dim} rows={rows} {pattern} scale={scale:.3g} padding {garbage}")
  # Padding rows of garbage with labels out of range, after the real rows.
  fill = {"zeros": 0.0, "huge": 1e30, "nan": np.nan, "inf": np.inf}[garbage]
  padded = np.full((BUCKET, dim), fill, np.float32)
  padded[:rows] = features
  padded_labels = np.full(BUCKET, num_classes, np.int32)
  padded_labels[:rows] = labels
  where = np.arange(BUCKET) < rows

  scale_e, loss, per_example = _given_ew_and_loss(padded, padded_labels, where, etf)
  scale_ref = ref.given_ew(labels, num_classes)
  loss_ref, per_ref = ref.dot_regression(features, labels, etf, scale_ref)
  S.assert_close(scale_e, scale_ref, 4 * S.EPS32 * scale_ref, "given_ew vs reference")
  # |error of ℓ_i| ≲ |h_iᵀw_i − ‖w_i‖‖h_i‖| · d·ε·‖w_i‖‖h_i‖ / ‖h_i‖ ≤ 2d·ε·‖w_i‖²‖h_i‖
  bound = (8 * dim * S.EPS32 * scale_ref[labels] ** 2
           * np.maximum(np.linalg.norm(features.astype(np.float64), axis=1), 1e-8))
  S.assert_close(per_example[:rows], per_ref, bound + 1e-30, "DR per-example vs reference")
  S.assert_close(per_example[rows:], np.zeros(BUCKET - rows), 0.0, "DR padding rows")
  # plus the rounding of the sum of B terms
  S.assert_close(loss, loss_ref, np.mean(bound) + BUCKET * S.EPS32 * np.mean(per_ref) + 1e-30,
                 "DR loss vs reference")
