"""mr2_jax.class_stats against the float64 NumPy reference written from the MR2 spec."""

from unittest import mock

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

import mr2_jax
from mr2_reweight_core import class_sums
from tests import cases
from tests.reference import numpy_mr2 as ref

RTOL = 1e-5


class UpdateClassStatsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  @parameterized.named_parameters(*[(c[0], *c[1:]) for c in cases.CASES])
  def test_matches_reference(self, batch, num_classes, dim, pattern):
    for p in (2.0, 5.0):
      features, labels, _ = cases.make_case(0, batch, num_classes, dim, pattern)
      rng = np.random.default_rng(1)
      a, v, seen = cases.random_stats(rng, num_classes)
      update = self.variant(lambda s, f, y: mr2_jax.update_class_stats(s, f, y, decay=0.8, p=p))
      out = update(cases.class_stats(a, v, seen), features, labels)
      a_ref, v_ref, seen_ref = ref.update_class_stats(a, v, seen, features, labels, 0.8, p)
      np.testing.assert_allclose(out.sq_mean_norm, a_ref, rtol=RTOL, atol=1e-6)
      np.testing.assert_allclose(out.mean_sq_deviation, v_ref, rtol=RTOL, atol=1e-6)
      np.testing.assert_array_equal(out.seen, seen_ref)

  @chex.variants(with_jit=True, without_jit=True)
  def test_where_masks_padding(self):
    features, labels, _ = cases.make_case(2, 16, 6, 4, "random")
    where = np.arange(16) < 11
    features[~where] = np.nan  # padding content must not matter
    out = self.variant(lambda s, f, y, w: mr2_jax.update_class_stats(s, f, y, where=w))(
        mr2_jax.init_class_stats(6), features, labels, where)
    z = np.zeros(6)
    a_ref, v_ref, seen_ref = ref.update_class_stats(z, z, np.zeros(6, bool), features, labels,
                                                    0.9, 2.0, where=where)
    np.testing.assert_allclose(out.sq_mean_norm, a_ref, rtol=RTOL)
    np.testing.assert_allclose(out.mean_sq_deviation, v_ref, rtol=RTOL)
    np.testing.assert_array_equal(out.seen, seen_ref)

  def test_first_sighting_replaces_and_absent_classes_keep_values(self):
    stats = cases.class_stats(np.array([5., 0., 7.], np.float32), np.array([1., 0., 2.], np.float32),
                   np.array([True, False, True]))
    features = np.array([[1., 0.], [3., 0.], [0., 2.]], np.float32)
    out = mr2_jax.update_class_stats(stats, features, np.array([1, 1, 0]), decay=0.5)
    # class 1 first seen: mean (2, 0) → a = 4, v = 1; class 0: a = 4, v = 0, EMA with 0.5.
    np.testing.assert_allclose(out.sq_mean_norm, [4.5, 4.0, 7.0])
    np.testing.assert_allclose(out.mean_sq_deviation, [0.5, 1.0, 2.0])
    np.testing.assert_array_equal(out.seen, [True, True, True])

  def test_p2_identity_a_plus_v_is_mean_sq_norm(self):
    features, labels, _ = cases.make_case(3, 40, 4, 6, "random")
    out = mr2_jax.update_class_stats(mr2_jax.init_class_stats(4), features, labels)
    for k in range(4):
      expected = np.mean(np.sum(features[labels == k].astype(np.float64) ** 2, -1))
      np.testing.assert_allclose(out.sq_mean_norm[k] + out.mean_sq_deviation[k], expected,
                                 rtol=RTOL)

  def test_no_gradient_into_statistics(self):
    features, labels, _ = cases.make_case(4, 12, 3, 4, "random")

    def total(f):
      s = mr2_jax.update_class_stats(mr2_jax.init_class_stats(3), f, labels)
      return jnp.sum(s.sq_mean_norm) + jnp.sum(s.mean_sq_deviation)

    np.testing.assert_array_equal(jax.grad(total)(features), np.zeros_like(features))

  def test_nan_row_is_left_out_and_counted(self):
    features, labels, _ = cases.make_case(5, 12, 4, 3, "random")
    labels[:4] = [0, 1, 2, 3]
    others = np.arange(12) != 0
    clean = mr2_jax.update_class_stats(mr2_jax.init_class_stats(4), features, labels, where=others)
    features[0] = np.nan  # a class-0 row
    dirty = mr2_jax.update_class_stats(mr2_jax.init_class_stats(4), features, labels)
    chex.assert_trees_all_equal(dirty._replace(skipped_rows=0), clean._replace(skipped_rows=0))
    self.assertEqual(int(dirty.skipped_rows), 1)
    self.assertEqual(int(clean.skipped_rows), 0)

  def test_large_norm_features_stay_accurate(self):
    features, labels, _ = cases.make_case(6, 32, 4, 8, "random", scale=1e3)
    features += 1e4  # a large common offset: the two-pass deviation must not cancel
    out = mr2_jax.update_class_stats(mr2_jax.init_class_stats(4), features, labels)
    z = np.zeros(4)
    _, v_ref, _ = ref.update_class_stats(z, z, np.zeros(4, bool), features, labels, 0.9, 2.0)
    np.testing.assert_allclose(out.mean_sq_deviation, v_ref, rtol=1e-4)
    chex.assert_tree_all_finite(out)


  @chex.variants(with_jit=True, without_jit=True)
  def test_bfloat16_features_accumulate_in_float32(self):
    # Found by the slow property run: 64 bf16 rows of two collapsed classes (every row of a class
    # the same vector) gave V = 0.012 for p = 5, the bf16 sum of 32 rows being off by several ulps.
    # The statistics upcast bf16 features: V = 0 up to float32 rounding, A = ‖m‖_p² of the bf16 value.
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 64).astype(np.int32)
    centres = 3.0 + rng.normal(size=(2, 1))
    features = jnp.asarray(centres[labels], jnp.bfloat16)
    stats = self.variant(lambda f, y: mr2_jax.update_class_stats(
        mr2_jax.init_class_stats(2), f, y, p=5.0))(features, labels)
    exact = np.asarray(features.astype(jnp.float32), np.float64)[[np.argmax(labels == 0),
                                                                   np.argmax(labels == 1)]]
    np.testing.assert_allclose(stats.mean_sq_deviation, 0.0, atol=1e-5)
    np.testing.assert_allclose(stats.sq_mean_norm, exact[:, 0] ** 2, rtol=1e-6)
    self.assertEqual(stats.mean_sq_deviation.dtype, jnp.float32)


