"""mr2_jax.mr2_loss: the whole objective against the NumPy reference, and data-parallel exactness."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

import mr2_jax
from tests import cases
from tests.covering import covering
from tests.reference import numpy_mr2 as ref

RTOL = 1e-5
NUM_DEVICES = 8


class Mr2LossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  @parameterized.named_parameters(*[(c[0], *c[1:]) for c in cases.CASES])
  def test_matches_reference(self, batch, num_classes, dim, pattern):
    features, labels, logits = cases.make_case(0, batch, num_classes, dim, pattern)
    a, v, seen = cases.random_stats(np.random.default_rng(1), num_classes)
    for form, reference in (("paper", ref.mr2_objective_paper),
                            ("released", ref.mr2_objective_released)):
      loss, stats, aux = self.variant(
          lambda z, f, y, s: mr2_jax.mr2_loss(z, f, y, s, lam=0.3, decay=0.7, form=form))(
              logits, features, labels, cases.class_stats(a, v, seen))
      r_loss, r_a, r_v, r_seen, r_gamma, r_sbar = reference(
          logits, features, labels, a, v, seen, lam=0.3, decay=0.7)
      np.testing.assert_allclose(loss, r_loss, rtol=RTOL)
      np.testing.assert_allclose(stats.sq_mean_norm, r_a, rtol=RTOL, atol=1e-6)
      np.testing.assert_allclose(stats.mean_sq_deviation, r_v, rtol=RTOL, atol=1e-6)
      np.testing.assert_array_equal(stats.seen, r_seen)
      np.testing.assert_allclose(aux.gamma, r_gamma, rtol=RTOL)
      np.testing.assert_allclose(aux.s_bar, r_sbar, rtol=RTOL)
      np.testing.assert_allclose(aux.margin_ce + 0.3 * aux.representation_margin, r_loss,
                                 rtol=RTOL)

  @chex.variants(with_jit=True, without_jit=True)
  def test_per_example_terms_match_reference(self):
    features, labels, logits = cases.make_case(4, 16, 6, 5, "absent")
    a, v, seen = cases.random_stats(np.random.default_rng(2), 6)
    margin_ce, rep, stats, aux = self.variant(lambda z, f, y, s: mr2_jax.mr2_terms(
        z, f, y, s, decay=0.8, temperature=3.0))(logits, features, labels,
                                                 cases.class_stats(a, v, seen))
    a_ref, v_ref, seen_ref = ref.update_class_stats(a, v, seen, features, labels, 0.8, 2.0)
    gamma_ref = ref.class_margins(a_ref, v_ref, seen_ref)
    np.testing.assert_allclose(aux.gamma, gamma_ref, rtol=RTOL)
    np.testing.assert_allclose(margin_ce, ref.margin_cross_entropy(logits, labels, gamma_ref),
                               rtol=RTOL)
    np.testing.assert_allclose(
        rep, ref.representation_margin_loss(features, labels, ref.s_bar(v_ref, seen_ref), 3.0),
        rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(stats.mean_sq_deviation, v_ref, rtol=RTOL, atol=1e-6)

  def test_lambda_zero_equal_stats_is_plain_cross_entropy(self):
    # One class, so every seen class has the same statistics: γ ≡ 1 and the loss is exactly CE.
    features, labels, logits = cases.make_case(1, 12, 5, 4, "one_class")
    loss, _, aux = mr2_jax.mr2_loss(logits, features, labels, mr2_jax.init_class_stats(5), lam=0.0)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1)[:, 0]
    np.testing.assert_array_equal(aux.gamma, np.ones(5, np.float32))
    np.testing.assert_allclose(loss, jnp.mean(ce), rtol=1e-7)

  def test_uniform_margin_ablation_uses_c_bar(self):
    features, labels, logits = cases.make_case(3, 12, 4, 3, "random")
    stats = mr2_jax.init_class_stats(4)
    loss, _, aux = mr2_jax.mr2_loss(logits, features, labels, stats, c_bar=2.0, uniform_margin=True)
    np.testing.assert_array_equal(aux.gamma, np.full(4, 2.0, np.float32))
    ce = ref.margin_cross_entropy(logits, labels, np.full(4, 2.0)).mean()
    rep = ref.representation_margin_loss(features, labels, float(aux.s_bar), 1.0).mean()
    np.testing.assert_allclose(loss, ce + 0.1 * rep, rtol=RTOL)

  def test_bad_input(self):
    features, labels, logits = cases.make_case(2, 6, 3, 4, "random")
    stats = mr2_jax.init_class_stats(3)
    with self.assertRaisesRegex(ValueError, "form"):
      mr2_jax.mr2_loss(logits, features, labels, stats, form="nope")
    with self.assertRaisesRegex(ValueError, "stats: has 4 classes"):
      mr2_jax.mr2_loss(logits, features, labels, mr2_jax.init_class_stats(4))
    with self.assertRaisesRegex(ValueError, "labels"):
      mr2_jax.mr2_loss(logits, features, np.array([0, 1, 2, 3, 0, 1]), stats)
    with self.assertRaisesRegex(ValueError, "features: leading dimension"):
      mr2_jax.mr2_loss(logits, features[:5], labels, stats)
    with self.assertRaisesRegex(TypeError, "features: expected a floating"):
      mr2_jax.mr2_loss(logits, features.astype(np.int32), labels, stats)
    with self.assertRaisesRegex(ValueError, "decay"):
      mr2_jax.mr2_loss(logits, features, labels, stats, decay=1.0)
    with self.assertRaisesRegex(ValueError, "p: expected a norm order"):
      mr2_jax.mr2_loss(logits, features, labels, stats, p=0.0)
    with self.assertRaisesRegex(ValueError, "lam"):
      mr2_jax.mr2_loss(logits, features, labels, stats, lam=-0.1)

  def test_padding_rows_send_no_nan_gradient(self):
    features, labels, logits = cases.make_case(5, 8, 3, 4, "random")
    logits[-1], features[-1] = np.inf, np.nan
    where = np.arange(8) < 7
    grads = jax.grad(lambda z, f: mr2_jax.mr2_loss(z, f, labels, mr2_jax.init_class_stats(3),
                                                   where=where)[0], argnums=(0, 1))(logits, features)
    chex.assert_tree_all_finite(grads)
    np.testing.assert_array_equal(grads[0][-1], np.zeros(3))
    np.testing.assert_array_equal(grads[1][-1], np.zeros(4))

  def test_out_of_range_label_under_jit_gives_nan_loss(self):
    features, labels, logits = cases.make_case(2, 6, 3, 4, "random")
    labels[2] = 3
    loss, _, _ = jax.jit(mr2_jax.mr2_loss)(logits, features, labels, mr2_jax.init_class_stats(3))
    self.assertTrue(np.isnan(loss))


def _model(params, x):
  features = jnp.tanh(x @ params["encoder"])
  return features @ params["head"], features


class DataParallelTest(parameterized.TestCase):
  """pmap over 8 fake CPU devices equals one device on the concatenated batch."""

  @parameterized.named_parameters(
      ("k_le_global_batch_paper", 6, 4, "paper", False),
      ("gamma_only_lambda_zero", 6, 4, "paper", False, 0.0),
      ("k_gt_global_batch_paper", 50, 2, "paper", False),
      ("k_gt_global_batch_released", 50, 2, "released", False),
      ("padding_mask", 6, 4, "paper", True),
  )
  def test_pmap_equals_single_device(self, num_classes, local_batch, form, use_where, lam=0.1):
    self.assertEqual(jax.local_device_count(), NUM_DEVICES)
    rng = np.random.default_rng(0)
    global_batch = NUM_DEVICES * local_batch
    x = rng.normal(size=(global_batch, 5)).astype(np.float32)
    labels = rng.integers(0, min(num_classes, 7), global_batch).astype(np.int32)
    labels[:3] = 0  # make sure some class spans devices
    where = rng.random(global_batch) < 0.7 if use_where else np.ones(global_batch, bool)
    params = {"encoder": rng.normal(size=(5, 3)).astype(np.float32),
              "head": rng.normal(size=(3, num_classes)).astype(np.float32)}
    a, v, seen = cases.random_stats(rng, num_classes)
    stats = cases.class_stats(a, v, seen)

    def loss_fn(params, x, y, w, stats, axis_name):
      logits, features = _model(params, x)
      loss, new_stats, aux = mr2_jax.mr2_loss(logits, features, y, stats, form=form, lam=lam,
                                              axis_name=axis_name, where=w)
      return loss, (new_stats, aux)

    single = jax.jit(jax.value_and_grad(functools.partial(loss_fn, axis_name=None), has_aux=True))
    (loss_1, (stats_1, aux_1)), grad_1 = single(params, x, labels, where, stats)

    @functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0, 0, 0, None))
    def parallel(params, x, y, w, stats):
      (loss, (new_stats, aux)), grad = jax.value_and_grad(
          functools.partial(loss_fn, axis_name="batch"), has_aux=True)(params, x, y, w, stats)
      return jax.lax.pmean(loss, "batch"), new_stats, aux, jax.lax.pmean(grad, "batch")

    shard = lambda t: t.reshape(NUM_DEVICES, local_batch, *t.shape[1:])
    loss_n, stats_n, aux_n, grad_n = parallel(params, shard(x), shard(labels), shard(where), stats)
    # f32 sums in a different order (psum of per-device partial sums): a few ulps.
    tol = dict(rtol=2e-5, atol=1e-6)
    for device in range(NUM_DEVICES):
      take = lambda t: jax.tree.map(lambda leaf: leaf[device], t)
      np.testing.assert_allclose(loss_n[device], loss_1, **tol)
      chex.assert_trees_all_close(take(stats_n), stats_1, **tol)
      chex.assert_trees_all_close(take(aux_n), aux_1, **tol)
      chex.assert_trees_all_close(take(grad_n), grad_1, **tol)


def _slow_run_collapsed_example():
  """The falsifying example that the slow property run of the MR2 registry entry found on
  2026-12-01 (`test_registry_entry_slow[mr2]`: shape B = 24, K = 2, d = 8, float32; 'uniform,
  collapsed classes, offset 3.0, gaussian logits, feature scale 1e+04, logit scale 0.001, seed 4';
  fresh statistics), rebuilt as tests/strategies.batches builds it (same generator calls, same
  order)."""
  rng = np.random.default_rng(4)
  labels = rng.permutation(rng.integers(0, 2, 24).astype(np.int32))
  centres = rng.normal(size=(2, 8))
  features = 1e4 * (3.0 + centres[labels] + 0.0 * rng.normal(size=(24, 8)))  # collapsed: spread 0
  logits = 1e-3 * rng.normal(size=(24, 2))
  return labels, features.astype(np.float32), logits.astype(np.float32)


def _adversarial_batch():
  """24 rows, K = 3, d = 4, at ‖φ‖ ≈ 2.5·10⁵ (one float32 ulp is 2⁻⁷ … 2⁻⁶ there), rows shuffled so
  that every class spans several of 8 devices:
    class 0: 7 identical rows (collapsed; 7·φ does not divide back to φ in float32);
    class 1: 9 rows one ulp apart in some coordinates (near-collapsed: V ≈ 5·10⁻⁵, while the rounded
      class mean alone is off by ~ε·‖φ‖ ≈ 0.03 per row, i.e. ~10⁻³ in ‖φ − m‖²);
    class 2: 8 rows with an ordinary spread (σ = 10).
  """
  rng = np.random.default_rng(11)
  centres = (1e5 + 3e4 * rng.random((3, 4))).astype(np.float32)
  collapsed = np.repeat(centres[:1], 7, axis=0)
  up = np.nextafter(centres[1], np.float32(np.inf))
  near = np.where(rng.random((9, 4)) < 0.5, up, centres[1]).astype(np.float32)
  spread = (centres[2] + 10.0 * rng.normal(size=(8, 4))).astype(np.float32)
  features = np.concatenate([collapsed, near, spread])
  labels = np.repeat(np.arange(3, dtype=np.int32), [7, 9, 8])
  order = rng.permutation(24)
  logits = rng.normal(size=(24, 3)).astype(np.float32)
  return labels[order], features[order], logits


class CollapsedClassesAtLargeScaleTest(parameterized.TestCase):
  """Regression: V of a collapsed or near-collapsed class at large ‖φ‖ (slow property run).

  The class statistics used to centre the rows on the rounded float32 class mean, so V was off by
  ~(ε·‖φ‖)² whatever the class's spread: V = [8.5e-6, 1.9e-4] instead of 0 on the run's example,
  s̄ = 9.8e-5, and ℓ_s̄ = log(1 + Σ_j e^{d_ij − 2 s̄}) moved the loss by λ·2 s̄ (n − 1)/n ≈ 1.8e-5
  (the property bound was 1.3e-5). They now centre on a row of the class: a collapsed class gives V = 0.
  """

  def test_slow_property_run_example(self):
    labels, features, logits = _slow_run_collapsed_example()
    # The log's arrays (printed to 8 digits).
    np.testing.assert_array_equal(labels[:6], [1, 1, 0, 1, 1, 0])
    np.testing.assert_allclose(features[0, :3], [39591.848, 20201.455, 22022.043], rtol=1e-7)
    np.testing.assert_allclose(logits[0], [1.2953340e-03, -6.7639124e-04], rtol=1e-6)
    zeros = np.zeros(2, np.float32)
    stats = cases.class_stats(zeros, zeros, np.zeros(2, bool))
    loss, new_stats, aux = jax.jit(mr2_jax.mr2_loss)(logits, features, labels, stats)
    r_loss, r_a, r_v, _, r_gamma, r_sbar = ref.mr2_objective_paper(
        logits.astype(np.float64), features.astype(np.float64), labels, zeros, zeros,
        np.zeros(2, bool))
    self.assertEqual(r_sbar, 0.0)
    np.testing.assert_array_equal(new_stats.mean_sq_deviation, r_v)  # exactly 0
    self.assertEqual(float(aux.s_bar), 0.0)
    np.testing.assert_allclose(new_stats.sq_mean_norm, r_a, rtol=1e-6)
    np.testing.assert_allclose(aux.gamma, r_gamma, rtol=1e-6)
    # Was 1.79e-5 off (the property test's bound C·ε·S = 1.31e-5); float32 rounding now.
    self.assertLess(abs(float(loss) - r_loss), 1e-6)

  def test_adversarial_batch_single_device(self):
    labels, features, logits = _adversarial_batch()
    a, v, seen = cases.random_stats(np.random.default_rng(3), 3, seen_fraction=0.0)
    r_loss, r_a, r_v, _, r_gamma, r_sbar = ref.mr2_objective_paper(
        logits.astype(np.float64), features.astype(np.float64), labels, a, v, seen, lam=1.0)
    self.assertEqual(r_v[0], 0.0)
    self.assertTrue(0 < r_v[1] < 1e-3)
    loss, new_stats, aux = jax.jit(functools.partial(mr2_jax.mr2_loss, lam=1.0))(
        logits, features, labels, cases.class_stats(a, v, seen))
    self.assertEqual(float(new_stats.mean_sq_deviation[0]), 0.0)
    np.testing.assert_allclose(new_stats.mean_sq_deviation, r_v, rtol=1e-5)
    np.testing.assert_allclose(new_stats.sq_mean_norm, r_a, rtol=1e-6)
    np.testing.assert_allclose(aux.s_bar, r_sbar, rtol=1e-5)
    np.testing.assert_allclose(aux.gamma, r_gamma, rtol=1e-6)
    self.assertLess(abs(float(loss) - r_loss), 1e-5 * abs(r_loss))
    for p in (2.0, 5.0):  # the released form's p = 5 too
      _, r_v_p, _ = ref.batch_class_moments(features, labels, 3, p)
      out = mr2_jax.update_class_stats(mr2_jax.init_class_stats(3), features, labels, p=p)
      self.assertEqual(float(out.mean_sq_deviation[0]), 0.0)
      np.testing.assert_allclose(out.mean_sq_deviation, r_v_p, rtol=1e-5)

  @parameterized.named_parameters(("class_slots", 3), ("compacted_slots_k_gt_global_batch", 50))
  def test_adversarial_batch_eight_devices(self, num_classes):
    """Data parallel: the psum'd statistics (sums and counts over devices, the reference row the
    same on every device) equal one device on the global batch; V of the collapsed class is 0."""
    self.assertEqual(jax.local_device_count(), NUM_DEVICES)
    labels, features, _ = _adversarial_batch()
    stats = mr2_jax.init_class_stats(num_classes)
    single = mr2_jax.update_class_stats(stats, features, labels)
    shard = lambda t: t.reshape(NUM_DEVICES, -1, *t.shape[1:])
    parallel = jax.pmap(lambda s, f, y: mr2_jax.update_class_stats(s, f, y, axis_name="batch"),
                        axis_name="batch", in_axes=(None, 0, 0))(stats, shard(features),
                                                                 shard(labels))
    _, r_v, _ = ref.batch_class_moments(features, labels, num_classes, 2.0)
    for device in range(NUM_DEVICES):
      self.assertEqual(float(parallel.mean_sq_deviation[device, 0]), 0.0)
      np.testing.assert_allclose(parallel.mean_sq_deviation[device], r_v, rtol=1e-5)
      chex.assert_trees_all_close(jax.tree.map(lambda x: x[device], parallel), single,
                                  rtol=1e-5, atol=0.0)


def test_aux_is_a_typed_structure():
  """`mr2_loss` returns an `MR2Aux`, `mr2_terms` an `MR2Margins` (NamedTuples: pytrees with
  documented fields, read by name; indexing is the tuple's)."""
  logits = np.array([[2.0, 0.0, -1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5], [0.0, 2.0, 0.0]],
                    np.float32)
  features = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]], np.float32)
  labels = np.array([0, 0, 1, 1], np.int32)
  _, _, aux = mr2_jax.mr2_loss(logits, features, labels, mr2_jax.init_class_stats(3))
  assert isinstance(aux, mr2_jax.MR2Aux)
  assert aux._fields == ("gamma", "s_bar", "margin_ce", "representation_margin")
  assert aux[1] is aux.s_bar
  *_, margins = mr2_jax.mr2_terms(logits, features, labels, mr2_jax.init_class_stats(3))
  assert isinstance(margins, mr2_jax.MR2Margins)
  np.testing.assert_array_equal(margins.gamma, aux.gamma)
  assert len(jax.tree.leaves(aux)) == 4


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_feature_row_is_left_out_of_both_terms_like_padding(value):
  """One row mask for the statistics and ℓ_s̄: a real row with a non-finite feature is no anchor
  and no positive, so every other row's terms and the statistics equal those with that row as
  padding; its own ℓ_s̄ is NaN, it is counted in `skipped_rows`, and `mr2_loss` is NaN."""
  features, labels, logits = cases.make_case(0, 16, 3, 5, "random")
  stats = mr2_jax.init_class_stats(3)
  bad = features.copy()
  bad[4, 2] = value
  padding = np.arange(16) != 4
  step = jax.jit(lambda f, w: mr2_jax.mr2_terms(logits, f, labels, stats, where=w))
  margin_ce, rep, new_stats, _ = step(bad, None)
  want_ce, want_rep, want_stats, _ = step(features, padding)
  np.testing.assert_array_equal(np.isnan(rep), ~padding)
  np.testing.assert_allclose(rep[padding], want_rep[padding], rtol=1e-6)
  np.testing.assert_allclose(margin_ce[padding], want_ce[padding], rtol=1e-6)
  np.testing.assert_allclose(new_stats.sq_mean_norm, want_stats.sq_mean_norm, rtol=1e-6)
  assert int(new_stats.skipped_rows) == 1 and int(want_stats.skipped_rows) == 0
  loss, _, _ = jax.jit(lambda f: mr2_jax.mr2_loss(logits, f, labels, stats))(bad)
  assert np.isnan(loss)


