"""Tests for reweight_jax.mixed_labels.mixed_inverse_reweighted_loss (PIPELINES spec §4).

Against the float64 reference tests/reference/numpy_mixed_labels.py: value, carried state, class
statistics and the gradients with respect to ℓ^a and ℓ^b in both gradient modes, jitted and not; the
spec's identities (λ = 1 and b = a give `inverse_reweighted_loss`, ŵ = v gives GLMC's L_reb, α = 0
without clip and β gives L̄ or L̄·S/B); bad labels; shard_map over 8 devices; a hypothesis property.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import checkify
from jax.sharding import PartitionSpec as P

import reweight_jax as rw
from tests import strategies as S
from tests.reference import numpy_mixed_labels as ref
from tests.reference import numpy_reweight as ref_rw

RTOL = 1e-5
COUNTS = np.array([900, 300, 120, 40, 12, 5], np.float32)
NUM_CLASSES = 6


def _state(batch_counts, beta=None):
  batch_counts = np.asarray(batch_counts, np.float32)
  beta = np.ones_like(batch_counts) if beta is None else np.asarray(beta, np.float32)
  return rw.ReweightState(jnp.asarray(batch_counts), jnp.asarray(beta))


def _ce(logits, labels):
  return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)[:, 0]


def _losses(rng, batch):
  return rng.uniform(0.1, 3.0, batch).astype(np.float32), rng.uniform(0.1, 3.0, batch).astype(
      np.float32)


def _value_and_grads(fn):
  """(ℓ^a, ℓ^b, ...) → ((loss, (new_state, aux)), (∂loss/∂ℓ^a, ∂loss/∂ℓ^b))."""
  def objective(loss_a, loss_b, *args, **kwargs):
    loss, new_state, aux = fn(loss_a, loss_b, *args, **kwargs)
    return loss, (new_state, aux)
  return jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)


# Steps of a carried-state run: (labels a, labels b, λ). Absent classes, repeated classes, λ = 1
# (b counts nowhere), λ = 0 (a counts nowhere), a one-class batch, and b from another sampler.
def _steps(batch=24):
  rng = np.random.default_rng(11)
  a0 = rng.integers(0, 4, batch)                     # classes 4, 5 absent from a
  a1 = np.repeat(np.array([0, 2, 5]), batch // 3)    # repeated classes
  a3 = np.full(batch, 3)                             # a one-class batch
  a4 = rng.integers(0, NUM_CLASSES, batch)
  return [
      (a0, a0[rng.permutation(batch)], 0.37),        # mixup: b a permutation of a
      (a1, rng.integers(0, NUM_CLASSES, batch), 1.0),  # λ = 1: b unmixed, counts nowhere
      (a4, np.full(batch, 4), 0.0),                  # λ = 0: only class 4 present
      (a3, a3[rng.permutation(batch)], 0.62),        # one class in the whole batch
      (a4, rng.integers(3, NUM_CLASSES, batch), 0.81),  # GLMC: b from a re-balanced sampler
  ]


class ValueStateGradientTest(parameterized.TestCase):
  """Several steps with the state carried, against the float64 reference (loss, state, ∂ℓ)."""

  @parameterized.named_parameters(
      ("reference_defaults", 0.0, "uniform", 10.0, True, False, False, True),
      ("alpha_inv_freq_clip_binds", 0.4, "inv_freq", 1.3, True, False, True, True),
      ("alpha_inv_freq_clip_binds_without_jit", 0.4, "inv_freq", 1.3, True, False, True, False),
      ("stop_gradient", 0.2, "inv_sqrt_freq", 10.0, True, True, False, True),
      ("stop_gradient_without_jit", 0.2, "inv_sqrt_freq", 10.0, True, True, False, False),
      ("no_macro_no_clip_masked", 0.0, "inv_freq", None, False, False, True, True),
  )
  def test_steps_match_reference(self, alpha, kind, max_weight, macro, stop_gradient, masked,
                                 with_jit):
    prior = rw.class_prior(COUNTS, kind)
    fn = _value_and_grads(functools.partial(
        rw.mixed_inverse_reweighted_loss, alpha=alpha, prior=prior, gamma=1.0,
        max_weight=max_weight, macro=macro, stop_gradient=stop_gradient))
    fn = jax.jit(fn) if with_jit else fn
    rng = np.random.default_rng(12)
    state = _state([0, 3, 10, 2, 40, 1], rng.uniform(0.5, 2.0, NUM_CLASSES))
    counts, beta = np.asarray(state.batch_counts, np.float64), np.asarray(state.beta, np.float64)
    clipped = 0
    for step, (labels_a, labels_b, lam) in enumerate(_steps()):
      loss_a, loss_b = _losses(rng, labels_a.shape[0])
      where = rng.random(labels_a.shape[0]) < 0.8 if masked else None
      refresh = step % 2 == 0   # the per-epoch cadence: a traced bool
      (loss, (state, aux)), (grad_a, grad_b) = fn(
          loss_a, loss_b, labels_a.astype(np.int32), labels_b.astype(np.int32), jnp.float32(lam),
          state, refresh_macro=jnp.asarray(refresh), where=where)
      expected = ref.mixed_reweight_step(
          loss_a, loss_b, labels_a, labels_b, lam, counts, beta, ref_rw.class_prior(COUNTS, kind),
          alpha=alpha, max_weight=max_weight, macro=macro, refresh_macro=refresh,
          stop_gradient=stop_gradient, where=where)
      counts, beta = expected["batch_counts"], expected["beta"]
      np.testing.assert_allclose(loss, expected["loss"], rtol=RTOL, err_msg=f"step {step}")
      np.testing.assert_allclose(grad_a, expected["grad_a"], rtol=1e-4, atol=1e-7)
      np.testing.assert_allclose(grad_b, expected["grad_b"], rtol=1e-4, atol=1e-7)
      np.testing.assert_array_equal(state.batch_counts, counts)
      np.testing.assert_allclose(state.beta, beta, rtol=RTOL)
      np.testing.assert_array_equal(aux.present, expected["present"])
      np.testing.assert_allclose(aux.class_mass, expected["mass"], rtol=RTOL)
      np.testing.assert_allclose(aux.class_losses, expected["class_losses"], rtol=RTOL)
      np.testing.assert_allclose(aux.inverse_weights, expected["inverse_weights"], rtol=RTOL)
      np.testing.assert_allclose(aux.class_weights, expected["class_weights"], rtol=RTOL)
      real = np.ones(labels_a.shape, bool) if where is None else where
      np.testing.assert_allclose(
          aux.example_weights_a, np.where(real, expected["class_weights"][labels_a], 0), rtol=RTOL)
      np.testing.assert_allclose(
          aux.example_weights_b, np.where(real, expected["class_weights"][labels_b], 0), rtol=RTOL)
      chex.assert_trees_all_equal_shapes_and_dtypes(state, rw.init_reweight_state(NUM_CLASSES))
      if max_weight is not None:
        clipped += int(np.any(expected["class_weights"][expected["present"]] == max_weight))
    self.assertEqual(clipped > 0, max_weight == 1.3)  # the clamp binds where it should


@functools.cache
def _balanced_mean_step():
  return jax.jit(_value_and_grads(functools.partial(
      rw.mixed_inverse_reweighted_loss, alpha=0.0, prior=jnp.ones(NUM_CLASSES), gamma=1.0,
      max_weight=None)))


# The same reweighting hyper-parameters for the mixed and the unmixed loss (the clip binds).
_IDENTITY_KWARGS = dict(alpha=0.3, prior=rw.class_prior(COUNTS, "inv_freq"), gamma=1.0,
                        max_weight=1.5)


@functools.cache
def _mixed_and_unmixed(stop_gradient):
  """Jitted value-and-gradient of the mixed loss and of `inverse_reweighted_loss` on
  λℓ^a + (1 − λ)ℓ^b (one compile each per gradient mode, shared by the identity tests)."""
  kwargs = dict(_IDENTITY_KWARGS, stop_gradient=stop_gradient)
  mixed = jax.jit(_value_and_grads(functools.partial(rw.mixed_inverse_reweighted_loss, **kwargs)))

  def unmixed(loss_a, loss_b, labels, lam, state):
    loss, new_state, aux = rw.inverse_reweighted_loss(lam * loss_a + (1 - lam) * loss_b, labels,
                                                      state, **kwargs)
    return loss, (new_state, aux)

  return mixed, jax.jit(jax.value_and_grad(unmixed, argnums=(0, 1), has_aux=True))


class IdentityTest(chex.TestCase):
  """PIPELINES §4: λ = 1 gives REWEIGHT.md; ŵ = v gives L_reb; α = 0, no clip, β ≡ 1 gives L̄."""

  @parameterized.parameters(False, True)
  def test_lambda_one_is_unmixed(self, stop_gradient):
    """λ = 1, any b: `inverse_reweighted_loss(ℓ^a, a)` — value, state, ∂ℓ^a, aux; ∂ℓ^b = 0."""
    rng = np.random.default_rng(13)
    labels_a = rng.integers(0, 5, 32).astype(np.int32)
    labels_b = rng.integers(0, NUM_CLASSES, 32).astype(np.int32)
    loss_a, loss_b = _losses(rng, 32)
    loss_b[::3] = np.nan  # weight 1 − λ = 0: contributes nothing, not even a NaN
    state = _state([2, 0, 7, 1, 3, 9])
    mixed, unmixed = _mixed_and_unmixed(stop_gradient)
    lam = jnp.float32(1.0)
    (loss, (new_state, aux)), (grad_a, grad_b) = mixed(loss_a, loss_b, labels_a, labels_b, lam,
                                                       state)
    (expected, (expected_state, expected_aux)), (expected_grad, _) = unmixed(
        loss_a, np.zeros(32, np.float32), labels_a, lam, state)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    chex.assert_trees_all_equal(new_state, expected_state)
    np.testing.assert_allclose(grad_a, expected_grad, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(grad_b, np.zeros(32))
    for field in ("class_losses", "present", "mean_class_loss", "inverse_weights",
                  "class_weights"):
      np.testing.assert_allclose(getattr(aux, field), getattr(expected_aux, field), rtol=1e-6,
                                 err_msg=field)
    np.testing.assert_allclose(aux.example_weights_a, expected_aux.example_weights, rtol=1e-6)
    self.assertEqual(float(np.max(aux.class_weights)), 1.5)  # the clip binds
    self.assertGreater(np.ptp(expected_grad), 1e-4)

  @parameterized.parameters(False, True)
  def test_b_equal_a_is_unmixed(self, stop_gradient):
    """b = a, any λ: L_c and ŵ are those of the unmixed loss on λℓ^a + (1 − λ)ℓ^b (so on ℓ^a
    when ℓ^b = ℓ^a): value, state and gradients."""
    rng = np.random.default_rng(14)
    labels = rng.integers(1, NUM_CLASSES, 32).astype(np.int32)
    loss_a, loss_b = _losses(rng, 32)
    state = _state([4, 0, 2, 8, 1, 3])
    mixed, unmixed = _mixed_and_unmixed(stop_gradient)
    for lam in (0.0, 0.3, 0.77, 1.0):
      lam = jnp.float32(lam)
      for other in (loss_b, loss_a):
        (loss, (new_state, _)), grads = mixed(loss_a, other, labels, labels, lam, state)
        (expected, (expected_state, _)), expected_grads = unmixed(loss_a, other, labels, lam,
                                                                  state)
        np.testing.assert_allclose(loss, expected, rtol=1e-6)
        chex.assert_trees_all_equal(new_state, expected_state)
        chex.assert_trees_all_close(grads, expected_grads, rtol=1e-5, atol=1e-8)

  @parameterized.parameters(False, True)
  def test_fixed_weights_give_glmc_soft_label_ce(self, stop_gradient):
    """ŵ = v (α → ∞ with prior v, macro off, no clip): L_reb = (1/B) Σ_i ce(z_i, y^w_i)."""
    rng = np.random.default_rng(15)
    labels_a = rng.integers(0, NUM_CLASSES, 16).astype(np.int32)
    labels_b = labels_a[rng.permutation(16)]
    logits = (2.0 * rng.normal(size=(16, NUM_CLASSES))).astype(np.float32)
    v = COUNTS ** -1.2 / np.mean(COUNTS ** -1.2)   # GLMC's v_c = n_c^(−ℓw), mean 1
    lam = 0.64

    def reweighted(z):
      loss, _, aux = rw.mixed_inverse_reweighted_loss(
          _ce(z, labels_a), _ce(z, labels_b), labels_a, labels_b, lam,
          _state(np.arange(NUM_CLASSES)), alpha=1e12, prior=v, gamma=1.0, max_weight=None,
          macro=False, stop_gradient=stop_gradient)
      return loss, aux.class_weights

    def soft_label_ce(z):
      targets = (lam * v[labels_a, None] * jax.nn.one_hot(labels_a, NUM_CLASSES)
                 + (1 - lam) * v[labels_b, None] * jax.nn.one_hot(labels_b, NUM_CLASSES))
      return jnp.mean(-jnp.sum(targets * jax.nn.log_softmax(z), axis=1))

    (loss, weights), grad = jax.jit(jax.value_and_grad(reweighted, has_aux=True))(logits)
    np.testing.assert_allclose(weights, v, rtol=1e-6)
    np.testing.assert_allclose(loss, ref.soft_label_reweighted_ce(logits, labels_a, labels_b, lam,
                                                                  v), rtol=RTOL)
    np.testing.assert_allclose(grad, jax.jit(jax.grad(soft_label_ce))(logits), rtol=1e-5,
                               atol=1e-8)

  @parameterized.parameters(False, True)
  def test_gradient_flow_is_class_balanced_mean(self, with_beta):
    """α = 0, no clip, gradient flow: loss = L̄·S/B (S = Σ_c m_c β_c; S = B when β ≡ 1) and
    ∂loss/∂ℓ_i^a = (S/B)·λ/(P·m_{a_i}), ∂loss/∂ℓ_i^b = (S/B)·(1 − λ)/(P·m_{b_i})."""
    rng = np.random.default_rng(16)
    labels_a = rng.integers(0, 4, 40).astype(np.int32)
    labels_b = rng.integers(1, 5, 40).astype(np.int32)   # class 5 absent, class 4 only via b
    loss_a, loss_b = _losses(rng, 40)
    lam = 0.58
    # β ≡ 1: every B_c ≤ 1 (one compile for both cases).
    counts_before = np.array([4, 9, 1, 30, 2, 0]) if with_beta else np.ones(NUM_CLASSES)
    (loss, (_, aux)), (grad_a, grad_b) = _balanced_mean_step()(
        loss_a, loss_b, labels_a, labels_b, lam, _state(counts_before))
    class_losses, present, mass, _ = ref.mixed_class_losses(loss_a, loss_b, labels_a, labels_b,
                                                            lam, NUM_CLASSES)
    mean_loss = class_losses[present].mean()
    beta = ref_rw.macro_factor(counts_before, 1.0)
    scale = np.sum(mass * beta) / 40 if with_beta else 1.0
    self.assertEqual(int(present.sum()), 5)
    np.testing.assert_allclose(aux.mean_class_loss, mean_loss, rtol=RTOL)
    np.testing.assert_allclose(loss, scale * mean_loss, rtol=RTOL)
    np.testing.assert_allclose(grad_a, scale * lam / (5 * mass[labels_a]), rtol=RTOL)
    np.testing.assert_allclose(grad_b, scale * (1 - lam) / (5 * mass[labels_b]), rtol=RTOL)


def _bad_call(labels_a, labels_b, loss_a=None, loss_b=None, lam=0.4, **kwargs):
  batch = np.shape(labels_a)[0]
  loss_a = np.linspace(0.5, 2.0, batch, dtype=np.float32) if loss_a is None else loss_a
  loss_b = np.linspace(2.0, 0.7, batch, dtype=np.float32) if loss_b is None else loss_b
  return rw.mixed_inverse_reweighted_loss(loss_a, loss_b, labels_a, labels_b, lam,
                                          _state([1, 0, 2, 5]), alpha=0.0, prior=jnp.ones(4),
                                          gamma=1.0, **kwargs)


_jitted_bad_call = jax.jit(_bad_call)  # one compile for every case below


class BadInputTest(chex.TestCase):

  _call = staticmethod(_bad_call)

  @parameterized.named_parameters(("a_too_large", 0, 7), ("a_negative", 0, -1),
                                  ("b_too_large", 1, 4), ("b_negative", 1, -3))
  def test_out_of_range_label_under_jit(self, which, bad):
    labels = [np.array([0, 1, 1, 2, 0], np.int32), np.array([2, 0, 1, 2, 2], np.int32)]
    labels[which][3] = bad
    loss, new_state, aux = _jitted_bad_call(*map(jnp.asarray, labels))
    self.assertTrue(np.isnan(loss))
    # The bad row counts nowhere, both its parts (never clipped into class 0 or K − 1), and is
    # counted in skipped_rows; the other rows count as they would alone.
    loss_a = np.linspace(0.5, 2.0, 5)
    loss_b = np.linspace(2.0, 0.7, 5)
    others = np.arange(5) != 3
    class_losses, present, mass, _ = ref.mixed_class_losses(loss_a, loss_b, *labels, 0.4, 4,
                                                            where=others)
    np.testing.assert_array_equal(new_state.batch_counts, np.array([1, 0, 2, 5]) + present)
    np.testing.assert_array_equal(new_state.batch_counts[3], 5)
    self.assertEqual(int(new_state.skipped_rows), 1)
    np.testing.assert_allclose(aux.class_losses, class_losses, rtol=RTOL)
    np.testing.assert_allclose(aux.class_mass, mass, rtol=RTOL)
    # Padding rows count nowhere whatever their labels.
    where = np.array([True, True, True, False, True])
    loss, new_state, _ = _jitted_bad_call(*map(jnp.asarray, labels), where=where)
    self.assertTrue(np.isfinite(loss))
    with self.assertRaisesRegex(ValueError, ("labels_a", "labels_b")[which]):
      self._call(*labels)
    with rw.traced_checks():
      err, _ = checkify.checkify(_jitted_bad_call, errors=checkify.user_checks)(*labels)
    with self.assertRaisesRegex(Exception, ("labels_a", "labels_b")[which]):
      err.throw()

  def test_errors_name_argument(self):
    labels = np.array([0, 1, 2, 3], np.int32)
    losses = np.ones(4, np.float32)
    with self.assertRaisesRegex(ValueError, "labels_b"):
      self._call(labels, labels[:3])
    with self.assertRaisesRegex(ValueError, "loss_a"):
      self._call(labels, labels, loss_a=losses[:3])
    with self.assertRaisesRegex(ValueError, "loss_b"):
      self._call(labels, labels, loss_b=losses[:, None])
    with self.assertRaisesRegex(TypeError, "labels_b"):
      self._call(labels, labels.astype(np.float32))
    for lam in (1.5, -0.1, np.ones(2)):
      with self.assertRaisesRegex(ValueError, "lam"):
        self._call(labels, labels, lam=lam)
    with self.assertRaisesRegex(ValueError, "where"):
      self._call(labels, labels, where=np.ones(3, bool))
    with self.assertRaisesRegex(ValueError, "max_weight"):
      self._call(labels, labels, max_weight=0.0)
    with self.assertRaisesRegex(ValueError, "eps"):
      self._call(labels, labels, eps=0.0)
    # A traced λ outside [0, 1] cannot raise: the loss is NaN.
    loss, _, _ = jax.jit(lambda lam: self._call(labels, labels, lam=lam))(1.5)
    self.assertTrue(np.isnan(loss))


class ShardMapTest(chex.TestCase):
  """jax.shard_map over 8 devices (batch-sharded rows, pmean of the shares) equals one device."""

  @parameterized.named_parameters(
      ("dense", 5, 8, False),                # K ≤ 2 × global batch: slot k is class k
      ("compact_stop_gradient", 100, 4, True),  # K > 2 × global batch: compacted slots
  )
  def test_matches_single_device(self, num_classes, per_device, stop_gradient):
    devices = 8
    self.assertGreaterEqual(jax.device_count(), devices)
    batch = devices * per_device
    rng = np.random.default_rng(17)
    labels_a = rng.integers(0, min(num_classes, 12), batch).astype(np.int32)
    labels_b = labels_a[rng.permutation(batch)]
    where = rng.random(batch) < 0.85
    features = rng.normal(size=(batch, 3)).astype(np.float32)
    params = (0.5 * rng.normal(size=(3, num_classes))).astype(np.float32)
    state = _state(rng.integers(0, 5, num_classes), rng.uniform(0.5, 2, num_classes))
    kwargs = dict(alpha=0.3, prior=rw.class_prior(rng.integers(1, 100, num_classes), "inv_freq"),
                  gamma=1.0, max_weight=3.0, stop_gradient=stop_gradient)
    lam = 0.7

    def step(w, offset_a, offset_b, x, a, b, mask, axis_name=None):
      def objective(w, offset_a, offset_b):
        logits = x @ w
        loss, new_state, aux = rw.mixed_inverse_reweighted_loss(
            _ce(logits, a) + offset_a, _ce(logits, b) + offset_b, a, b, lam, state, where=mask,
            axis_name=axis_name, **kwargs)
        return loss, (new_state, aux.class_weights)
      return jax.value_and_grad(objective, argnums=(0, 1, 2), has_aux=True)(w, offset_a, offset_b)

    def local(w, offset_a, offset_b, x, a, b, mask):
      (loss, (new_state, weights)), (grad_w, grad_a, grad_b) = step(
          w, offset_a, offset_b, x, a, b, mask, axis_name="i")
      # The share's gradient wrt a local row is 8× the row's: pmean over the devices.
      return (jax.lax.pmean(loss, "i"), jax.tree.map(lambda s: s[None], new_state), weights[None],
              jax.lax.pmean(grad_w, "i"), grad_a / devices, grad_b / devices)

    mesh = jax.make_mesh((devices,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = P("i")
    zeros = np.zeros(batch, np.float32)
    sharded = jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows, rows, rows),
        out_specs=(P(), rows, rows, P(), rows, rows), check_vma=False))(
            params, zeros, zeros, features, labels_a, labels_b, where)
    (loss, (new_state, weights)), grads = jax.jit(step)(params, zeros, zeros, features, labels_a,
                                                        labels_b, where)
    p_loss, p_state, p_weights, *p_grads = sharded
    np.testing.assert_allclose(p_loss, loss, rtol=RTOL)
    for device in range(devices):
      chex.assert_trees_all_close(jax.tree.map(lambda s: s[device], p_state), new_state,
                                  rtol=RTOL)
      np.testing.assert_allclose(p_weights[device], weights, rtol=RTOL)
    for p_grad, grad in zip(p_grads, grads):
      np.testing.assert_allclose(p_grad, grad, rtol=1e-4, atol=1e-7)
    self.assertGreater(float(jnp.max(jnp.abs(grads[0]))), 1e-3)


# ------------------------------------------------------------------------------------------------
# Property: random mixed batches against the float64 reference
# ------------------------------------------------------------------------------------------------

BUCKET = 32  # 1 … 32 real rows padded to one size: one compile per K


@functools.cache
def _jitted(num_classes, max_weight):
  del num_classes  # a cache key: one compile per (K, max_weight)
  return jax.jit(functools.partial(rw.mixed_inverse_reweighted_loss, gamma=1.0,
                                   max_weight=max_weight))


@st.composite
def mixed_examples(draw):
  num_classes = draw(st.integers(1, 20))
  rows = draw(st.integers(1, BUCKET))
  pattern = draw(st.sampled_from(S.PATTERNS))
  mixing = draw(st.sampled_from(("permutation", "independent", "same")))
  lam = draw(st.one_of(st.sampled_from((0.0, 1.0)), st.floats(0.0, 1.0)))
  alpha = draw(st.sampled_from((0.0, 0.5)))
  max_weight = draw(st.sampled_from((10.0, 2.0, None)))
  counts, beta = draw(S.reweight_arrays(num_classes))
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  labels_a = S.make_labels(rng, rows, num_classes, pattern)
  labels_b = {"permutation": labels_a[rng.permutation(rows)], "same": labels_a,
              "independent": S.make_labels(rng, rows, num_classes, pattern)}[mixing]
  # Loss scales from 1e-3 to 10, some exact zeros (w* = 0 in the ε limit).
  loss_a, loss_b = (np.where(rng.random(rows) < 0.1, 0.0, 10.0 ** rng.uniform(-3, 1, rows))
                    for _ in range(2))
  return dict(num_classes=num_classes, rows=rows, labels_a=labels_a, labels_b=labels_b, lam=lam,
              alpha=alpha, max_weight=max_weight, counts=counts, beta=beta,
              loss_a=loss_a.astype(np.float32), loss_b=loss_b.astype(np.float32),
              refresh=bool(rng.random() < 0.5), prior_counts=rng.integers(1, 1000, num_classes))


def _pad(x, fill):
  out = np.full((BUCKET,) + x.shape[1:], fill, x.dtype)
  out[:x.shape[0]] = x
  return out


@given(mixed_examples())
def test_property_value_matches_reference(example):
  """Batch sizes 1–32 (padded with NaN losses and out-of-range labels), K 1–20, λ ∈ [0, 1], absent
  classes: value, ŵ and the new counts equal the float64 reference within float32 rounding."""
  S.before_example()
  e = example
  num_classes, rows = e["num_classes"], e["rows"]
  prior = ref_rw.class_prior(e["prior_counts"], "inv_sqrt_freq")
  where = np.arange(BUCKET) < rows
  loss, new_state, aux = _jitted(num_classes, e["max_weight"])(
      _pad(e["loss_a"], np.nan), _pad(e["loss_b"], np.nan),
      _pad(e["labels_a"].astype(np.int32), num_classes), _pad(e["labels_b"].astype(np.int32), -1),
      np.float32(e["lam"]), _state(e["counts"], e["beta"]), alpha=e["alpha"],
      prior=prior.astype(np.float32), refresh_macro=e["refresh"], where=where)
  expected = ref.mixed_reweight_step(
      e["loss_a"], e["loss_b"], e["labels_a"], e["labels_b"], e["lam"], e["counts"], e["beta"],
      prior, alpha=e["alpha"], max_weight=e["max_weight"], refresh_macro=e["refresh"])
  # Every term of the loss is ≥ 0: a relative float32 bound over the ~B + K rounded operations.
  S.assert_close(loss, expected["loss"], 64 * S.EPS32 * (abs(expected["loss"]) + 1e-30),
                 "mixed reweighted loss")
  S.assert_close(aux.class_weights, expected["class_weights"],
                 64 * S.EPS32 * np.abs(expected["class_weights"]) + 1e-30, "class weights")
  np.testing.assert_array_equal(new_state.batch_counts, expected["batch_counts"])
