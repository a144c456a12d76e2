"""Numeric hyperparameters as traced values (`mr2_reweight_core.checks.check_hyperparameter`): each
works as a `jit` argument and under `jax.vmap` over a vector of values (a sweep in one program),
equal to the eager calls; eagerly a bad value is a ValueError naming the argument; traced, it is a
`checkify` error naming it inside `traced_checks()`, and a NaN result outside it (never used
silently). One case per argument: MR2's `decay`, `c_bar` and `lam`; the reweighting's `alpha`,
`gamma` and `max_weight`; Group DRO's `eta`; SupCon's `temperature` and `base_temperature`; LfF's
`q` and `alpha`; the representation margin's (and `mr2_loss`'s) `temperature`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import mr2_jax
import reweight_jax

K = 4
_rng = np.random.default_rng(0)
FEATURES = np.abs(_rng.normal(size=(12, 5))).astype(np.float32)
LOGITS = _rng.normal(size=(12, K)).astype(np.float32)
LABELS = np.array([0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 2, 1], np.int32)
PER_EXAMPLE = np.abs(_rng.normal(size=12)).astype(np.float32) + 0.1


def _stats():
  stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(K), FEATURES, LABELS)
  return mr2_jax.update_class_stats(stats, FEATURES[:6] * 1.5, LABELS[:6])


def _update(decay):
  return mr2_jax.update_class_stats(_stats(), FEATURES * 2, LABELS, decay=decay).sq_mean_norm


def _margins(c_bar):
  return mr2_jax.class_margins(_stats(), c_bar)


def _mr2(name):
  def loss(value):
    return mr2_jax.mr2_loss(LOGITS, FEATURES, LABELS, _stats(), **{name: value})[0]
  return loss


def _reweighted(name):
  def weights(value):
    """The loss and the class weights ŵ (with gradients through the weights the loss itself does not
    depend on γ: β only rescales the batch)."""
    kwargs = dict(alpha=0.5, gamma=1.0, prior=jnp.ones(K))
    kwargs[name] = value
    state = reweight_jax.init_reweight_state(K)
    # The third step reads β from the unequal batch counts B_c = (2, 2, 2, 1) of the first two.
    for labels in (LABELS, LABELS[:3], LABELS[:3]):
      loss, state, aux = reweight_jax.inverse_reweighted_loss(PER_EXAMPLE[:len(labels)], labels,
                                                              state, **kwargs)
    return jnp.concatenate([loss[None], aux.class_weights])
  return weights


def _clipped(value):
  """The weights ŵ clipped at `max_weight` (the losses spread so that w* exceeds the clips)."""
  state = reweight_jax.init_reweight_state(K)
  _, _, aux = reweight_jax.inverse_reweighted_loss(
      PER_EXAMPLE * jnp.array([1, 1, 30, 1, 1, 1, 30, 1, 1, 1, 30, 1.0]), LABELS, state, alpha=0.0,
      prior=jnp.ones(K), gamma=1.0, max_weight=value)
  return aux.class_weights


def _group_dro(value):
  loss, q, _ = reweight_jax.baselines.group_dro_loss(PER_EXAMPLE, LABELS, reweight_jax.baselines.init_group_dro_q(K),
                                           eta=value)
  return jnp.concatenate([loss[None], q])


def _supcon(name):
  projections = FEATURES / np.linalg.norm(FEATURES, axis=1, keepdims=True)

  def loss(value):
    kwargs = dict(temperature=0.1, base_temperature=0.07)
    kwargs[name] = value
    return reweight_jax.baselines.supcon_loss(projections, LABELS, **kwargs)[0]
  return loss


def _representation_margin(value):
  """ℓ_s̄ per anchor at τ = `value` (classes of 3–4 rows: every anchor has positives)."""
  return mr2_jax.representation_margin_loss(FEATURES, LABELS, 0.3, temperature=value)


def _gce(value):
  return reweight_jax.baselines.gce_loss(LOGITS, LABELS, q=value)


def _lff_ema(value):
  state = reweight_jax.baselines.init_lff_state(12)
  for scale in (1.0, 2.0):  # the second update blends with the first by α
    state = reweight_jax.baselines.lff_update_ema(state, jnp.arange(12), PER_EXAMPLE * scale,
                                        PER_EXAMPLE / scale, alpha=value)
  return jnp.concatenate([state.ema_biased, state.ema_debiased])


# (name, function of the value, valid values, an invalid value)
CASES = [
    ("decay", _update, [0.0, 0.5, 0.9, 0.999], 1.0),
    ("c_bar", _margins, [0.5, 1.0, 2.0], 0.0),
    ("decay", _mr2("decay"), [0.0, 0.5, 0.9], -0.1),
    ("c_bar", _mr2("c_bar"), [0.5, 1.0, 2.0], -1.0),
    ("lam", _mr2("lam"), [0.05, 0.1, 1.0], -1.0),
    ("alpha", _reweighted("alpha"), [0.0, 0.5, 3.0], -1.0),
    ("gamma", _reweighted("gamma"), [0.0, 1.0, 2.0], -1.0),
    ("max_weight", _clipped, [1.5, 2.0, 10.0], 0.0),
    ("eta", _group_dro, [0.0, 0.5, 2.0], -0.5),
    ("temperature", _supcon("temperature"), [0.05, 0.1, 0.5], 0.0),
    ("base_temperature", _supcon("base_temperature"), [0.05, 0.07, 0.5], -0.1),
    ("temperature", _representation_margin, [0.5, 1.0, 4.0], 0.0),
    ("temperature", _mr2("temperature"), [0.5, 1.0, 50.0], -1.0),
    ("q", _gce, [0.1, 0.7, 1.0], 1.5),
    ("alpha", _lff_ema, [0.0, 0.7, 1.0], 1.5),
]
IDS = [f"{name}-{fn.__qualname__.split('.')[0]}" for name, fn, _, _ in CASES]


@pytest.mark.parametrize("name, fn, values, bad", CASES, ids=IDS)
def test_a_jit_argument_and_a_vmapped_sweep_equal_the_eager_calls(name, fn, values, bad):
  del name, bad
  eager = np.stack([np.asarray(fn(v)) for v in values])
  jitted = np.stack([np.asarray(jax.jit(fn)(jnp.float32(v))) for v in values])
  swept = np.asarray(jax.jit(jax.vmap(fn))(jnp.asarray(values, jnp.float32)))
  assert np.all(np.isfinite(eager))
  np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(swept, eager, rtol=1e-5, atol=1e-6)
  assert len({np.asarray(e).tobytes() for e in eager}) > 1  # the argument does change the result


@pytest.mark.parametrize("name, fn, values, bad", CASES, ids=IDS)
def test_a_bad_value_is_an_error_naming_it_eagerly_and_under_checkify(name, fn, values, bad):
  del values
  with pytest.raises(ValueError, match=f"^{name}: expected"):
    fn(bad)
  with mr2_jax.traced_checks():
    err, _ = checkify.checkify(jax.jit(fn), errors=checkify.user_checks)(jnp.float32(bad))
  assert err.get() is not None and err.get().startswith(f"{name}: expected"), err.get()
  # Outside traced_checks() nothing is emitted, and the result is NaN: never used silently (the
  # reweighting's loss, first, and the weights of the classes in the batch).
  result = np.ravel(np.asarray(jax.jit(fn)(jnp.float32(bad))))
  assert np.isnan(result[0]) and np.mean(np.isnan(result)) >= 0.75, result


def test_a_valid_traced_value_raises_nothing_under_checkify():
  with mr2_jax.traced_checks():
    err, out = checkify.checkify(jax.jit(_mr2("decay")), errors=checkify.user_checks)(
        jnp.float32(0.9))
  assert err.get() is None and np.isfinite(out)


def test_a_traced_temperature_is_a_constant_with_the_static_gradient_for_the_features():
  """A traced τ computes ℓ_s̄ as the τ = 1 form on φ/√τ and s̄/τ: the value and the gradient with
  respect to φ equal the static τ's, and no gradient flows to τ (as to s̄)."""
  def loss(features, temperature):
    return jnp.sum(mr2_jax.representation_margin_loss(features, LABELS, 0.3,
                                                      temperature=temperature))
  for tau in (0.5, 4.0):
    value, grad = jax.value_and_grad(loss)(FEATURES, tau)
    traced_value, traced_grad = jax.jit(jax.value_and_grad(loss))(FEATURES, jnp.float32(tau))
    np.testing.assert_allclose(traced_value, value, rtol=1e-6)
    np.testing.assert_allclose(traced_grad, grad, rtol=1e-5, atol=1e-6)
    assert float(jax.grad(loss, argnums=1)(FEATURES, jnp.float32(tau))) == 0.0
