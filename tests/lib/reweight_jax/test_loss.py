"""Tests for reweight_jax.loss.inverse_reweighted_loss: value, state, gradients, pmap, edge cases."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from jax.experimental import checkify

import mr2_jax
import reweight_jax as rw
from tests.reference import numpy_reweight as ref

RTOL = 1e-5
COUNTS = np.array([900, 300, 120, 40, 12, 5], np.float32)
NUM_CLASSES = 6


def _batch(seed, batch=48, num_classes=NUM_CLASSES, high=None):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes if high is None else high, batch).astype(np.int32)
  losses = rng.uniform(0.1, 3.0, batch).astype(np.float32)
  return labels, losses, rng


def _state(batch_counts, beta=None):
  batch_counts = np.asarray(batch_counts, np.float32)
  beta = np.ones_like(batch_counts) if beta is None else np.asarray(beta, np.float32)
  return rw.ReweightState(jnp.asarray(batch_counts), jnp.asarray(beta))


def _ce(logits, labels):
  return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)[:, 0]


class ValueAndStateTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("reference_defaults", 0.0, "uniform", True, False, None, False),
      ("alpha_inv_freq", 0.7, "inv_freq", True, False, None, False),
      ("no_refresh", 0.2, "inv_sqrt_freq", False, False, None, False),
      ("absent_and_masked", 0.0, "uniform", True, True, 4, False),
      ("stop_gradient", 0.4, "inv_freq", True, True, 5, True),
  )
  def test_matches_reference(self, alpha, kind, refresh, masked, high, stop_gradient):
    labels, losses, rng = _batch(3, high=high)
    where = rng.random(labels.shape[0]) < 0.75 if masked else None
    counts_before = np.array([0, 3, 10, 2, 40, 1], np.float32)
    stale_beta = rng.uniform(0.5, 2.0, NUM_CLASSES).astype(np.float32)
    state = _state(counts_before, stale_beta)
    prior = rw.class_prior(COUNTS, kind)
    fn = self.variant(functools.partial(
        rw.inverse_reweighted_loss, alpha=alpha, prior=prior, gamma=1.0, refresh_macro=refresh,
        stop_gradient=stop_gradient))
    loss, new_state, aux = fn(losses, labels, state, where=where)

    beta = ref.macro_factor(counts_before, 1.0) if refresh else stale_beta
    expected_loss, expected_weights = ref.inverse_reweighted_loss_value(
        losses, labels, NUM_CLASSES, beta, ref.class_prior(COUNTS, kind), alpha=alpha, where=where)
    class_losses, present, _ = ref.batch_class_losses(losses, labels, NUM_CLASSES, where=where)
    np.testing.assert_allclose(loss, expected_loss, rtol=RTOL)
    np.testing.assert_allclose(aux.class_weights, expected_weights, rtol=RTOL)
    np.testing.assert_allclose(aux.class_losses, class_losses, rtol=RTOL)
    np.testing.assert_array_equal(aux.present, present)
    np.testing.assert_allclose(
        aux.inverse_weights,
        ref.inverse_weights(class_losses, present, ref.class_prior(COUNTS, kind), alpha), rtol=RTOL)
    valid = np.ones(labels.shape, bool) if where is None else where
    np.testing.assert_allclose(
        aux.example_weights, np.where(valid, expected_weights[labels], 0), rtol=RTOL)
    np.testing.assert_array_equal(new_state.batch_counts, counts_before + present)
    np.testing.assert_allclose(new_state.beta, beta, rtol=RTOL)
    chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)

  def test_clamp_binds(self):
    labels, losses, _ = _batch(4)
    losses[labels == 0] = 0.01  # w*_0 ≈ L̄ / 0.01 ≫ 10
    state = _state([1, 5000, 5000, 5000, 5000, 5000])
    loss, _, aux = jax.jit(functools.partial(
        rw.inverse_reweighted_loss, alpha=0.0, prior=jnp.ones(6), gamma=2.0))(losses, labels, state)
    expected_loss, expected_weights = ref.inverse_reweighted_loss_value(
        losses, labels, 6, ref.macro_factor([1, 5000, 5000, 5000, 5000, 5000], 2.0), np.ones(6))
    self.assertEqual(float(np.max(aux.class_weights)), 10.0)
    np.testing.assert_allclose(loss, expected_loss, rtol=RTOL)
    np.testing.assert_allclose(aux.class_weights, expected_weights, rtol=RTOL)

  def test_macro_false_uses_unit_beta_but_counts(self):
    labels, losses, _ = _batch(5)
    state = _state([7, 1, 3, 0, 2, 9])
    loss, new_state, _ = jax.jit(functools.partial(
        rw.inverse_reweighted_loss, alpha=0.0, prior=jnp.ones(6), gamma=1.0, macro=False))(
            losses, labels, state)
    expected, _ = ref.inverse_reweighted_loss_value(losses, labels, 6, np.ones(6), np.ones(6))
    np.testing.assert_allclose(loss, expected, rtol=RTOL)
    np.testing.assert_array_equal(new_state.batch_counts, np.array([8, 2, 4, 1, 3, 10]))

  def test_per_epoch_refresh_schedule(self):
    """refresh_macro=(step_in_epoch == 0): epoch e uses β from the batches of epochs < e."""
    num_classes, steps_per_epoch = 5, 3
    step = jax.jit(functools.partial(rw.inverse_reweighted_loss, alpha=0.0,
                                     prior=jnp.ones(num_classes), gamma=1.0))
    state = rw.init_reweight_state(num_classes)
    counts = np.zeros(num_classes)
    rng = np.random.default_rng(6)
    for epoch in range(3):
      epoch_beta = ref.macro_factor(counts, 1.0)
      for step_in_epoch in range(steps_per_epoch):
        labels = rng.integers(0, 2 + epoch, 8).astype(np.int32)  # later classes appear later
        losses = rng.uniform(0.1, 3.0, 8).astype(np.float32)
        loss, state, _ = step(losses, labels, state, refresh_macro=jnp.asarray(step_in_epoch == 0))
        expected, _ = ref.inverse_reweighted_loss_value(losses, labels, num_classes, epoch_beta,
                                                        np.ones(num_classes))
        np.testing.assert_allclose(loss, expected, rtol=RTOL)
        np.testing.assert_allclose(state.beta, epoch_beta, rtol=RTOL)
        counts[np.unique(labels)] += 1
        np.testing.assert_array_equal(state.batch_counts, counts)
    self.assertGreater(np.ptp(np.asarray(state.beta)), 0.1)


class GradientTest(chex.TestCase):
  """Spec, 'Per step': gradient flow gives a per-batch class-balanced mean; stop-gradient does not."""

  def _setup(self, seed=7):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, 40).astype(np.int32)  # class 5 absent
    logits = (2.0 * rng.normal(size=(40, NUM_CLASSES))).astype(np.float32)
    return labels, logits

  @parameterized.parameters(False, True)
  def test_reference_gradient_is_class_balanced_mean(self, with_beta):
    labels, logits = self._setup()
    counts_before = np.array([4, 9, 1, 30, 2, 0], np.float32) if with_beta else np.zeros(6)
    state = _state(counts_before)

    def reweighted(z):
      loss, _, _ = rw.inverse_reweighted_loss(
          _ce(z, labels), labels, state, alpha=0.0, prior=jnp.ones(6), gamma=1.0,
          max_weight=None)
      return loss

    beta = ref.macro_factor(counts_before, 1.0)
    present_counts = np.bincount(labels, minlength=6)
    scale = np.sum(present_counts * beta) / labels.shape[0]   # S / B

    def class_balanced(z):
      ce = _ce(z, labels)
      class_means = jax.ops.segment_sum(ce, labels, 6) / np.maximum(present_counts, 1)
      return scale * jnp.sum(class_means) / np.count_nonzero(present_counts)

    np.testing.assert_allclose(jax.jit(reweighted)(logits), class_balanced(logits), rtol=RTOL)
    chex.assert_trees_all_close(jax.jit(jax.grad(reweighted))(logits),
                                jax.jit(jax.grad(class_balanced))(logits), rtol=RTOL, atol=1e-8)
    # Per-example form: ∂loss/∂ℓ_i = (S/B) / (P·n_{y_i}).
    grad_losses = jax.jit(jax.grad(lambda l: rw.inverse_reweighted_loss(
        l, labels, state, alpha=0.0, prior=jnp.ones(6), gamma=1.0, max_weight=None)[0]))(
            np.asarray(_ce(logits, labels)))
    np.testing.assert_allclose(grad_losses, scale / (5 * present_counts[labels]), rtol=RTOL)

  @parameterized.parameters(0.0, 0.5)
  def test_stop_gradient_is_fixed_weight_gradient(self, alpha):
    labels, logits = self._setup()
    state = _state([4, 9, 1, 30, 2, 0])
    prior = rw.class_prior(COUNTS, "inv_freq")

    def reweighted(z, stop_gradient):
      return rw.inverse_reweighted_loss(
          _ce(z, labels), labels, state, alpha=alpha, prior=prior, gamma=1.0,
          stop_gradient=stop_gradient)

    _, _, aux = jax.jit(reweighted, static_argnums=1)(logits, True)
    fixed_weights = np.asarray(aux.class_weights)[labels]

    def fixed(z):
      return jnp.sum(fixed_weights * _ce(z, labels)) / labels.shape[0]

    stop_grad = jax.jit(jax.grad(lambda z: reweighted(z, True)[0]))(logits)
    chex.assert_trees_all_close(stop_grad, jax.jit(jax.grad(fixed))(logits), rtol=RTOL, atol=1e-8)
    # The two algorithms differ (so that the tests above could fail).
    flow_grad = jax.jit(jax.grad(lambda z: reweighted(z, False)[0]))(logits)
    self.assertGreater(float(jnp.max(jnp.abs(flow_grad - stop_grad))), 1e-3)


class EdgeCaseTest(chex.TestCase):

  def _all_finite(self, losses, labels, num_classes, **kwargs):
    state = _state(np.arange(num_classes) % 3)

    def fn(l):
      return rw.inverse_reweighted_loss(l, labels, state, alpha=0.0, prior=jnp.ones(num_classes),
                                        gamma=1.0, **kwargs)

    (loss, (new_state, aux)), grads = jax.jit(jax.value_and_grad(
        lambda l: (lambda out: (out[0], out[1:]))(fn(l)), has_aux=True))(losses)
    chex.assert_tree_all_finite((loss, new_state, aux, grads))
    return loss, new_state, aux, grads

  @parameterized.parameters(False, True)
  def test_zero_per_class_loss(self, stop_gradient):
    labels = np.array([0, 0, 1, 2, 2, 2], np.int32)
    self._all_finite(np.zeros(6, np.float32), labels, 4, stop_gradient=stop_gradient)
    losses = np.array([0.0, 0.0, 1.0, 0.5, 0.7, 0.2], np.float32)  # class 0 has zero loss
    loss, _, aux, _ = self._all_finite(losses, labels, 4, stop_gradient=stop_gradient)
    expected, weights = ref.inverse_reweighted_loss_value(
        losses, labels, 4, ref.macro_factor(np.arange(4) % 3), np.ones(4))
    np.testing.assert_allclose(loss, expected, rtol=RTOL)
    np.testing.assert_allclose(aux.class_weights, weights, rtol=RTOL, atol=1e-7)

  def test_one_class_only(self):
    labels = np.full(8, 2, np.int32)
    losses = np.linspace(0.2, 1.0, 8).astype(np.float32)
    loss, new_state, _, grads = self._all_finite(losses, labels, 1 + 2, max_weight=None)
    np.testing.assert_array_equal(new_state.batch_counts, [0, 1, 3])
    beta = ref.macro_factor(np.arange(3) % 3)
    np.testing.assert_allclose(loss, beta[2] * losses.astype(np.float64).mean(), rtol=RTOL)
    np.testing.assert_allclose(grads, np.full(8, beta[2] / 8), rtol=RTOL)

  def test_all_absent_but_one_and_everything_masked(self):
    labels = np.array([1, 1, 1, 1], np.int32)
    losses = np.array([0.3, 0.9, 2.0, 0.1], np.float32)
    self._all_finite(losses, labels, 10, where=np.array([False, True, False, False]))
    loss, new_state, _, grads = self._all_finite(losses, labels, 10, where=np.zeros(4, bool))
    self.assertEqual(float(loss), 0.0)
    np.testing.assert_array_equal(grads, np.zeros(4))
    np.testing.assert_array_equal(new_state.batch_counts, np.arange(10) % 3)

  @parameterized.parameters(False, True)
  def test_inaturalist_scale(self, stop_gradient):
    num_classes, batch = 8142, 32
    labels, losses, _ = _batch(8, batch, num_classes)
    labels[:4] = labels[4]  # a repeated class
    loss, new_state, aux, _ = self._all_finite(losses, labels, num_classes,
                                               stop_gradient=stop_gradient)
    counts_before = np.arange(num_classes) % 3
    expected, weights = ref.inverse_reweighted_loss_value(
        losses, labels, num_classes, ref.macro_factor(counts_before), np.ones(num_classes))
    np.testing.assert_allclose(loss, expected, rtol=RTOL)
    np.testing.assert_allclose(aux.class_weights, weights, rtol=RTOL)
    expected_counts = counts_before.astype(np.float32)
    expected_counts[np.unique(labels)] += 1
    np.testing.assert_array_equal(new_state.batch_counts, expected_counts)


class BadInputTest(chex.TestCase):

  def _call(self, losses, labels, state=None, prior=None, **kwargs):
    state = rw.init_reweight_state(4) if state is None else state
    prior = jnp.ones(4) if prior is None else prior
    return rw.inverse_reweighted_loss(losses, labels, state, alpha=0.0, prior=prior, gamma=1.0,
                                      **kwargs)

  def test_errors_name_argument(self):
    losses = np.ones(5, np.float32)
    labels = np.array([0, 1, 2, 3, 1], np.int32)
    with self.assertRaisesRegex(ValueError, "labels"):
      self._call(losses, np.array([0, 1, 2, 4, 1], np.int32))
    with self.assertRaisesRegex(ValueError, "labels"):
      self._call(losses, np.array([0, -1, 2, 3, 1], np.int32))
    with self.assertRaisesRegex(ValueError, "per_example_loss"):
      self._call(losses[:4], labels)
    with self.assertRaisesRegex(ValueError, "per_example_loss"):
      self._call(losses[:, None], labels)
    with self.assertRaisesRegex(ValueError, "prior"):
      self._call(losses, labels, prior=jnp.ones(3))
    with self.assertRaisesRegex(ValueError, "where"):
      self._call(losses, labels, where=np.ones(4, bool))
    with self.assertRaisesRegex(ValueError, "alpha"):
      rw.inverse_reweighted_loss(losses, labels, rw.init_reweight_state(4), alpha=-0.1,
                                 prior=jnp.ones(4), gamma=1.0)
    with self.assertRaisesRegex(ValueError, "state.beta"):
      self._call(losses, labels, state=rw.ReweightState(jnp.zeros(4), jnp.ones(3)))
    with self.assertRaisesRegex(ValueError, "max_weight"):
      self._call(losses, labels, max_weight=0.0)
    with self.assertRaisesRegex(ValueError, "eps"):
      self._call(losses, labels, eps=0.0)
    with self.assertRaisesRegex(ValueError, "gamma"):
      rw.inverse_reweighted_loss(losses, labels, rw.init_reweight_state(4), alpha=0.0,
                                 prior=jnp.ones(4), gamma=-1.0)
    with self.assertRaisesRegex(ValueError, "gamma"):
      rw.macro_factor(jnp.ones(4), gamma=-0.5)

  def test_out_of_range_label_under_jit(self):
    losses = jnp.array([1.0, 2.0, 3.0])
    labels = jnp.array([0, 5, 1], jnp.int32)
    fn = jax.jit(self._call)
    loss, new_state, aux = fn(losses, labels)
    self.assertTrue(np.isnan(loss))
    np.testing.assert_array_equal(new_state.batch_counts, [1, 1, 0, 0])  # not clipped into class 3
    np.testing.assert_allclose(aux.class_losses, [1.0, 3.0, 0.0, 0.0])
    with mr2_jax.traced_checks():  # fn was traced without checks above: jit traces it again here
      err, _ = checkify.checkify(fn, errors=checkify.user_checks)(losses, labels)
    with self.assertRaisesRegex(Exception, "labels"):
      err.throw()


class PmapTest(chex.TestCase):
  """Under pmap on 8 devices the result equals jit on the concatenated batch."""

  @parameterized.named_parameters(
      ("dense", 5, 8, False),       # K ≤ global batch
      ("dense_stop_gradient", 5, 8, True),
      ("compact", 100, 4, False),   # K > global batch: all-gathered, compacted slots
  )
  def test_matches_single_device(self, num_classes, per_device, stop_gradient):
    num_devices = 8
    self.assertGreaterEqual(jax.device_count(), num_devices)
    batch = num_devices * per_device
    rng = np.random.default_rng(9)
    labels = rng.integers(0, min(num_classes, 12), batch).astype(np.int32)
    where = rng.random(batch) < 0.85
    features = rng.normal(size=(batch, 3)).astype(np.float32)
    params = (0.5 * rng.normal(size=(3, num_classes))).astype(np.float32)
    state = _state(rng.integers(0, 5, num_classes), rng.uniform(0.5, 2, num_classes))
    prior = rw.class_prior(rng.integers(1, 100, num_classes), "inv_freq")
    kwargs = dict(alpha=0.3, prior=prior, gamma=1.0, max_weight=3.0, stop_gradient=stop_gradient)

    def objective(w, x, y, mask, axis_name=None):
      loss, new_state, aux = rw.inverse_reweighted_loss(
          _ce(x @ w, y), y, state, where=mask, axis_name=axis_name, **kwargs)
      return loss, (new_state, aux.class_weights)

    (loss, (new_state, weights)), grads = jax.jit(jax.value_and_grad(objective, has_aux=True))(
        params, features, labels, where)

    def device_step(w, x, y, mask):
      (loss, aux), grads = jax.value_and_grad(
          functools.partial(objective, axis_name="batch"), has_aux=True)(w, x, y, mask)
      return jax.lax.pmean(loss, "batch"), aux, jax.lax.pmean(grads, "batch")

    split = lambda a: a.reshape((num_devices, per_device) + a.shape[1:])
    p_loss, (p_state, p_weights), p_grads = jax.pmap(
        device_step, axis_name="batch", in_axes=(None, 0, 0, 0))(
            params, split(features), split(labels), split(where))
    for device in range(num_devices):
      np.testing.assert_allclose(p_loss[device], loss, rtol=RTOL)
      chex.assert_trees_all_close(jax.tree.map(lambda a: a[device], p_state), new_state,
                                  rtol=RTOL)
      np.testing.assert_allclose(p_weights[device], weights, rtol=RTOL)
      np.testing.assert_allclose(p_grads[device], grads, rtol=1e-4, atol=1e-7)
    self.assertGreater(float(jnp.max(jnp.abs(grads))), 1e-3)


def test_a_bad_row_on_one_device_poisons_every_share_and_is_counted_once():
  """Under pmap the skipped count is the global batch's (the same on every device) and a bad real
  row on one device makes every device's loss share NaN, as `lax.pmean` of the shares would be; a
  NaN loss on a padding row counts nowhere."""
  rng = np.random.default_rng(0)
  losses = rng.uniform(0.1, 2.0, size=(8, 4)).astype(np.float32)
  labels = rng.integers(0, 3, size=(8, 4)).astype(np.int32)
  where = np.ones((8, 4), bool)
  losses[5, 1], where[5, 1] = np.nan, False  # padding: ignored
  state = rw.init_reweight_state(3)

  def step(losses, labels, where):
    loss, new_state, _ = rw.inverse_reweighted_loss(
        losses, labels, state, alpha=0.1, prior=jnp.full((3,), 1 / 3), gamma=1.0,
        axis_name="batch", where=where)
    return loss, new_state.skipped_rows

  stepped = jax.pmap(step, axis_name="batch")
  loss, skipped = stepped(losses, labels, where)
  assert np.all(np.isfinite(loss)) and np.all(np.asarray(skipped) == 0)
  losses[2, 3] = np.inf  # a real row on device 2
  loss, skipped = stepped(losses, labels, where)
  assert np.all(np.isnan(loss)) and np.all(np.asarray(skipped) == 1)
