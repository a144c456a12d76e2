"""Per-class metrics of both libraries: accuracy, class means of losses, groups, spread and ρ.

MR2 spec, 'Evaluation protocol'; REWEIGHT spec, 'Loss imbalance coefficient ρ'. Per-class quantities
are kept as sums and counts (`per_class_correct`, loss sums) so that they are accumulated over batches
and reduced across devices exactly, then divided once (`class_mean`: NaN for a class without
examples, the one convention of the project). The groups Easy / Medium / Hard are fixed once from a
reference (ERM) run and reused for every method.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mr2_reweight_core import checks

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
  in_range = checks.check_labels(labels, num_classes, "labels")
  predictions = jnp.asarray(predictions)
  if predictions.shape != labels.shape:
    raise ValueError(f"predictions: expected shape {labels.shape} like labels, got "
                     f"{predictions.shape}.")
  valid = in_range & checks.check_where(where, labels.shape[0])
  target = jnp.where(valid, labels, num_classes)  # out of range: dropped by segment_sum
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


def class_mean(sums: Array, counts: Array) -> np.ndarray:
  """m_k = sums_k / counts_k as float64 NumPy, NaN where counts_k = 0 (a class without examples has
  no mean: its accuracy or loss is NaN, never 0). sums may be [K] or [K, ...]."""
  sums = np.asarray(sums, np.float64)
  counts = np.asarray(counts, np.float64)
  counts = counts.reshape(counts.shape + (1,) * (sums.ndim - counts.ndim))
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)


def accuracy_from_counts(correct: Array, counts: Array) -> np.ndarray:
  """acc_k = correct_k / count_k as float64 NumPy, NaN where count_k = 0."""
  return class_mean(correct, counts)


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


def rho(class_losses: Array, present: Array | None = None) -> jax.Array:
  """ρ = std_c(L_c) / mean_c(L_c): the coefficient of variation of the per-class mean losses.

  This is the *project's* definition (the paper reports ρ but its formula was not available): L_c are
  the per-class mean training losses on the whole training set (accumulate them with
  `NCAccumulator.update(..., per_example_loss=...)`), std is the population standard deviation over
  classes (ddof = 0). ρ = 0 exactly when all class losses are equal (also when they are all 0); NaN
  when no class is present.

  Args:
    class_losses: [K] per-class mean losses L_c.
    present: optional bool [K]; classes to include (all when None).

  Returns:
    scalar ρ.
  """
  class_losses = checks.check_floating(class_losses, 1, "class_losses")
  if present is None:
    present = jnp.ones(class_losses.shape, bool)
  present = jnp.asarray(present)
  if present.shape != class_losses.shape:
    raise ValueError(f"present: expected shape {class_losses.shape} matching class_losses, got "
                     f"{present.shape}.")
  num_present = jnp.sum(present).astype(class_losses.dtype)
  safe_losses = jnp.where(present, class_losses, 0)
  mean = jnp.sum(safe_losses) / num_present
  variance = jnp.sum(jnp.where(present, jnp.square(class_losses - mean), 0)) / num_present
  std = jnp.sqrt(variance)
  ratio = std / jnp.where(std == 0, 1, mean)
  return jnp.where(num_present > 0, ratio, jnp.nan)
