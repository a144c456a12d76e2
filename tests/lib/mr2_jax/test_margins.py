"""mr2_jax.margins against the float64 NumPy reference written from the MR2 spec."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

import mr2_jax
from mr2_reweight_core import cross_entropy
from tests import cases
from tests.reference import numpy_mr2 as ref

RTOL = 1e-5


class ClassMarginsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  @parameterized.parameters((3, 1.0), (10, 1.0), (300, 2.5))
  def test_matches_reference_and_mean_is_c_bar(self, num_classes, c_bar):
    rng = np.random.default_rng(num_classes)
    a, v, seen = cases.random_stats(rng, num_classes)
    gamma = self.variant(lambda s: mr2_jax.class_margins(s, c_bar))(cases.class_stats(a, v, seen))
    np.testing.assert_allclose(gamma, ref.class_margins(a, v, seen, c_bar), rtol=RTOL)
    np.testing.assert_allclose(np.mean(np.asarray(gamma)[seen]), c_bar, rtol=RTOL)

  def test_nothing_seen_gives_c_bar(self):
    gamma = mr2_jax.class_margins(mr2_jax.init_class_stats(5), 1.5)
    np.testing.assert_array_equal(gamma, np.full(5, 1.5, np.float32))

  def test_equal_statistics_give_uniform_margin(self):
    stats = cases.class_stats(np.full(4, 3.0), np.full(4, 2.0), np.ones(4, bool))
    np.testing.assert_array_equal(mr2_jax.class_margins(stats), np.ones(4, np.float32))

  def test_no_gradient_into_statistics(self):
    a, v, seen = cases.random_stats(np.random.default_rng(0), 6, 1.0)
    margins_of = lambda a, v: jnp.sum(mr2_jax.class_margins(cases.class_stats(a, v, seen)) ** 2)
    grad_a, grad_v = jax.grad(margins_of, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(v))
    np.testing.assert_array_equal(grad_a, np.zeros(6))
    np.testing.assert_array_equal(grad_v, np.zeros(6))

  def test_bad_c_bar(self):
    with self.assertRaisesRegex(ValueError, "c_bar"):
      mr2_jax.class_margins(mr2_jax.init_class_stats(3), 0.0)


class MarginCrossEntropyTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True, with_pmap=True)
  @parameterized.named_parameters(*[(c[0], *c[1:]) for c in cases.CASES])
  def test_matches_reference(self, batch, num_classes, dim, pattern):
    del dim
    _, labels, logits = cases.make_case(0, batch, num_classes, 1, pattern)
    gamma = np.random.default_rng(1).uniform(0.3, 2.0, num_classes).astype(np.float32)
    out = self.variant(mr2_jax.margin_cross_entropy)(logits, labels, gamma)
    np.testing.assert_allclose(out, ref.margin_cross_entropy(logits, labels, gamma), rtol=RTOL)

  @chex.variants(with_jit=True, without_jit=True)
  def test_padding_rows_give_zero_and_no_gradient_whatever_they_hold(self):
    """`where` as every per-example loss takes it (docs/api/contract.md): the real rows' values
    are those of the real rows alone; padding gives 0 and a zero gradient, even from inf/NaN."""
    _, labels, logits = cases.make_case(3, 12, 5, 1, "random")
    gamma = np.random.default_rng(4).uniform(0.3, 2.0, 5).astype(np.float32)
    where = np.arange(12) % 3 != 0
    padded = np.array(logits)
    padded[~where] = np.array([np.nan, np.inf, -np.inf, 1e30, 0.0], np.float32)
    fn = self.variant(lambda z: mr2_jax.margin_cross_entropy(z, labels, gamma, where=where))
    out = fn(padded)
    np.testing.assert_array_equal(np.asarray(out)[~where], 0.0)
    np.testing.assert_allclose(np.asarray(out)[where],
                               ref.margin_cross_entropy(logits[where], labels[where], gamma),
                               rtol=RTOL)
    grad = jax.grad(lambda z: jnp.sum(fn(z)))(jnp.asarray(padded))
    np.testing.assert_array_equal(np.asarray(grad)[~where], 0.0)
    self.assertTrue(np.all(np.isfinite(grad)))

  def test_uniform_margin_is_plain_cross_entropy_exactly(self):
    _, labels, logits = cases.make_case(1, 16, 7, 1, "random")
    out = mr2_jax.margin_cross_entropy(logits, labels, jnp.ones(7))
    # Bit for bit the libraries' plain cross-entropy (the same label log-softmax, T = 1) ...
    np.testing.assert_array_equal(out, cross_entropy.cross_entropy_loss(logits, labels))
    # ... which is jax.nn.log_softmax's up to rounding (it shifts by the label's logit, not the max).
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1)[:, 0]
    np.testing.assert_allclose(out, ce, rtol=1e-6)

  def test_no_gradient_into_gamma_and_logit_gradient_matches_reference(self):
    _, labels, logits = cases.make_case(2, 8, 4, 1, "random")
    gamma = jnp.array([0.5, 1.0, 1.5, 2.0])
    g_gamma = jax.grad(lambda g: jnp.sum(mr2_jax.margin_cross_entropy(logits, labels, g)))(gamma)
    np.testing.assert_array_equal(g_gamma, np.zeros(4))
    g_logits = jax.grad(lambda z: jnp.sum(mr2_jax.margin_cross_entropy(z, labels, gamma)))(logits)
    z64 = logits.astype(np.float64)
    eps = 1e-6
    numeric = np.zeros_like(z64)
    for i in range(z64.shape[0]):  # finite differences of the float64 reference
      for k in range(z64.shape[1]):
        up, down = z64.copy(), z64.copy()
        up[i, k] += eps
        down[i, k] -= eps
        numeric[i, k] = (ref.margin_cross_entropy(up, labels, gamma).sum()
                         - ref.margin_cross_entropy(down, labels, gamma).sum()) / (2 * eps)
    np.testing.assert_allclose(g_logits, numeric, rtol=1e-4, atol=1e-6)


class BadInputTest(parameterized.TestCase):

  def test_label_out_of_range_eager(self):
    with self.assertRaisesRegex(ValueError, r"labels: .*\[0, 3\).*got values from 0 to 3"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.array([0, 3]), jnp.ones(3))
    with self.assertRaisesRegex(ValueError, "labels"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.array([-1, 0]), jnp.ones(3))

  def test_label_out_of_range_under_jit_is_nan_not_clipped(self):
    out = jax.jit(mr2_jax.margin_cross_entropy)(jnp.zeros((2, 3)), jnp.array([0, 7]), jnp.ones(3))
    self.assertFalse(np.isnan(out[0]))
    self.assertTrue(np.isnan(out[1]))

  def test_label_out_of_range_under_checkify(self):
    from jax.experimental import checkify
    checked = jax.jit(checkify.checkify(mr2_jax.margin_cross_entropy))
    with mr2_jax.traced_checks():
      err, _ = checked(jnp.zeros((2, 3)), jnp.array([0, 7]), jnp.ones(3))
      with self.assertRaisesRegex(checkify.JaxRuntimeError, r"labels: .*\[0, 3\).*to 7"):
        err.throw()
      err, _ = checked(jnp.zeros((2, 3)), jnp.array([0, 2]), jnp.ones(3))
      err.throw()  # valid labels: no error

  def test_no_traced_check_by_default(self):
    # Outside traced_checks() the jitted loss has no effect (keeps jit's C++ fast path) and a bad
    # label is still NaN, not clipped; the same function traced inside the context carries the check.
    from jax.experimental import checkify
    args = (jnp.zeros((2, 3)), jnp.array([0, 7]), jnp.ones(3))
    self.assertFalse(jax.make_jaxpr(mr2_jax.margin_cross_entropy)(*args).effects)
    with mr2_jax.traced_checks():
      self.assertTrue(jax.make_jaxpr(mr2_jax.margin_cross_entropy)(*args).effects)
    err, out = checkify.checkify(jax.jit(mr2_jax.margin_cross_entropy))(*args)
    err.throw()  # not checked outside the context ...
    self.assertTrue(np.isnan(out[1]))  # ... but the bad label still gives NaN

  def test_shape_and_dtype_errors_name_the_argument(self):
    with self.assertRaisesRegex(ValueError, "logits: expected rank 2"):
      mr2_jax.margin_cross_entropy(jnp.zeros((3,)), jnp.array([0]), jnp.ones(3))
    with self.assertRaisesRegex(ValueError, "labels: expected rank 1"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((2, 1), int), jnp.ones(3))
    with self.assertRaisesRegex(TypeError, "labels: expected an integer"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((2,)), jnp.ones(3))
    with self.assertRaisesRegex(ValueError, "logits: leading dimension 2 does not match"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((4,), int), jnp.ones(3))
    with self.assertRaisesRegex(ValueError, r"gamma: expected shape \(3,\)"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((2,), int), jnp.ones(4))
    with self.assertRaisesRegex(TypeError, "logits: expected a floating"):
      mr2_jax.margin_cross_entropy(jnp.zeros((2, 3), int), jnp.zeros((2,), int), jnp.ones(3))


def test_non_finite_statistics_give_nan_margins_not_plain_cross_entropy():
  stats = cases.class_stats(np.array([1.0, np.nan, 2.0]), np.ones(3), np.ones(3, bool))
  assert np.all(np.isnan(mr2_jax.class_margins(stats)))


def test_a_non_finite_logit_anywhere_in_a_row_gives_nan_and_only_there():
  """A −inf logit would drop out of the softmax (e^{−inf} = 0); the margin cross-entropy is NaN on
  every row that holds a non-finite logit (`mr2_loss` reads it there), with a NaN gradient on that
  row only; a row that overflows the label-shifted
  sum (another branch of the same call) stays finite."""
  logits = jnp.array([[0.0, 1.0, -jnp.inf], [0.0, 1.0, 2.0], [jnp.nan, 0.0, 0.0],
                      [jnp.inf, 0.0, 0.0], [0.0, -jnp.inf, 0.0], [1000.0, 0.0, 0.0]])
  labels = jnp.array([0, 1, 1, 1, 1, 1])
  gamma = jnp.array([1.0, 2.0, 0.5])
  bad = np.array([True, False, True, True, True, False])
  for fn in (mr2_jax.margin_cross_entropy, jax.jit(mr2_jax.margin_cross_entropy)):
    out = np.asarray(fn(logits, labels, gamma))
    np.testing.assert_array_equal(np.isnan(out), bad)
    np.testing.assert_allclose(out[~bad], ref.margin_cross_entropy(
        np.asarray(logits)[~bad], np.asarray(labels)[~bad], np.asarray(gamma)), rtol=1e-5)
  grad = np.asarray(jax.grad(lambda z: jnp.sum(jnp.where(
      jnp.asarray(bad), 0.0, mr2_jax.margin_cross_entropy(z, labels, gamma))))(logits))
  assert np.all(np.isfinite(grad[~bad]))
