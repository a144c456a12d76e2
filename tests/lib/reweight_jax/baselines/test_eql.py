"""reweight_jax.baselines.eql against the float64 loop reference (COMPARISONS spec, 'EQL, softmax form')."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

import reweight_jax
from tests.reference import numpy_comparisons as ref


def _case(seed, batch=9, num_classes=7, scale=3.0):
  rng = np.random.default_rng(seed)
  logits = (scale * rng.normal(size=(batch, num_classes))).astype(np.float32)
  labels = rng.integers(0, num_classes, batch).astype(np.int32)
  labels[:3] = 2  # repeated class; class 6 absent unless drawn
  rare = np.array([False, True, True, False, True, False, True])
  dropped = rng.random((batch, num_classes)) < 0.7
  return logits, labels, rare, dropped


class EQLTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference_with_gradient(self):
    for seed in range(3):
      logits, labels, rare, dropped = _case(seed, scale=30.0 if seed == 2 else 3.0)
      fn = self.variant(lambda z: reweight_jax.baselines.eql_loss(z, labels, rare, dropped))
      expected, expected_grad = ref.eql_loss(logits, labels, rare, dropped)
      np.testing.assert_allclose(fn(logits), expected, rtol=1e-5, atol=1e-5)
      grad = self.variant(jax.grad(lambda z: jnp.sum(reweight_jax.baselines.eql_loss(z, labels, rare,
                                                                            dropped))))(logits)
      np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-6)

  def test_no_drop_or_no_rare_class_is_cross_entropy(self):
    logits, labels, rare, dropped = _case(4)
    ce = reweight_jax.cross_entropy_loss(logits, labels)
    np.testing.assert_allclose(
        reweight_jax.baselines.eql_loss(logits, labels, rare, np.zeros_like(dropped)), ce, rtol=1e-6)  # γ = 0
    np.testing.assert_allclose(
        reweight_jax.baselines.eql_loss(logits, labels, np.zeros_like(rare), dropped), ce, rtol=1e-6)  # T ≡ 0

  def test_all_negatives_dropped_gives_zero_with_zero_gradient(self):
    logits, labels, _, _ = _case(5)
    rare, dropped = np.ones(7, bool), np.ones((9, 7), bool)
    loss, grad = jax.value_and_grad(lambda z: jnp.sum(reweight_jax.baselines.eql_loss(z, labels, rare,
                                                                            dropped)))(logits)
    np.testing.assert_allclose(loss, 0.0, atol=1e-6)
    np.testing.assert_array_equal(grad, 0.0)

  def test_the_label_is_never_dropped_and_dropped_logits_get_no_gradient(self):
    logits, labels, rare, dropped = _case(6)
    dropped[:, :] = True
    grad = np.asarray(jax.grad(lambda z: jnp.sum(reweight_jax.baselines.eql_loss(z, labels, rare,
                                                                       dropped)))(logits))
    masked = rare[None, :] & (np.arange(7)[None, :] != labels[:, None])
    np.testing.assert_array_equal(grad[masked], 0.0)
    self.assertTrue(np.all(np.isfinite(grad)))

  def test_rare_classes_and_draws(self):
    counts = np.array([1000, 4, 0, 600])
    np.testing.assert_array_equal(reweight_jax.baselines.eql_rare_classes(counts, lam=5e-3),
                                  [False, True, True, False])
    # Balanced data: f = 1/K ≥ λ for K = 100, so no class is rare (EQL = CE).
    self.assertFalse(bool(jnp.any(reweight_jax.baselines.eql_rare_classes(np.full(100, 50)))))
    draws = reweight_jax.baselines.eql_dropped(jax.random.key(0), 2000, 10, gamma=0.9)
    self.assertEqual(draws.shape, (2000, 10))
    self.assertAlmostEqual(float(jnp.mean(draws)), 0.9, delta=0.01)
    with self.assertRaisesRegex(ValueError, "gamma"):
      reweight_jax.baselines.eql_dropped(jax.random.key(0), 2, 2, gamma=1.5)

  def test_where_and_out_of_range_labels(self):
    logits, labels, rare, dropped = _case(7)
    where = np.arange(9) % 3 != 0
    out = reweight_jax.baselines.eql_loss(logits, labels, rare, dropped, where=where)
    expected, _ = ref.eql_loss(logits, labels, rare, dropped)
    np.testing.assert_allclose(out, np.where(where, expected, 0.0), rtol=1e-5, atol=1e-6)
    bad = labels.copy()
    bad[1] = 7
    traced = jax.jit(lambda y: reweight_jax.baselines.eql_loss(logits, y, rare, dropped))(bad)
    self.assertTrue(np.isnan(traced[1]))
    self.assertTrue(np.all(np.isfinite(np.delete(np.asarray(traced), 1))))
    with self.assertRaisesRegex(ValueError, "dropped"):
      reweight_jax.baselines.eql_loss(logits, labels, rare, dropped[:, :3])
