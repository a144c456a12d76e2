"""reweight_jax.baselines.jtt against the float64 loop reference (COMPARISONS spec, 'JTT')."""

import chex
import jax
import numpy as np

from reweight_jax.baselines import jtt
from tests.reference import numpy_jtt_lff as ref


def _logits_and_labels(seed, n=40, num_classes=5):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(n, num_classes)).astype(np.float32)
  labels = rng.integers(0, num_classes - 1, n).astype(np.int32)  # class 4 never a label
  logits[:4] = 1.0  # all tied: argmax is class 0
  labels[:4] = [0, 1, 0, 3]
  logits[4:8, 2] = logits[4:8, 3] = 9.0  # tie between 2 and 3: argmax is 2
  labels[4:8] = [2, 3, 2, 3]
  return logits, labels


class JTTTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_error_set_matches_numpy_argmax(self):
    for seed in range(2):
      logits, labels = _logits_and_labels(seed)
      where = np.random.default_rng(seed + 10).random(40) < 0.8
      errors = self.variant(lambda z, y: jtt.jtt_error_set(z, y))(logits, labels)
      np.testing.assert_array_equal(errors, ref.jtt_error_set(logits, labels))
      np.testing.assert_array_equal(errors[:8], [False, True, False, True] * 2)  # first index wins
      masked = self.variant(lambda z, y, w: jtt.jtt_error_set(z, y, where=w))(logits, labels, where)
      np.testing.assert_array_equal(masked, ref.jtt_error_set(logits, labels, where))
      self.assertEqual(masked.dtype, np.bool_)

  def test_epoch_counts_are_one_plus_upweight_in_error_set(self):
    logits, labels = _logits_and_labels(2)
    errors = np.asarray(jtt.jtt_error_set(logits, labels))
    self.assertTrue(0 < errors.sum() < 40)
    for upweight in (0, 1, 20, 50):
      order = jtt.jtt_upsampled_indices(errors, upweight, seed=(0, 3))
      counts = np.bincount(order, minlength=40)
      np.testing.assert_array_equal(counts, 1 + upweight * errors.astype(np.int64))
      self.assertEqual(order.shape, (jtt.jtt_epoch_length(errors, upweight),))
      self.assertEqual(jtt.jtt_epoch_length(errors, upweight), 40 + upweight * errors.sum())
      self.assertEqual(order.dtype, np.int64)

  def test_same_seed_same_order_and_upweight_zero_is_a_permutation(self):
    errors = np.random.default_rng(4).random(30) < 0.3
    first = jtt.jtt_upsampled_indices(errors, 20, seed=(7, 1))
    np.testing.assert_array_equal(first, jtt.jtt_upsampled_indices(errors, 20, seed=(7, 1)))
    self.assertFalse(np.array_equal(first, jtt.jtt_upsampled_indices(errors, 20, seed=(7, 2))))
    from_rng = jtt.jtt_upsampled_indices(errors, 20, rng=np.random.default_rng((7, 1)))
    np.testing.assert_array_equal(first, from_rng)
    self.assertFalse(np.array_equal(first[:50], np.sort(first)[:50]))  # shuffled, not grouped
    permutation = jtt.jtt_upsampled_indices(errors, 0, seed=5)
    np.testing.assert_array_equal(np.sort(permutation), np.arange(30))
    # A jax mask works as well (the trainer passes jtt_error_set's output).
    np.testing.assert_array_equal(
        jtt.jtt_upsampled_indices(jax.numpy.asarray(errors), 20, seed=(7, 1)), first)

  def test_bad_input_raises_naming_the_argument(self):
    errors = np.array([True, False, True])
    with self.assertRaisesRegex(ValueError, "upweight"):
      jtt.jtt_upsampled_indices(errors, -1, seed=0)
    for bad in (2.0, True, np.float32(3)):
      with self.assertRaisesRegex(TypeError, "upweight"):
        jtt.jtt_upsampled_indices(errors, bad, seed=0)
    with self.assertRaisesRegex(TypeError, "error_set"):
      jtt.jtt_upsampled_indices(np.array([1, 0, 1]), 2, seed=0)
    with self.assertRaisesRegex(ValueError, "error_set"):
      jtt.jtt_epoch_length(np.ones((2, 2), bool), 2)
    with self.assertRaisesRegex(ValueError, "seed, rng"):
      jtt.jtt_upsampled_indices(errors, 2)
    with self.assertRaisesRegex(ValueError, "seed, rng"):
      jtt.jtt_upsampled_indices(errors, 2, seed=0, rng=np.random.default_rng(0))
    with self.assertRaisesRegex(TypeError, "rng"):
      jtt.jtt_upsampled_indices(errors, 2, rng=0)
    logits, labels = _logits_and_labels(0)
    with self.assertRaisesRegex(ValueError, "labels"):
      jtt.jtt_error_set(logits, np.where(labels == 0, 5, labels).astype(np.int32))
    with self.assertRaisesRegex(ValueError, "logits"):
      jtt.jtt_error_set(logits[:-1], labels)
    with self.assertRaisesRegex(ValueError, "where"):
      jtt.jtt_error_set(logits, labels, where=np.ones(3, bool))
