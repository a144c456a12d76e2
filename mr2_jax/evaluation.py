"""Per-class evaluation of MR2 (MR2 spec, 'Evaluation protocol').

Per-class accuracy is kept as sums and counts (`per_class_correct`) so that it can be accumulated over
batches and reduced across devices exactly; the groups Easy / Medium / Hard are fixed once from a
reference (ERM) run and reused for every method.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mr2_jax import validation

Array = Any

GROUP_NAMES = ("easy", "medium", "hard")


def per_class_correct(predictions: Array, labels: Array, num_classes: int, *,
                      where: Array | None = None, axis_name: str | None = None
                      ) -> tuple[jax.Array, jax.Array]:
  """(correct_k, count_k) over the (global) batch: Σ_{i: y_i = k} [ŷ_i = y_i] and #{i: y_i = k}.

  Args:
    predictions: int [B] predicted classes.
    labels: int [B] true classes in [0, K).
    num_classes: K.
    where: optional bool [B]; padding rows are not counted.
    axis_name: psum the sums over this axis.

  Returns:
    float32 [K] correct counts and float32 [K] example counts.
  """
  in_range = validation.check_labels(labels, num_classes, "labels")
  predictions = jnp.asarray(predictions)
  if predictions.shape != labels.shape:
    raise ValueError(f"predictions: expected shape {labels.shape} like labels, got "
                     f"{predictions.shape}.")
  valid = in_range & validation.check_where(where, labels.shape[0])
  target = jnp.where(valid, labels, num_classes)
  correct = jax.ops.segment_sum((predictions == labels).astype(jnp.float32), target, num_classes)
  counts = jax.ops.segment_sum(jnp.ones_like(target, jnp.float32), target, num_classes)
  if axis_name is not None:
    correct, counts = jax.lax.psum((correct, counts), axis_name)
  return correct, counts


def per_class_accuracy(predictions: Array, labels: Array, num_classes: int, *,
                       where: Array | None = None) -> np.ndarray:
  """acc_k = Σ_{i: y_i = k} [ŷ_i = y_i] / #{i: y_i = k}; NaN for a class with no example. [K]"""
  correct, counts = per_class_correct(predictions, labels, num_classes, where=where)
  return accuracy_from_counts(correct, counts)


def accuracy_from_counts(correct: Array, counts: Array) -> np.ndarray:
  """acc_k = correct_k / count_k as float64 NumPy, NaN where count_k = 0."""
  correct = np.asarray(correct, np.float64)
  counts = np.asarray(counts, np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(counts > 0, correct / np.where(counts > 0, counts, 1.0), np.nan)


def difficulty_tertiles(reference_accuracy: Array) -> np.ndarray:
  """Easy / Medium / Hard group of each class from a reference (ERM) run's per-class accuracy.

  Classes are sorted by reference accuracy, descending (ties by class index), and the sorted order is
  split into three near-equal parts (np.array_split: the first parts take the remainder).
  Returns int [K]: 0 Easy (top third), 1 Medium, 2 Hard (bottom third). MR2 spec, 'Evaluation protocol'.
  """
  reference_accuracy = np.asarray(reference_accuracy, np.float64)
  if reference_accuracy.ndim != 1 or reference_accuracy.size < 3:
    raise ValueError("reference_accuracy: expected a [K] vector with K >= 3, got shape "
                     f"{reference_accuracy.shape}.")
  if np.isnan(reference_accuracy).any():
    raise ValueError("reference_accuracy: has NaN entries (classes absent from the reference "
                     "evaluation); groups cannot be fixed.")
  order = np.lexsort((np.arange(reference_accuracy.size), -reference_accuracy))
  groups = np.empty(reference_accuracy.size, np.int32)
  for group, members in enumerate(np.array_split(order, 3)):
    groups[members] = group
  return groups


def group_accuracy(class_accuracy: Array, groups: Array) -> np.ndarray:
  """Mean per-class accuracy within each group: [3] for Easy, Medium, Hard (NaN-free classes only)."""
  class_accuracy = np.asarray(class_accuracy, np.float64)
  groups = np.asarray(groups)
  if class_accuracy.shape != groups.shape:
    raise ValueError(f"groups: shape {groups.shape} does not match class_accuracy "
                     f"{class_accuracy.shape}.")
  means = []
  for g in range(len(GROUP_NAMES)):
    members = class_accuracy[groups == g]
    members = members[~np.isnan(members)]  # classes without test examples
    means.append(members.mean() if members.size else np.nan)
  return np.array(means)


def worst_class_accuracy(class_accuracy: Array) -> float:
  """min_k acc_k over classes with examples."""
  return float(np.nanmin(np.asarray(class_accuracy, np.float64)))


def class_accuracy_std(class_accuracy: Array) -> float:
  """Population standard deviation (ddof = 0) of per-class accuracies over classes with examples."""
  return float(np.nanstd(np.asarray(class_accuracy, np.float64)))