class LpNormTest(parameterized.TestCase):

  @parameterized.parameters(2.0, 3.0, 5.0)
  def test_matches_reference(self, p):
    x = np.random.default_rng(0).normal(size=(7, 9)).astype(np.float32) * 50
    np.testing.assert_allclose(mr2_jax.lp_sq_norm(x, p), ref.lp_sq_norm(x, p), rtol=RTOL)

  def test_no_overflow_for_large_p_and_values(self):
    x = np.full((2, 4), 1e8, np.float32)
    chex.assert_tree_all_finite(mr2_jax.lp_sq_norm(x, 5.0))

  @parameterized.parameters(5.0, 3.5)
  def test_rows_past_float32_range_are_rescaled_row_by_row(self, p):
    # One-pass sums for ordinary rows; a row whose Σ|x|^p overflows (1e8), leaves the normal range
    # (1e-9: |x|^5 ≈ 1e-45) or is 0 gets the max-scaled form. Each row's value is the same with or
    # without such rows beside it (the ordinary rows bit for bit), and every row matches float64.
    rng = np.random.default_rng(3)
    ordinary = rng.normal(size=(3, 16)).astype(np.float32)
    special = np.stack([np.full(16, 1e8), rng.normal(size=16) * 1e-9, np.zeros(16),
                        np.r_[1e-9 * np.ones(15), 2.0]]).astype(np.float32)
    x = np.concatenate([ordinary, special])
    lp = jax.jit(lambda v: mr2_jax.lp_sq_norm(v, p))
    together, alone = np.asarray(lp(x)), np.asarray(lp(ordinary))
    np.testing.assert_array_equal(together[:3], alone)
    np.testing.assert_allclose(together, ref.lp_sq_norm(x.astype(np.float64), p), rtol=2e-6)
    self.assertEqual(together[5], 0.0)

  def test_masked_rows_do_not_send_the_call_to_the_scaled_form(self):
    # A zero (or NaN) row outside `where` is not checked: the one-pass sums are kept, and the
    # scaled form's branch of the cond never runs (counted by a callback inside it).
    from mr2_jax import lp_norm as cs
    runs = []
    original = cs._scaled_lp_sq_norm

    def counted(x, p):
      jax.debug.callback(lambda: runs.append(1))
      return original(x, p)

    x = np.random.default_rng(4).normal(size=(4, 8)).astype(np.float32)
    x[1] = 0.0
    x[2] = np.nan
    where = np.array([True, False, False, True])
    with mock.patch.object(cs, "_scaled_lp_sq_norm", counted):
      masked = jax.jit(lambda v, w: cs.lp_sq_norm(v, 5.0, where=w))(x, where)
      jax.block_until_ready(masked)
      self.assertEqual(len(runs), 0)
      unmasked = jax.jit(lambda v: cs.lp_sq_norm(v, 5.0))(x)
      jax.block_until_ready(unmasked)
      self.assertEqual(len(runs), 1)
    np.testing.assert_array_equal(np.asarray(masked)[where], np.asarray(unmasked)[where])
    np.testing.assert_allclose(np.asarray(masked)[where], ref.lp_sq_norm(x[where], 5.0), rtol=2e-6)


