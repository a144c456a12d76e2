"""mr2_jax.representation_margin against the float64 NumPy reference written from the MR2 spec."""

import pathlib
from unittest import mock

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

import mr2_jax
from mr2_jax import representation_margin_forms as rm_forms
from mr2_reweight_core import class_order
from tests import cases
from tests.reference import numpy_mr2 as ref

RTOL = 1e-5


class RepresentationMarginTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  @parameterized.named_parameters(*[(c[0], *c[1:]) for c in cases.CASES])
  def test_matches_reference(self, batch, num_classes, dim, pattern):
    features, labels, _ = cases.make_case(0, batch, num_classes, dim, pattern)
    for s_bar, tau in ((0.0, 1.0), (2.5, 1.0), (1.0, 10.0 * dim)):
      out = self.variant(lambda f, y: mr2_jax.representation_margin_loss(
          f, y, s_bar, temperature=tau, num_classes=num_classes))(features, labels)
      expected = ref.representation_margin_loss(features, labels, s_bar, tau)
      np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_where_masks_anchors_and_positives(self):
    features, labels, _ = cases.make_case(1, 16, 3, 4, "random")
    where = np.arange(16) % 4 != 0
    features[~where] = 1e6
    out = self.variant(lambda f, y, w: mr2_jax.representation_margin_loss(f, y, 1.0, where=w))(
        features, labels, where)
    np.testing.assert_allclose(
        out, ref.representation_margin_loss(features, labels, 1.0, 1.0, where=where),
        rtol=RTOL, atol=1e-6)

  def test_gradient_matches_reference_finite_differences(self):
    features, labels, _ = cases.make_case(2, 8, 2, 3, "random")
    grad = jax.grad(lambda f: jnp.sum(mr2_jax.representation_margin_loss(f, labels, 0.7)))(features)
    f64, eps = features.astype(np.float64), 1e-6
    numeric = np.zeros_like(f64)
    for idx in np.ndindex(*f64.shape):
      up, down = f64.copy(), f64.copy()
      up[idx] += eps
      down[idx] -= eps
      numeric[idx] = (ref.representation_margin_loss(up, labels, 0.7).sum()
                      - ref.representation_margin_loss(down, labels, 0.7).sum()) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=1e-4)

  def test_near_duplicate_pair_under_a_scaled_cotangent(self):
    # Found by the slow property run (mr2[released], K = 1, d = 1, features ~1e-4; the dense form):
    # rows 6 and 23 differ by 1.7e-8, so their Gram-form squared distance rounds to 0. With the pair
    # weight zeroed where that rounded value was ≤ 0, XLA's recomputed copies of the weights
    # disagreed under a cotangent ≠ 1 and row 23's gradient was 1.5 % off. Against the float64
    # analytic gradient.
    path = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "near_duplicate_features.npy"
    features = np.load(path)
    labels = jnp.zeros(64, jnp.int32)
    s_bar, tau = 9.947287438194508e-09, 10.0
    weights = jnp.full((64,), 0.1, jnp.float32)
    grad = jax.jit(jax.grad(lambda f: jnp.sum(weights * mr2_jax.representation_margin_loss(
        f, labels, s_bar, temperature=tau))))(features)
    phi = features.astype(np.float64)
    x = np.where(~np.eye(64, dtype=bool), ((phi - phi.T) ** 2 - 2 * s_bar) / tau, -np.inf)
    shift = np.maximum(np.max(x, axis=1), 0.0)
    e = np.exp(x - shift[:, None])
    coupling = 0.1 * e / (np.exp(-shift) + np.sum(e, axis=1))[:, None]
    coupling = coupling + coupling.T
    expected = (2 / tau) * (np.sum(coupling, axis=1)[:, None] * phi - coupling @ phi)
    np.testing.assert_allclose(grad, expected, rtol=0, atol=1e-5 * np.max(np.abs(expected)))

  def test_anchor_without_positive_is_zero(self):
    features = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    out = mr2_jax.representation_margin_loss(features, np.array([0, 1, 2, 3]), 0.0)
    np.testing.assert_array_equal(out, np.zeros(4, np.float32))

  def test_finite_value_and_gradient_for_norm_1e3(self):
    rng = np.random.default_rng(3)
    features = rng.normal(size=(12, 16))
    features = (1e3 * features / np.linalg.norm(features, axis=1, keepdims=True)).astype(np.float32)
    labels = np.array([0, 1, 2] * 4)
    loss_fn = lambda f: jnp.mean(mr2_jax.representation_margin_loss(f, labels, 0.0, temperature=1.0))
    value, grad = jax.value_and_grad(loss_fn)(features)
    chex.assert_tree_all_finite((value, grad))
    expected = ref.representation_margin_loss(features, labels, 0.0, 1.0).mean()
    np.testing.assert_allclose(value, expected, rtol=1e-5)

  @parameterized.parameters(False, True)
  def test_distances_round_alike_in_every_fusion_for_one_wide_features(self, tiled):
    """The slow property run's batch (d = 1, features ~10⁴, τ = 1, s̄ ≈ 7.6·10⁷): under jit the
    outer product became an element-wise multiply fused into both the log-sum-exp's max and its
    exponentials, the copies rounded ~10² apart and two anchors' ℓ_s̄ overflowed to inf."""
    from mr2_jax import representation_margin as rm
    labels = np.array([1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1],
                      np.int32)
    features = np.array([
        -12187.9375, 609.7011, 7610.407, -7949.591, -6542.4546, -4336.335, 905.8149, -2256.4272,
        4838.1294, -22686.838, 5043.056, 15660.705, 10015.065, -7451.6255, -13235.41, 4484.025,
        9506.401, 7920.167, 3054.8557, -6522.378, -9881.235, 2157.41, -3531.4324, -22979.797],
        np.float32)[:, None]
    order = [18, 4, 21, 10, 11, 2, 22, 6, 23, 3, 20, 8, 0, 16, 12, 19, 13, 7, 5, 17, 14, 9, 1, 15]
    labels, features = labels[order], features[order]  # the permuted batch that failed
    s_bar = np.float32(75972432.0)
    with mock.patch.object(rm_forms, "TILED_MIN_WORK", 0 if tiled else rm.TILED_MIN_WORK):
      out = jax.jit(lambda f, y, s: mr2_jax.representation_margin_loss(f, y, s, num_classes=2))(
          features, labels, s_bar)
    expected = ref.representation_margin_loss(features, labels, s_bar, 1.0)
    assert np.all(np.isfinite(out)), out
    # float32 distances of ~10⁹ carry ~10² of rounding, τ = 1: compare relative to the value
    np.testing.assert_allclose(out, expected, rtol=1e-6)

  def test_s_bar_is_mean_over_seen(self):
    stats = mr2_jax.ClassStats(sq_mean_norm=jnp.zeros(4), mean_sq_deviation=jnp.array([1., 2., 9., 3.]),
                               seen=jnp.array([True, True, False, True]))
    np.testing.assert_allclose(mr2_jax.mean_class_deviation(stats), 2.0)
    self.assertEqual(float(mr2_jax.mean_class_deviation(mr2_jax.init_class_stats(3))), 0.0)

  def test_out_of_range_label_under_jit_is_nan(self):
    features = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    out = jax.jit(lambda f, y: mr2_jax.representation_margin_loss(f, y, 0.0, num_classes=3))(
        features, np.array([0, 0, 1, 5]))
    self.assertTrue(np.isnan(out[3]))
    self.assertTrue(np.all(np.isfinite(out[:3])))

  def test_bad_input(self):
    with self.assertRaisesRegex(TypeError, "features: expected a floating"):
      mr2_jax.representation_margin_loss(jnp.zeros((2, 3), int), jnp.array([0, 1]), 0.0)
    with self.assertRaisesRegex(ValueError, "features: leading dimension"):
      mr2_jax.representation_margin_loss(jnp.zeros((3, 3)), jnp.array([0, 1]), 0.0)
    with self.assertRaisesRegex(ValueError, "labels"):
      mr2_jax.representation_margin_loss(jnp.zeros((2, 3)), jnp.array([0, 5]), 0.0, num_classes=3)
    with self.assertRaisesRegex(ValueError, "s_bar: expected a scalar"):
      mr2_jax.representation_margin_loss(jnp.zeros((2, 3)), jnp.array([0, 1]), jnp.ones(2))
    with self.assertRaisesRegex(ValueError, "temperature"):
      mr2_jax.representation_margin_loss(jnp.zeros((2, 3)), jnp.array([0, 1]), 0.0, temperature=0.)


