"""mr2_reweight_core.metrics (re-exported by mr2_jax) against the NumPy reference (per-class accuracy, tertiles, group accuracy)."""

import functools

import chex
import jax
import numpy as np
from absl.testing import parameterized

import mr2_jax
from tests.reference import numpy_mr2 as ref


class EvaluationTest(parameterized.TestCase):

  @parameterized.parameters((10, 200), (30, 50), (7, 5))
  def test_per_class_accuracy_and_groups_match_reference(self, num_classes, batch):
    rng = np.random.default_rng(num_classes)
    labels = rng.integers(0, num_classes, batch).astype(np.int32)
    predictions = np.where(rng.random(batch) < 0.6, labels, rng.integers(0, num_classes, batch))
    acc = mr2_jax.per_class_accuracy(predictions, labels, num_classes)
    acc_ref, _ = ref.per_class_accuracy(predictions, labels, num_classes)
    np.testing.assert_allclose(acc, acc_ref, rtol=1e-12, equal_nan=True)
    reference_acc = rng.random(num_classes).round(1)  # ties exercise the tie-break
    groups = mr2_jax.difficulty_tertiles(reference_acc)
    np.testing.assert_array_equal(groups, ref.difficulty_tertiles(reference_acc))
    np.testing.assert_allclose(mr2_jax.group_accuracy(acc, groups), ref.group_accuracy(acc, groups),
                               rtol=1e-12, equal_nan=True)
    self.assertAlmostEqual(mr2_jax.worst_class_accuracy(acc), ref.worst_class_accuracy(acc))
    self.assertAlmostEqual(mr2_jax.class_accuracy_std(acc), ref.class_accuracy_std(acc))

  def test_tertiles_easy_is_most_accurate(self):
    groups = mr2_jax.difficulty_tertiles(np.array([0.1, 0.9, 0.5, 0.8, 0.2, 0.6]))
    np.testing.assert_array_equal(groups, [2, 0, 1, 0, 2, 1])

  def test_tertiles_reject_nan(self):
    with self.assertRaisesRegex(ValueError, "reference_accuracy"):
      mr2_jax.difficulty_tertiles(np.array([0.1, np.nan, 0.3]))

  def test_padding_is_not_counted_and_sharded_counts_are_exact(self):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 64).astype(np.int32)
    predictions = rng.integers(0, 5, 64).astype(np.int32)
    where = np.arange(64) < 50
    correct, counts = mr2_jax.per_class_correct(predictions, labels, 5, where=where)
    np.testing.assert_array_equal(counts, np.bincount(labels[:50], minlength=5))
    np.testing.assert_array_equal(
        correct, np.bincount(labels[:50], weights=predictions[:50] == labels[:50], minlength=5))

    @functools.partial(jax.pmap, axis_name="batch")
    def sharded(p, y, w):
      return mr2_jax.per_class_correct(p, y, 5, where=w, axis_name="batch")

    shard = lambda t: t.reshape(8, 8)
    correct_n, counts_n = sharded(shard(predictions), shard(labels), shard(where))
    chex.assert_trees_all_equal((correct_n[3], counts_n[3]), (correct, counts))

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, "predictions: expected shape"):
      mr2_jax.per_class_accuracy(np.zeros(3, int), np.zeros(4, np.int32), 2)
    with self.assertRaisesRegex(ValueError, "labels"):
      mr2_jax.per_class_accuracy(np.zeros(2, int), np.array([0, 2], np.int32), 2)
