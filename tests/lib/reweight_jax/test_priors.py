"""Tests for reweight_jax.priors, reweight_jax.macro and reweight_jax.state against the float64 reference."""

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
COUNTS = np.array([5000, 2000, 500, 120, 31, 7, 1], np.float32)


class ClassPriorTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("uniform", "inv_freq", "inv_sqrt_freq")
  def test_matches_reference(self, kind):
    prior = self.variant(functools.partial(rw.class_prior, kind=kind))(COUNTS)
    chex.assert_shape(prior, COUNTS.shape)
    chex.assert_type(prior, jnp.float32)
    np.testing.assert_allclose(prior, ref.class_prior(COUNTS, kind), rtol=RTOL)
    np.testing.assert_allclose(np.mean(prior), 1.0, rtol=RTOL)

  def test_integer_counts(self):
    np.testing.assert_allclose(rw.class_prior(COUNTS.astype(np.int32), "inv_freq"),
                               ref.class_prior(COUNTS, "inv_freq"), rtol=RTOL)

  def test_zero_count_is_treated_as_one(self):
    counts = np.array([10.0, 0.0, 4.0])
    np.testing.assert_allclose(rw.class_prior(counts, "inv_freq"),
                               ref.class_prior([10.0, 1.0, 4.0], "inv_freq"), rtol=RTOL)

  def test_unknown_kind_names_argument(self):
    with self.assertRaisesRegex(ValueError, "kind"):
      rw.class_prior(COUNTS, "effective_number")

  def test_negative_counts_name_argument(self):
    with self.assertRaisesRegex(ValueError, "counts"):
      rw.class_prior(np.array([3.0, -1.0]), "inv_freq")

  def test_negative_counts_under_jit_are_nan_and_checkified(self):
    fn = jax.jit(functools.partial(rw.class_prior, kind="inv_freq"))
    self.assertTrue(np.all(np.isnan(fn(jnp.array([3.0, -1.0])))))
    with mr2_jax.traced_checks():
      err, _ = checkify.checkify(fn, errors=checkify.user_checks)(jnp.array([3.0, -1.0]))
    with self.assertRaisesRegex(Exception, "counts"):
      err.throw()

  def test_wrong_rank_names_argument(self):
    with self.assertRaisesRegex(ValueError, "counts"):
      rw.class_prior(np.ones((2, 3)), "uniform")


class MacroFactorTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.0, 0.5, 1.0, 2.0)
  def test_matches_reference(self, gamma):
    batch_counts = np.array([0, 1, 2, 4, 9, 100, 3000], np.float32)
    beta = self.variant(rw.macro_factor)(batch_counts, gamma)
    np.testing.assert_allclose(beta, ref.macro_factor(batch_counts, gamma), rtol=RTOL)
    np.testing.assert_allclose(np.mean(beta), 1.0, rtol=RTOL)

  def test_all_zero_counts_give_ones(self):
    np.testing.assert_allclose(rw.macro_factor(np.zeros(8142, np.float32)), np.ones(8142), rtol=RTOL)

  def test_negative_batch_counts_name_argument(self):
    with self.assertRaisesRegex(ValueError, "batch_counts"):
      rw.macro_factor(np.array([1.0, -2.0]))


class StateTest(chex.TestCase):

  def test_init(self):
    state = rw.init_reweight_state(5)
    chex.assert_trees_all_equal(state, rw.ReweightState(np.zeros(5, np.float32),
                                                        np.ones(5, np.float32),
                                                        np.zeros((), np.int32)))
    chex.assert_tree_all_finite(state)
    self.assertLen(jax.tree_util.tree_leaves(state), 3)

  def test_bad_num_classes(self):
    with self.assertRaisesRegex(ValueError, "num_classes"):
      rw.init_reweight_state(0)
    with self.assertRaisesRegex(TypeError, "num_classes"):
      rw.init_reweight_state(3.0)
