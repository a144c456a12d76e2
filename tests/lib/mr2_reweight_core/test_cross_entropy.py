"""mr2_reweight_core.cross_entropy: the label's log-softmax with an optional per-example temperature (MR2's
γ_y), its written-out derivative, against float64 NumPy (value and gradient written from the formula)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mr2_reweight_core.cross_entropy import label_log_softmax


def reference(logits, labels, temperature):
  """float64: log softmax(z / T)_y and its gradient (1[k = y] − softmax(z / T)_k) / T."""
  s = np.asarray(logits, np.float64) / np.asarray(temperature, np.float64)[:, None]
  s = s - s.max(axis=1, keepdims=True)
  log_norm = np.log(np.exp(s).sum(axis=1))
  rows = np.arange(len(labels))
  value = s[rows, labels] - log_norm
  probs = np.exp(s - log_norm[:, None])
  onehot = np.zeros_like(probs)
  onehot[rows, labels] = 1.0
  return value, (onehot - probs) / np.asarray(temperature, np.float64)[:, None]


def draw(seed, batch=33, classes=517, scale=3.0, offset=0.0):
  rng = np.random.default_rng(seed)
  logits = (rng.normal(size=(batch, classes)) * scale + offset).astype(np.float32)
  labels = rng.integers(0, classes, batch).astype(np.int32)
  temperature = rng.uniform(0.3, 3.0, batch).astype(np.float32)
  return logits, labels, temperature


@pytest.mark.parametrize("seed, scale, offset", [(0, 3.0, 0.0), (1, 30.0, 0.0), (2, 1.0, 1e4)])
def test_value_and_gradient_match_float64(seed, scale, offset):
  logits, labels, temperature = draw(seed, scale=scale, offset=offset)
  expected, expected_grad = reference(logits, labels, temperature)
  f = lambda z: jnp.sum(label_log_softmax(z, labels, temperature))
  value = label_log_softmax(jnp.asarray(logits), labels, temperature)
  grad = jax.jit(jax.grad(f))(jnp.asarray(logits))
  # float32 rounding of z (|z| up to 1e4 + 100) relative to T ≥ 0.3
  atol = 4 * np.finfo(np.float32).eps * (np.abs(logits).max() / temperature.min() + 1)
  np.testing.assert_allclose(value, expected, rtol=0, atol=atol)
  np.testing.assert_allclose(grad, expected_grad, rtol=0, atol=1e-5 / temperature.min())


def test_forward_mode_equals_reverse_mode():
  logits, labels, temperature = draw(3)
  direction = np.random.default_rng(4).normal(size=logits.shape).astype(np.float32)
  f = lambda z: jnp.sum(label_log_softmax(z, labels, temperature))
  _, tangent = jax.jvp(f, (jnp.asarray(logits),), (jnp.asarray(direction),))
  grad = jax.grad(f)(jnp.asarray(logits))
  np.testing.assert_allclose(tangent, np.sum(np.asarray(grad, np.float64) * direction), rtol=1e-5)


def test_temperature_is_a_constant_and_none_means_one():
  logits, labels, temperature = draw(5)
  g = jax.grad(lambda t: jnp.sum(label_log_softmax(jnp.asarray(logits), labels, t)))(temperature)
  np.testing.assert_array_equal(g, 0.0)
  ones = np.ones_like(temperature)
  np.testing.assert_array_equal(label_log_softmax(logits, labels),
                                label_log_softmax(logits, labels, ones))
  np.testing.assert_array_equal(
      jax.grad(lambda z: jnp.sum(label_log_softmax(z, labels)))(logits),
      jax.grad(lambda z: jnp.sum(label_log_softmax(z, labels, ones)))(logits))


def test_minus_infinity_logits_get_no_gradient():
  logits = np.array([[5.0, -np.inf, 1.0], [0.0, 2.0, -np.inf]], np.float32)
  labels = np.array([0, 1], np.int32)
  temperature = np.array([0.5, 2.0], np.float32)
  value = np.asarray(label_log_softmax(logits, labels, temperature))
  expected, expected_grad = reference(np.where(np.isinf(logits), -1e30, logits), labels, temperature)
  np.testing.assert_allclose(value, expected, rtol=0, atol=2 * np.finfo(np.float32).eps)
  grad = jax.grad(lambda z: jnp.sum(label_log_softmax(z, labels, temperature)))(logits)
  assert np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, expected_grad, atol=1e-6)
  assert grad[0, 1] == 0.0 and grad[1, 2] == 0.0


@pytest.mark.parametrize("jit", [False, True])
def test_a_row_that_would_overflow_takes_the_max_shift(jit):
  """Shifted by the label's logit, exp((z_k − z_y) / T) overflows where a logit is ~88·T above the
  label's: then (any row) the batch is shifted by the row maxima instead, and value and gradient
  still match float64."""
  logits, labels, temperature = draw(8, batch=16, classes=50)
  logits[3, (labels[3] + 1) % 50] = logits[3, labels[3]] + 100.0 * temperature[3]
  f = lambda z: label_log_softmax(z, labels, temperature)
  grad_f = jax.grad(lambda z: jnp.sum(f(z)))
  if jit:
    f, grad_f = jax.jit(f), jax.jit(grad_f)
  value, grad = f(jnp.asarray(logits)), grad_f(jnp.asarray(logits))
  expected, expected_grad = reference(logits, labels, temperature)
  assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
  atol = 4 * np.finfo(np.float32).eps * (np.abs(logits).max() / temperature.min() + 1)
  np.testing.assert_allclose(value, expected, rtol=0, atol=atol)
  assert value[3] < -99.0
  np.testing.assert_allclose(grad, expected_grad, rtol=0, atol=1e-5 / temperature.min())


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("overflow", [False, True])
def test_flag_non_finite_makes_the_row_and_its_gradient_nan_wherever_the_logit_lies(overflow, jit):
  """`flag_non_finite=True`: NaN, +inf or −inf at the label's column or another makes that row's
  value and every entry of its gradient NaN, whichever shift the batch takes (`overflow`: a row's
  logit ~100·T above its label's, or +inf at another column, whose term overflows, sends the batch
  to the max shift; without them it keeps the label's); the other rows' value and gradient match
  float64."""
  logits, labels, temperature = draw(9, batch=12, classes=7)
  placed = [(np.nan, True), (np.nan, False), (np.inf, True), (-np.inf, True), (-np.inf, False)]
  if overflow:
    logits[0, (labels[0] + 1) % 7] = logits[0, labels[0]] + 100.0 * temperature[0]
    placed.append((np.inf, False))
  bad = np.zeros(12, bool)
  for row, (value, at_label) in enumerate(placed, start=1):
    logits[row, labels[row] if at_label else (labels[row] + 3) % 7] = value
    bad[row] = True
  with np.errstate(invalid="ignore", over="ignore"):  # the flagged exp-sum: which shift is taken
    terms = np.exp((logits - logits[np.arange(12), labels][:, None]) / temperature[:, None])
    terms = np.where(np.arange(7) == labels[:, None], 0.0, terms)
    rest = np.sum(np.where(logits == -np.inf, np.nan, terms), axis=1)
  assert np.any(rest == np.inf) == overflow

  f = lambda z: label_log_softmax(z, labels, temperature, flag_non_finite=True)
  row_grad = lambda z, r: jax.grad(lambda z: f(z)[r])(z)
  good_grad = jax.grad(lambda z: jnp.sum(jnp.where(bad, 0.0, f(z))))
  if jit:
    f, row_grad, good_grad = jax.jit(f), jax.jit(row_grad), jax.jit(good_grad)
  z = jnp.asarray(logits)
  value, grad = np.asarray(f(z)), np.asarray(good_grad(z))
  assert np.all(np.isnan(value[bad])), value
  for row in np.flatnonzero(bad):
    assert np.all(np.isnan(np.asarray(row_grad(z, row))[row])), row
  expected, expected_grad = reference(logits[~bad], labels[~bad], temperature[~bad])
  atol = 4 * np.finfo(np.float32).eps * (np.abs(logits[~bad]).max() / temperature.min() + 1)
  np.testing.assert_allclose(value[~bad], expected, rtol=0, atol=atol)
  np.testing.assert_allclose(grad[~bad], expected_grad, rtol=0, atol=1e-5 / temperature.min())


def test_confident_rows_keep_their_small_losses():
  """A label logit 30 above the rest: −log softmax_y ≈ Σ_{k≠y} e^{−30} ≈ 5e-11, which log(1 + ·) in
  float32 rounds to 0; the label-shifted form's log1p keeps it to float32 precision."""
  logits = np.random.default_rng(9).normal(size=(8, 517)).astype(np.float32)
  labels = np.arange(8, dtype=np.int32)
  logits[np.arange(8), labels] = 30.0 + logits.max()
  value = np.asarray(label_log_softmax(jnp.asarray(logits), labels))
  # float64, written with log1p too: log(Σ_k ·) of `reference` is itself off by ~1e-16 absolute here.
  z = logits.astype(np.float64)
  others = np.exp(z - z[np.arange(8), labels][:, None])
  others[np.arange(8), labels] = 0.0
  expected = -np.log1p(others.sum(axis=1))
  assert np.all(expected < -1e-12) and np.all(expected > -1e-9)
  np.testing.assert_allclose(value, expected, rtol=1e-5)


def test_gradient_has_no_scatter():
  """The label's term is a one-hot select in the gradient: autodiff of the gather would scatter-add
  into a zero [B, K] array, a second pass over the logits."""
  logits, labels, temperature = draw(6)
  jaxpr = jax.make_jaxpr(jax.grad(lambda z: jnp.sum(label_log_softmax(z, labels, temperature))))(
      logits)
  assert "scatter" not in str(jaxpr)  # the printed jaxpr includes the nested ones
  assert "gather" in str(jax.make_jaxpr(lambda z: label_log_softmax(z, labels))(logits))


def test_narrow_label_dtype_with_more_classes_than_it_counts():
  """uint8 labels (as CIFAR arrays store them) with K = 300 > 256: the one-hot of the gradient must
  not wrap around the label dtype."""
  logits, labels, temperature = draw(7, batch=16, classes=300)
  labels = (labels % 256).astype(np.uint8)
  grad = jax.grad(lambda z: jnp.sum(label_log_softmax(z, labels, temperature)))(logits)
  _, expected = reference(logits, labels.astype(np.int64), temperature)
  np.testing.assert_allclose(grad, expected, rtol=0, atol=1e-5 / temperature.min())