def _labels_with_counts(counts, seed=0):
  labels = np.repeat(np.arange(len(counts)), counts)
  return np.random.default_rng(seed).permutation(labels).astype(np.int32)


class TiledTest(chex.TestCase):
  """The class-sorted tiled form (batch ≥ 32) at every switch boundary, against the reference.

  With a local batch of 64 the candidates are the band of 4 shifts and tiles of 8 and 16: a largest
  class of 5 rows uses the band (5 − 1 ≤ 4), 6 rows T = 8, 9 rows T = 8 (9 − 1 ≤ 8), 10 rows T = 16, 17 rows T = 16, 18 rows the dense form. A tile one too small would
  miss partners that lie two tiles apart and change the value (checked: choosing the tile with
  `count − 2` instead of `count − 1` fails these cases). The work threshold below which the dense
  form is always used is lowered to 0 here, so that these small cases take the tiled form.
  """

  def setUp(self):
    super().setUp()
    from mr2_jax import representation_margin as rm
    self.enter_context(mock.patch.object(rm_forms, "TILED_MIN_WORK", 0))

  # jit only (suite time): the eager path runs the same compiled switch branch by branch.
  @chex.variants(with_jit=True)
  @parameterized.named_parameters(
      # Classes are sorted in label order; the leading class of 7 (15) rows makes the next class start
      # at the last row of a tile, so its partners span the most tiles.
      ("band4_exact", (3,) + (5,) * 12 + (1,)),
      ("tile8_just_over_4", (3,) + (6,) * 10 + (1,)),
      ("tile8_exact", (7, 9, 9, 9, 9, 9, 9, 3)),
      ("tile16_just_over_8", (7, 10, 10, 10, 10, 10, 7)),
      ("tile16_exact", (15, 17, 17, 15)),
      ("dense_just_over_16", (15, 18, 18, 13)),
      ("singletons_and_pairs", (2,) * 20 + (1,) * 24),
      ("mostly_singletons", (2,) * 6 + (1,) * 52),  # 12 rows with a positive: the first 16 read
      ("one_class", (64,)),
  )
  def test_matches_reference(self, counts):
    labels = _labels_with_counts(counts)
    rng = np.random.default_rng(1)
    features = (rng.normal(size=(64, 6)) + 3 * rng.normal(size=(len(counts), 6))[labels])
    features = features.astype(np.float32)
    for s_bar, tau in ((0.0, 1.0), (2.5, 1.0), (1.0, 60.0)):  # s̄ traced: one compile per τ
      out = self.variant(lambda f, y, s, tau=tau: mr2_jax.representation_margin_loss(
          f, y, s, temperature=tau, num_classes=len(counts)))(features, labels, np.float32(s_bar))
      expected = ref.representation_margin_loss(features, labels, s_bar, tau)
      np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_masked_rows_with_huge_norms(self):
    labels = _labels_with_counts((9, 9, 9, 9, 9, 9, 9, 1), seed=2)
    rng = np.random.default_rng(2)
    features = rng.normal(size=(64, 5)).astype(np.float32)
    where = np.arange(64) % 5 != 0
    features[~where] = 1e6
    out = self.variant(lambda f, y, w: mr2_jax.representation_margin_loss(
        f, y, 1.0, where=w, num_classes=8))(features, labels, where)
    np.testing.assert_allclose(
        out, ref.representation_margin_loss(features, labels, 1.0, 1.0, where=where),
        rtol=RTOL, atol=1e-6)

  def test_gradient_equals_dense_form(self):
    # Same value and gradient from the tiled (T = 8) and the dense branch of the same batch.
    from mr2_jax import representation_margin as rm
    labels = jnp.asarray(_labels_with_counts((9, 9, 9, 9, 9, 9, 9, 1), seed=3))
    features = jnp.asarray(np.random.default_rng(3).normal(size=(64, 7)), jnp.float32)
    classes, largest = class_order.class_order(labels, jnp.ones(64, bool))
    self.assertEqual(int(largest), 9)
    self.assertEqual(int(classes.active), 63)  # the class of 1 has no positive
    self._assert_branches_agree(features, classes, [rm._Branch(64, 8, 1.0),
                                                    rm._Branch(64, None, 1.0)])

  def _assert_branches_agree(self, features, classes, branches):
    """Value and gradient of each branch (`_Band` or `_Branch`) alone, with its hand-written
    backward pass, equal those of the last one."""
    from mr2_jax import representation_margin as rm
    args = (class_order.padded(classes, max(b.rows for b in branches)), jnp.float32(0.5),
            classes.inverse)

    def loss(branch, f):
      out = rm._switch((branch,), jnp.int32(0), f, *args)
      return jnp.sum(out ** 2)

    value_and_grad = (jax.jit(loss, static_argnums=0),
                      jax.jit(jax.grad(loss, argnums=1), static_argnums=0))
    for f in value_and_grad:
      expected = np.asarray(f(branches[-1], features))
      self.assertGreater(float(np.max(np.abs(expected))), 0.0)
      for branch in branches[:-1]:
        # float32 sums in another order: the error scales with the largest terms (gradients here
        # reach ~2e3, so an entry of ~5 can be off by ~1e-4 in float32), not with each entry.
        np.testing.assert_allclose(f(branch, features), expected, rtol=2e-5,
                                   atol=1e-6 * np.max(np.abs(expected)), err_msg=str(branch))

  def test_rows_without_a_positive_are_skipped(self):
    # 6 pairs and a class of 3 among 49 singletons (K ≫ B): the 15 rows with a positive sort first
    # and the cheapest exact branch reads only the first 16 sorted rows (the band of 4 shifts); it
    # equals the longer bands, the tiles (of 8, and of 4 as before the band) and the dense branch
    # in value and gradient, and the reference.
    from mr2_jax import representation_margin as rm
    counts = (2,) * 6 + (3,) + (1,) * 49
    labels = jnp.asarray(_labels_with_counts(counts, seed=7))
    rng = np.random.default_rng(7)
    features = jnp.asarray(rng.normal(size=(64, 6)) + 3 * rng.normal(size=(len(counts), 6))[
        np.asarray(labels)], jnp.float32)
    classes, largest = class_order.class_order(labels, jnp.ones(64, bool))
    self.assertEqual((int(classes.active), int(largest)), (15, 3))
    np.testing.assert_array_equal(np.asarray(classes.key)[15:], class_order.MASKED)
    branches = rm._branches(64, 64, 6, 1.0)
    band, tile = rm._Band, rm._Branch
    self.assertEqual(branches, (band(8, 4, 8, 1.0), band(16, 4, 16, 1.0), band(32, 4, 32, 1.0),
                                tile(32, 8, 1.0), band(64, 4, 64, 1.0), tile(64, 8, 1.0),
                                tile(64, 16, 1.0), tile(64, None, 1.0)))
    pairs = class_order.pair_count(classes)
    self.assertEqual(int(pairs), 6 + 3)  # 6 pairs and a class of 3
    self.assertEqual(int(rm._choose(branches, classes.active, largest, pairs)), 1)
    self._assert_branches_agree(features, classes, [
        band(16, 4, 16, 1.0), band(32, 4, 32, 1.0), tile(32, 8, 1.0), band(64, 4, 64, 1.0),
        band(16, 4, 9, 1.0), tile(16, 4, 1.0), tile(64, None, 1.0)])
    # A band one shift short of the largest class (3 rows: partners 2 apart), or whose pair list is
    # one entry short, misses pairs.
    for short in (band(16, 1, 16, 1.0), band(16, 4, 8, 1.0)):
      with self.assertRaises(AssertionError):
        self._assert_branches_agree(features, classes, [short, tile(64, None, 1.0)])
    out = jax.jit(lambda f, y: mr2_jax.representation_margin_loss(
        f, y, 0.5, num_classes=len(counts)))(features, labels)
    np.testing.assert_allclose(
        out, ref.representation_margin_loss(np.asarray(features), np.asarray(labels), 0.5, 1.0),
        rtol=RTOL, atol=1e-6)
    # One row more with a positive than the bucket holds: the next bucket.
    self.assertEqual(int(rm._choose(branches, jnp.int32(17), largest, pairs)), 2)
    # More pairs than the 16-row band's list holds: the next band.
    self.assertEqual(int(rm._choose(branches, classes.active, largest, jnp.int32(17))), 2)
    # A class of 6 rows: past the band, the tile of 8.
    self.assertEqual(int(rm._choose(branches, classes.active, jnp.int32(6), pairs)), 3)
    # A class too large for any tile: the dense form.
    self.assertEqual(int(rm._choose(branches, classes.active, jnp.int32(18), pairs)),
                     len(branches) - 1)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("tile8", (7, 9, 9, 9, 9, 9, 9, 3), False, 8),
      ("tile16", (7, 13, 13, 13, 13, 5), False, 16),
      ("dense_past_the_tiles", (10, 27, 27), False, None),
      ("dense_small_work", (7, 13, 13, 13, 13, 5), True, None),
      ("band4_first_rows", (2,) * 5 + (3,) * 2 + (1,) * 48, False, "band"),  # singletons skipped
  )
  def test_hand_written_gradient_matches_float64_analytic_gradient(self, counts, small_work, tile):
    # Each branch's hand-written VJP against the gradient written from the spec's formula in
    # float64: with P_ij = e^{x_ij} / (1 + Σ_k e^{x_ik}), x_ij = (‖φ_i − φ_j‖² − 2 s̄)/τ over positives,
    # ∂(Σ_i w_i ℓ_i)/∂φ_i = (2/τ) Σ_j (w_i P_ij + w_j P_ji)(φ_i − φ_j). Features share a common offset
    # of 1e4 (reference-row centring keeps the Gram form exact) and a fifth of the rows are masked.
    from mr2_jax import representation_margin as rm
    if small_work:  # the dense form below TILED_MIN_WORK (the setUp lowered it to 0)
      self.enter_context(mock.patch.object(rm_forms, "TILED_MIN_WORK", 1 << 40))
    labels = _labels_with_counts(counts, seed=6)
    num_classes = len(counts)
    rng = np.random.default_rng(6)
    features = (1e4 + rng.normal(size=(64, 5))
                + rng.normal(size=(num_classes, 5))[labels]).astype(np.float32)
    where = np.arange(64) % 5 != 2
    largest = np.max(np.bincount(labels[where]))
    self.assertEqual(tile, None if largest - 1 > 16 or small_work else
                     "band" if largest - 1 <= 4 else 8 if largest - 1 <= 8 else 16)  # the branch meant
    weights = rng.uniform(0.5, 2.0, size=64)
    s_bar, tau = 1.5, 3.0
    grad = self.variant(jax.grad(lambda f: jnp.sum(jnp.asarray(weights, jnp.float32)
                                                  * mr2_jax.representation_margin_loss(
                                                      f, labels, s_bar, temperature=tau,
                                                      where=where,
                                                      num_classes=num_classes))))(features)
    phi = features.astype(np.float64)
    positive = ((labels[:, None] == labels[None, :]) & where[:, None] & where[None, :]
                & ~np.eye(64, dtype=bool))
    sq = np.sum((phi[:, None] - phi[None]) ** 2, axis=-1)
    x = np.where(positive, (sq - 2 * s_bar) / tau, -np.inf)
    shift = np.maximum(np.max(x, axis=1), 0.0)
    e = np.exp(x - shift[:, None])
    prob = e / (np.exp(-shift) + np.sum(e, axis=1))[:, None]
    coupling = weights[:, None] * prob + (weights[:, None] * prob).T
    expected = (2 / tau) * (np.sum(coupling, axis=1)[:, None] * phi - coupling @ phi)
    # φ is stored in float32 at 1e4 (ulp ≈ 1e-3): differences are exact, the error is the sums'.
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5 * np.max(np.abs(expected)))
    self.assertGreater(float(np.max(np.abs(expected))), 1e-2)
    np.testing.assert_array_equal(np.asarray(grad)[~where], 0.0)

  def test_class_order(self):
    from mr2_jax import representation_margin as rm
    labels = jnp.asarray([3, 1, 3, 0, 3, 1, 2], jnp.int32)
    valid = jnp.asarray([True, True, True, True, False, True, True])
    classes, largest = class_order.class_order(labels, valid)
    order = np.asarray(classes.order)
    # Stable; the rows with a positive first (classes 1 and 3), then the singletons of classes 0 and
    # 2 and the masked row, which match nothing.
    np.testing.assert_array_equal(order, [1, 5, 0, 2, 3, 6, 4])
    np.testing.assert_array_equal(np.asarray(classes.inverse)[order], np.arange(7))
    masked = class_order.MASKED
    np.testing.assert_array_equal(classes.key, [1, 1, 3, 3, masked, masked, masked])
    np.testing.assert_array_equal(classes.first, [0, 0, 2, 2, 4, 4, 4])
    self.assertEqual(int(classes.active), 4)
    self.assertEqual(int(largest), 2)  # the masked row of class 3 does not count

  def test_pmap_global_batch_equals_reference(self):
    # 8 devices × 32 rows: each device uses the tiled form (T = 4) on the gathered global batch.
    labels = _labels_with_counts((5,) * 48 + (2,) * 8, seed=4)  # 256 rows, largest class 5
    features = np.random.default_rng(4).normal(size=(256, 4)).astype(np.float32)
    out = jax.pmap(lambda f, y: mr2_jax.representation_margin_loss(
        f, y, 0.3, axis_name="i", num_classes=56), axis_name="i")(
            features.reshape(8, 32, 4), labels.reshape(8, 32))
    np.testing.assert_allclose(np.asarray(out).reshape(-1),
                               ref.representation_margin_loss(features, labels, 0.3, 1.0),
                               rtol=RTOL, atol=1e-6)

  def test_shard_map_value_and_gradient_equal_single_device(self):
    # jit(shard_map) over 8 devices (the multi-host path): tiled per device, and the gradient that
    # each device takes of its own anchors' losses, carried back through the all-gather to the rows'
    # owners, equals the single-device gradient of the global batch.
    from jax.sharding import PartitionSpec as P
    labels = jnp.asarray(_labels_with_counts((5,) * 48 + (2,) * 8, seed=5))
    features = jnp.asarray(np.random.default_rng(5).normal(size=(256, 4)), jnp.float32)
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

    def objective(f, y, axis_name=None):
      loss = mr2_jax.representation_margin_loss(f, y, 0.3, axis_name=axis_name, num_classes=56)
      return jnp.sum(loss ** 2)

    def local(f, y):
      value, grad = jax.value_and_grad(objective)(f, y, "i")
      return jax.lax.psum(value, "i"), grad

    sharded = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P("i")),
                                    out_specs=(P(), P("i")), check_vma=False))
    value, grad = sharded(features, labels)
    expected_value, expected_grad = jax.jit(jax.value_and_grad(objective))(features, labels)
    # float32: the gradient spans 1e-2 … 5e2 with cancellations, so entries agree to float32
    # accumulation error relative to the largest one (not per entry: another CPU's kernels differ).
    np.testing.assert_allclose(value, expected_value, rtol=1e-5)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-4,
                               atol=1e-6 * float(jnp.max(jnp.abs(expected_grad))))
    self.assertGreater(float(jnp.max(jnp.abs(grad))), 1e-3)
    # float64: the same algebra, equal to rounding.
    with jax.enable_x64(True):
      features64 = jnp.asarray(np.random.default_rng(5).normal(size=(256, 4)), jnp.float64)
      value, grad = sharded(features64, labels)
      expected_value, expected_grad = jax.jit(jax.value_and_grad(objective))(features64, labels)
      self.assertEqual(grad.dtype, jnp.float64)
      np.testing.assert_allclose(value, expected_value, rtol=1e-12)
      np.testing.assert_allclose(grad, expected_grad, rtol=1e-9,
                                 atol=1e-12 * float(jnp.max(jnp.abs(expected_grad))))


