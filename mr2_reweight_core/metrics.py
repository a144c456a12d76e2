"""Per-class metrics of both libraries: accuracy, class means of losses, groups, spread and ρ.

The evaluation protocol of MR2 (Zhu et al., ICLR 2026, arXiv 2602.00205: per-class accuracy, groups
fixed from ERM) and the loss imbalance coefficient ρ of Wang et al., ICML 2026, arXiv 2605.10047.
Per-class quantities are kept as sums and counts (`per_class_correct`, `per_class_loss_sums`) so
that they are accumulated over batches and reduced across devices exactly, then divided once
(`class_mean`: NaN for a class without examples, the one convention of the project). The groups
Easy / Medium / Hard are fixed once from a reference (ERM) run and reused for every method.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import checks
from mr2_reweight_core import explicit_mesh

# The per-class metrics, public as one set: `mr2_jax` and `reweight_jax` both export every name
# here (one documentation page, "Per-class metrics"), whichever library a user imports.
__all__ = [
    "GROUP_NAMES",
    "accuracy_from_counts",
    "class_accuracy_std",
    "class_mean",
    "difficulty_tertiles",
    "group_accuracy",
    "per_class_accuracy",
    "per_class_correct",
    "per_class_loss_sums",
    "rho",
    "worst_class_accuracy",
]

GROUP_NAMES = ("easy", "medium", "hard")


def per_class_correct(predictions: ArrayLike, labels: ArrayLike, num_classes: int, *,
                      where: ArrayLike | None = None, axis_name: str | None = None
                      ) -> tuple[jax.Array, jax.Array]:
  r"""(correct_k, count_k) over the (global) batch: each class's correct predictions and examples.

  .. math::

      \mathrm{correct}_k = \sum_{i:\, y_i = k} [\hat y_i = y_i], \qquad
      \mathrm{count}_k = \#\{i : y_i = k\}

  B = 0 (or every row padding): zeros [K] for both. K = 1: ([correct], [count]) of the one class.

  Args:
    predictions: int [B] predicted classes.
    labels: int [B] true classes in [0, K).
    num_classes: K, the number of classes.
    where: optional bool [B]; padding rows are not counted.
    axis_name: psum the sums over this axis (typed replicated under `shard_map`'s
      `check_vma=True`). Without it, `jax.jit` over a batch laid out with `NamedSharding` gives the
      global counts, replicated.

  Returns:
    float32 [K] correct counts and float32 [K] example counts.

  Raises:
    ValueError: labels not rank 1, predictions of another shape, a `where` of another shape, or
      (eagerly) a real row's label outside [0, K).
    TypeError: non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> predictions, labels = jnp.array([0, 1, 1, 2]), jnp.array([0, 1, 2, 2])
    >>> correct, counts = mr2_jax.per_class_correct(predictions, labels, 3)
    >>> print(correct, counts)
    [1. 1. 1.] [1. 1. 2.]
  """
  labels = jnp.asarray(labels)
  in_range = checks.check_labels(labels, num_classes, "labels", where=where)
  predictions = jnp.asarray(predictions)
  if predictions.shape != labels.shape:
    raise ValueError(f"predictions: expected shape {labels.shape} like labels, got "
                     f"{predictions.shape}.")
  return _class_sums((predictions == labels).astype(jnp.float32), labels, in_range, where,
                     num_classes, axis_name)


def per_class_loss_sums(per_example_loss: ArrayLike, labels: ArrayLike, num_classes: int, *,
                        where: ArrayLike | None = None, axis_name: str | None = None
                        ) -> tuple[jax.Array, jax.Array]:
  r"""(loss_sum_k, count_k) over the (global) batch: each class's loss sum and example count.

  .. math::

      \mathrm{loss\_sum}_k = \sum_{i:\, y_i = k} \ell_i, \qquad
      \mathrm{count}_k = \#\{i : y_i = k\}

  The sums under a per-class mean loss :math:`L_k = \mathrm{loss\_sum}_k / \mathrm{count}_k`
  (`class_mean`, once, after the batches and devices are summed; never a mean of batch means): the
  per-class cross-entropy L_c of the loss imbalance coefficient ρ (Wang et al., ICML 2026, arXiv
  2605.10047) and the class losses of Group DRO / FairDRO's epoch-end pass.

  B = 0 (or every row padding): zeros [K] for both. K = 1: the sum and count of every real row.

  Args:
    per_example_loss: floating [B] per-example losses ℓ_i (e.g. `cross_entropy_loss`); the entries
      of padding rows may be anything, NaN included.
    labels: int [B] true classes in [0, K).
    num_classes: K, the number of classes.
    where: optional bool [B]; padding rows are not counted.
    axis_name: psum the sums over this axis (typed replicated under `shard_map`'s
      `check_vma=True`). Without it, `jax.jit` over a batch laid out with `NamedSharding` gives the
      global sums, replicated.

  Returns:
    [K] loss sums (float32, or the loss's dtype when wider) and float32 [K] example counts. Under
    `jit` a row whose label lies outside [0, K) is not counted, as in `per_class_correct`.

  Raises:
    ValueError: labels not rank 1, a loss of another batch size or rank, a `where` of another
      shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-integer labels or a non-floating loss.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> losses, labels = jnp.array([0.5, 1.0, 2.0, 4.0]), jnp.array([0, 2, 2, 1])
    >>> sums, counts = reweight_jax.per_class_loss_sums(losses, labels, 4, where=labels != 1)
    >>> print(sums, counts)
    [0.5 0.  3.  0. ] [1. 0. 2. 0.]
    >>> print(reweight_jax.class_mean(sums, counts))  # L_k; NaN for a class without examples
    [0.5 nan 1.5 nan]
  """
  labels = jnp.asarray(labels)
  in_range = checks.check_labels(labels, num_classes, "labels", where=where)
  per_example_loss = checks.check_floating(per_example_loss, 1, "per_example_loss")
  checks.check_batch_dim(per_example_loss, labels.shape[0], "per_example_loss")
  sum_dtype = jnp.promote_types(per_example_loss.dtype, jnp.float32)
  return _class_sums(per_example_loss.astype(sum_dtype), labels, in_range, where, num_classes,
                     axis_name)


def _class_sums(values: jax.Array, labels: jax.Array, in_range: jax.Array,
                where: ArrayLike | None, num_classes: int, axis_name: str | None
                ) -> tuple[jax.Array, jax.Array]:
  """(Σ_{i: y_i = k} values_i, #{i: y_i = k}) [K] over the valid rows (label in range, `where`),
  psum-reduced over `axis_name`: the one sum under `per_class_correct` and `per_class_loss_sums`."""
  valid = in_range & checks.check_where(where, labels.shape[0])
  target = jnp.where(valid, labels, num_classes)  # out of range: dropped by segment_sum
  replicated = explicit_mesh.replicated_out(target)
  sums = jax.ops.segment_sum(values, target, num_classes, **replicated)
  counts = jax.ops.segment_sum(jnp.ones_like(target, jnp.float32), target, num_classes,
                               **replicated)
  if axis_name is not None:
    sums, counts = jax.lax.psum((sums, counts), axis_name)
  return sums, counts


def per_class_accuracy(predictions: ArrayLike, labels: ArrayLike, num_classes: int, *,
                       where: ArrayLike | None = None) -> np.ndarray:
  r"""Per-class accuracy [K]; NaN for a class with no example.

  .. math::

      \mathrm{acc}_k = \frac{\sum_{i:\, y_i = k} [\hat y_i = y_i]}{\#\{i : y_i = k\}}

  The per-class test accuracy of MR2's evaluation (Zhu et al., ICLR 2026, arXiv 2602.00205).

  B = 0: NaN for every class (none has an example). K = 1: the batch's accuracy as a [1] vector.

  Args:
    predictions: int [B] predicted classes.
    labels: int [B] true classes in [0, K).
    num_classes: K, the number of classes.
    where: optional bool [B]; padding rows are not counted.

  Returns:
    float64 NumPy [K].

  Raises:
    ValueError: as `per_class_correct`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> predictions, labels = jnp.array([0, 1, 1, 2]), jnp.array([0, 1, 2, 2])
    >>> print(mr2_jax.per_class_accuracy(predictions, labels, 4))  # class 3 has no example
    [1.  1.  0.5 nan]
  """
  correct, counts = per_class_correct(predictions, labels, num_classes, where=where)
  return accuracy_from_counts(correct, counts)


def class_mean(sums: ArrayLike, counts: ArrayLike) -> np.ndarray:
  r"""Per-class means as float64 NumPy, NaN for a class without examples (it has no mean: its
  accuracy or loss is NaN, never 0).

  .. math::

      m_k =
      \begin{cases}
        \mathrm{NaN} & \text{if } \mathrm{counts}_k = 0, \\
        \mathrm{sums}_k / \mathrm{counts}_k & \text{otherwise.}
      \end{cases}

  sums may be [K] or [K, ...].

  K = 1: a [1] vector (NaN for a count of 0).

  Args:
    sums: [K] or [K, ...] per-class sums.
    counts: [K] per-class counts.

  Returns:
    float64 NumPy array of the sums' shape.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.class_mean(np.array([3.0, 0.0, 1.0]), np.array([2, 0, 4])))
    [1.5   nan 0.25]
  """
  sums = np.asarray(sums, np.float64)
  counts = np.asarray(counts, np.float64)
  counts = counts.reshape(counts.shape + (1,) * (sums.ndim - counts.ndim))
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)


def accuracy_from_counts(correct: ArrayLike, counts: ArrayLike) -> np.ndarray:
  r"""Per-class accuracy from counts as float64 NumPy, NaN for a class without examples.

  .. math::

      \mathrm{acc}_k = \mathrm{correct}_k / \mathrm{count}_k
      \quad (\mathrm{NaN} \text{ where } \mathrm{count}_k = 0)

  K = 1: a [1] vector (NaN for a count of 0).

  Args:
    correct: [K] correct predictions per class (`per_class_correct`, summed over batches).
    counts: [K] examples per class.

  Returns:
    float64 NumPy [K].

  Examples:
    >>> import numpy as np
    >>> import mr2_jax
    >>> print(mr2_jax.accuracy_from_counts(np.array([1.0, 0.0]), np.array([2.0, 0.0])))
    [0.5 nan]
  """
  return class_mean(correct, counts)


def difficulty_tertiles(reference_accuracy: ArrayLike) -> np.ndarray:
  """Easy / Medium / Hard group of each class from a reference (ERM) run's per-class accuracy.

  Classes are sorted by reference accuracy, descending (ties by class index), and the sorted order is
  split into three near-equal parts (np.array_split: the first parts take the remainder).
  Zhu et al., ICLR 2026, arXiv 2602.00205, evaluation protocol: the groups are fixed from ERM and
  reused for every method.

  K = 1 (any K < 3): `ValueError`, there are no three groups to form.

  Args:
    reference_accuracy: [K] per-class accuracy of the reference (ERM) run, K ≥ 3, no NaN.

  Returns:
    int32 NumPy [K]: 0 Easy (top third), 1 Medium, 2 Hard (bottom third).

  Raises:
    ValueError: not a [K] vector with K ≥ 3, or a NaN entry.

  Examples:
    >>> import numpy as np
    >>> import mr2_jax
    >>> erm_accuracy = np.array([0.9, 0.5, 0.7, 0.95, 0.6, 0.8])
    >>> print(mr2_jax.difficulty_tertiles(erm_accuracy))  # 0 Easy, 1 Medium, 2 Hard
    [0 2 1 0 2 1]
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


def group_accuracy(class_accuracy: ArrayLike, groups: ArrayLike) -> np.ndarray:
  r"""Mean accuracy of each of the three groups g = 0, 1, 2: [3] for Easy, Medium, Hard.

  .. math::

      \mathrm{acc}_g = \operatorname*{mean}_{k:\, \mathrm{group}_k = g} \mathrm{acc}_k

  over the classes with a defined (non-NaN) accuracy.

  Zhu et al., ICLR 2026, arXiv 2602.00205 report Overall, Easy, Medium and Hard. Any three groups of
  classes work alike (the harness's Many / Medium / Few shot groups of Liu et al., CVPR 2019).

  K = 1: a [1] accuracy in group 0 gives that group's accuracy and NaN for the other two (groups
  from `difficulty_tertiles` need K ≥ 3).

  Args:
    class_accuracy: [K] per-class accuracy (NaN for classes without test examples).
    groups: int [K] in {0, 1, 2}, from `difficulty_tertiles` (0 Easy, 1 Medium, 2 Hard).

  Returns:
    float64 NumPy [3]; NaN for a group with no class (or none with a defined accuracy).

  Raises:
    ValueError: the two of different shapes.

  Examples:
    >>> import numpy as np
    >>> import mr2_jax
    >>> groups = np.array([0, 2, 1, 0, 2, 1])
    >>> print(mr2_jax.group_accuracy(np.array([0.9, 0.5, 0.7, 0.95, 0.6, 0.8]), groups))
    [0.925 0.75  0.55 ]
  """
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


def worst_class_accuracy(class_accuracy: ArrayLike) -> float:
  r"""Worst-class accuracy: the lowest per-class accuracy over the classes with examples.

  .. math::

      \min_{k:\, \mathrm{count}_k > 0} \mathrm{acc}_k

  K = 1: the one class's accuracy.

  Args:
    class_accuracy: [K] per-class accuracy (NaN entries ignored).

  Returns:
    Python float.

  Examples:
    >>> import numpy as np
    >>> import mr2_jax
    >>> print(mr2_jax.worst_class_accuracy(np.array([0.9, np.nan, 0.4])))
    0.4
  """
  return float(np.nanmin(np.asarray(class_accuracy, np.float64)))


def class_accuracy_std(class_accuracy: ArrayLike) -> float:
  """Population standard deviation (ddof = 0) of per-class accuracies over classes with examples.

  K = 1: 0.

  Args:
    class_accuracy: [K] per-class accuracy (NaN entries ignored).

  Returns:
    Python float.

  Examples:
    >>> import numpy as np
    >>> import mr2_jax
    >>> print(mr2_jax.class_accuracy_std(np.array([0.5, 1.0, np.nan])))
    0.25
  """
  return float(np.nanstd(np.asarray(class_accuracy, np.float64)))


def rho(class_losses: ArrayLike, present: ArrayLike | None = None) -> jax.Array:
  r"""The loss imbalance coefficient ρ: the coefficient of variation of the per-class mean losses.

  .. math::

      \rho = \operatorname{std}_c(L_c) \,/\, \operatorname{mean}_c(L_c)

  The loss imbalance coefficient of Wang et al., ICML 2026, arXiv 2605.10047, in the *project's*
  definition (the paper reports ρ without stating its formula): L_c are
  the per-class mean training losses on the whole training set (accumulate them with
  `NCAccumulator.update(..., per_example_loss=...)`), std is the population standard deviation over
  classes (ddof = 0). ρ = 0 exactly when all class losses are equal (also when they are all 0); NaN
  when no class is present.

  K = 1: 0 (one class has no disparity).

  Args:
    class_losses: [K] per-class mean losses L_c.
    present: optional bool [K]; classes to include (all when None).

  Returns:
    scalar ρ.

  Raises:
    ValueError: losses not rank 1, `present` of another shape.
    TypeError: non-floating losses.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.rho(jnp.array([1.0, 1.0, 1.0])))
    0.0
    >>> print(np.asarray(reweight_jax.rho(jnp.array([1.0, 2.0, 3.0])), float).round(4))
    0.4082
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