class PerDeviceReductionTest(parameterized.TestCase):
  """reduction='per_device': count-weighted means of per-device (a_k, v_k), 3·K scalars reduced."""

  @parameterized.parameters(2.0, 5.0)
  def test_matches_reference_and_gamma_exact_for_p2(self, p):
    rng = np.random.default_rng(0)
    devices, local_batch, num_classes, dim = 8, 6, 5, 4
    features = rng.normal(size=(devices, local_batch, dim)).astype(np.float32) + 2.0
    labels = rng.integers(0, num_classes, (devices, local_batch)).astype(np.int32)
    run = lambda reduction: jax.pmap(
        lambda s, f, y: mr2_jax.update_class_stats(s, f, y, p=p, axis_name="batch",
                                                   reduction=reduction),
        axis_name="batch", in_axes=(None, 0, 0))(mr2_jax.init_class_stats(num_classes), features,
                                                  labels)
    cheap = jax.tree.map(lambda x: x[0], run("per_device"))
    exact = jax.tree.map(lambda x: x[0], run("exact"))
    # Reference: per-device moments, then count-weighted means over devices.
    sums = np.zeros((3, num_classes))
    for dev in range(devices):
      a, v, n = ref.batch_class_moments(features[dev], labels[dev], num_classes, p)
      sums += np.stack([n * a, n * v, n])
    counts = np.maximum(sums[2], 1)
    np.testing.assert_allclose(cheap.sq_mean_norm, sums[0] / counts, rtol=RTOL)
    np.testing.assert_allclose(cheap.mean_sq_deviation, sums[1] / counts, rtol=RTOL)
    z = np.zeros(num_classes)
    a_ref, v_ref, _ = ref.update_class_stats(z, z, np.zeros(num_classes, bool),
                                             features.reshape(-1, dim), labels.reshape(-1), 0.9, p)
    np.testing.assert_allclose(exact.sq_mean_norm, a_ref, rtol=RTOL)
    np.testing.assert_allclose(exact.mean_sq_deviation, v_ref, rtol=RTOL)
    gamma_cheap, gamma_exact = mr2_jax.class_margins(cheap), mr2_jax.class_margins(exact)
    if p == 2.0:  # A + V is the class's mean squared norm either way
      np.testing.assert_allclose(gamma_cheap, gamma_exact, rtol=1e-5)
    self.assertTrue(np.all(np.asarray(cheap.mean_sq_deviation) <= np.asarray(exact.mean_sq_deviation)
                           * (1 + 1e-6)))

  def test_unknown_reduction(self):
    with self.assertRaisesRegex(ValueError, "reduction"):
      mr2_jax.update_class_stats(mr2_jax.init_class_stats(2), np.zeros((2, 3), np.float32),
                                 np.array([0, 1]), reduction="mean")


def test_integral_p_uses_integer_powers_with_the_same_value():
  """Released form (p = 5): |x|^p as multiplications (`integer_pow`), not exp/log (`pow`), with the
  value of the float64 definition (Σ|x|^p)^{2/p}, large norms included (overflow-safe scaling)."""
  from mr2_jax import lp_norm as cs
  rng = np.random.default_rng(0)
  x = (rng.normal(size=(16, 64)) * np.logspace(-3, 4, 16)[:, None]).astype(np.float32)
  for p in (3.0, 5.0, 2.5):
    jaxpr = str(jax.make_jaxpr(lambda x, p=p: cs.lp_sq_norm(x, p))(x))
    assert ("integer_pow" in jaxpr) == float(p).is_integer(), (p, jaxpr)
    x64 = x.astype(np.float64)
    expected = np.sum(np.abs(x64) ** p, axis=-1) ** (2 / p)
    np.testing.assert_allclose(np.asarray(cs.lp_sq_norm(x, p)), expected, rtol=2e-6)


def test_lp_sq_norm_takes_where_as_a_keyword_only():
  x = np.array([[3.0, 4.0], [np.inf, 1.0]], np.float32)
  where = np.array([True, False])
  np.testing.assert_allclose(mr2_jax.lp_sq_norm(x, 5.0, where=where)[0],
                             mr2_jax.lp_sq_norm(x[:1], 5.0)[0])
  with pytest.raises(TypeError, match="positional argument"):
    mr2_jax.lp_sq_norm(x, 5.0, where)  # pyright: ignore[reportCallIssue]