def test_an_empty_global_batch_gives_an_empty_result_eagerly_and_under_jit():
  """B = 0 (an evaluation pass's last, empty shard): no anchor and no pair, so the per-anchor
  losses are an empty float32 [0] and their gradient is empty too (it used to fail on a max over
  zero pairs)."""
  features, labels = jnp.zeros((0, 4), jnp.bfloat16), jnp.zeros((0,), jnp.int32)
  for fn in (mr2_jax.representation_margin_loss, jax.jit(mr2_jax.representation_margin_loss)):
    out = fn(features, labels, 0.5)
    chex.assert_shape(out, (0,))
    chex.assert_type(out, jnp.float32)
  grad = jax.grad(lambda f: jnp.sum(mr2_jax.representation_margin_loss(f, labels, 0.5)))(
      features.astype(jnp.float32))
  chex.assert_shape(grad, (0, 4))


@pytest.mark.parametrize("counts", [(24,), (5, 7, 2, 2, 1, 1), (9, 9, 6)])
def test_batch_order_dense_form_equals_the_class_sorted_dense_form(counts):
  """Below `TILED_MIN_WORK` on one device ℓ_s̄ is taken in batch order (no sort); its value and its
  one-product gradient equal the class-sorted dense branch's, padding and singletons included."""
  from mr2_jax import representation_margin as rm
  from mr2_jax.representation_margin_dense import dense_batch_order
  labels = jnp.asarray(_labels_with_counts(counts, seed=5))
  rows = labels.shape[0]
  features = jnp.asarray(np.random.default_rng(5).normal(size=(rows, 6)) * 3 + 40, jnp.float32)
  valid = jnp.arange(rows) % 7 != 3 if counts == (9, 9, 6) else jnp.ones(rows, bool)
  classes, _ = class_order.class_order(labels, valid)

  def sorted_dense(f):
    return rm._switch((rm._Branch(rows, None, 2.0),), jnp.int32(0), f, classes, jnp.float32(0.7),
                      classes.inverse)

  def batch_order(f):
    return dense_batch_order(f, labels, valid, jnp.float32(0.7), 2.0)

  weight = jnp.linspace(0.5, 1.5, rows)
  for fn in (lambda form: jax.jit(form), lambda form: jax.jit(jax.grad(
      lambda f: jnp.sum(weight * form(f) ** 2)))):
    expected = np.asarray(fn(sorted_dense)(features))
    assert np.max(np.abs(expected)) > 0
    np.testing.assert_allclose(fn(batch_order)(features), expected, rtol=2e-5,
                               atol=1e-6 * np.max(np.abs(expected)))


def test_representation_margin_loss_takes_the_batch_order_form_below_the_work_threshold():
  """The dense form alone, on one device, runs in batch order: no sort in the compiled step."""
  labels = jnp.asarray(_labels_with_counts((10, 10, 12), seed=1))
  features = jnp.asarray(np.random.default_rng(1).normal(size=(32, 8)), jnp.float32)

  def step(f, y):  # labels as an argument: closed over, XLA would fold their sort away
    return jax.grad(lambda x: jnp.sum(mr2_jax.representation_margin_loss(x, y, 0.5)))(f)

  assert " sort(" not in jax.jit(step).lower(features, labels).compile().as_text()
  with mock.patch.object(rm_forms, "TILED_MIN_WORK", 0):  # a new function: traced again
    assert " sort(" in jax.jit(lambda f, y: step(f, y)).lower(features, labels).compile().as_text()