@pytest.mark.parametrize("value, form", covering(
    (value, form) for form in ("paper", "released") for value in (np.nan, np.inf, -np.inf)))
def test_a_non_finite_logit_makes_the_loss_and_its_gradient_nan(value, form):
  """A real row with a non-finite logit (−inf too, which drops out of an exp-sum): `mr2_loss` is
  NaN, and so is its gradient through the logits (every entry of that row's, hence of every
  parameter that produces them: `optax.apply_if_finite` skips the step), eagerly and under `jit`,
  though the row's features are finite; the same row as padding (`where` False) gives a finite
  loss and a zero gradient on its logits."""
  features, labels, logits = cases.make_case(1, 16, 3, 5, "random")
  stats = mr2_jax.init_class_stats(3)
  bad = np.array(logits, np.float32)
  bad[6, (labels[6] + 1) % 3] = value

  def loss_fn(head, lg, where):  # `head` scales the logits, as a model's last layer would
    return mr2_jax.mr2_loss(lg * head, features, labels, stats, lam=0.5, form=form,
                            where=where)[0]

  def clean_logits_loss_fn(scale, lg, where):
    return mr2_jax.mr2_loss(lg, features * scale, labels, stats, lam=0.5, form=form,
                            where=where)[0]

  padding = np.arange(16) != 6
  for transform in (lambda f: f, jax.jit):
    loss, (d_head, d_logits) = transform(jax.value_and_grad(loss_fn, argnums=(0, 1)))(
        jnp.float32(1.0), bad, None)
    assert np.isnan(loss) and np.isnan(d_head), (value, form)
    assert np.all(np.isnan(d_logits[6])), (value, form)
    loss, (d_scale, d_logits) = transform(jax.value_and_grad(clean_logits_loss_fn,
                                                             argnums=(0, 1)))(
        jnp.float32(1.0), bad, padding)
    assert np.isfinite(loss) and np.isfinite(d_scale), (value, form)
    assert np.all(np.isfinite(d_logits)) and np.all(d_logits[6] == 0), (value, form)
