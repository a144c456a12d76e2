"""Batch-level inverse weights: per-class batch losses and the closed-form minimiser.

Wang et al., ICML 2026, arXiv 2605.10047: the inverse problem and its closed form. The functions
work on any vector of classes: the public ones take [K] vectors, and `inverse_reweighted_loss` calls
the same equations on the compact per-slot vectors of `mr2_reweight_core.class_sums` (only the
classes of the batch), so that K = 8142 with a batch of 32 costs O(B), not O(K), per step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_mask
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_hyperparameter
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import is_concrete


class BatchClassLosses(NamedTuple):
  r"""Per-class mean losses of one (global) batch.

  Attributes:
    class_losses: [K], :math:`L_c`, the mean of :math:`\ell_i` over the valid examples of class c;
      0 for absent classes.
    present: bool [K], n_c > 0.
    class_counts: float32 [K], n_c, the number of valid examples of class c.
  """
  class_losses: jax.Array
  present: jax.Array
  class_counts: jax.Array


def slot_class_losses(per_example_loss: jax.Array, valid: jax.Array,
                      slots: class_sums.ClassSlots, *, axis_name: str | None = None
                      ) -> tuple[jax.Array, jax.Array]:
  """L per slot [S] and slot presence [S]: L_c = Σ_{i: y_i=c} ℓ_i / n_c over the global batch.

  Sums and counts are reduced over `axis_name` before dividing, so the result is the mean over the
  global batch, never a mean of device means. Invalid examples contribute nothing, even if their loss
  is NaN.
  """
  loss_sums = class_sums.slot_sum(jnp.where(valid, per_example_loss, 0), slots, axis_name=axis_name)
  present = slots.counts > 0
  return loss_sums / jnp.maximum(slots.counts, 1.0).astype(loss_sums.dtype), present


def batch_class_losses(per_example_loss: ArrayLike, labels: ArrayLike, num_classes: int, *,
                       where: ArrayLike | None = None,
                       axis_name: str | None = None) -> BatchClassLosses:
  r"""Per-class mean batch losses L_c, for the classes present:

  .. math::

      L_c = \frac{1}{n_c} \sum_{i:\, y_i = c} \ell_i

  Wang et al., ICML 2026, arXiv 2605.10047: the per-class losses L_c of the inverse problem, over
  the classes present in the (global) batch.

  B = 0 (or every row padding): zero losses and counts, no class present. K = 1: the mean loss of
  the real rows.

  Args:
    per_example_loss: [B] per-example losses ℓ_i (e.g. softmax cross-entropy).
    labels: int [B] class labels in [0, K).
    num_classes: K, the number of classes.
    where: optional bool [B]; False marks padding, which counts nowhere.
    axis_name: data-parallel axis; sums and counts are reduced over it (global batch statistics,
      typed replicated under `shard_map`'s `check_vma=True`). Without it, `jax.jit` over a batch
      laid out with `NamedSharding` gives the same statistics, replicated.

  Returns:
    `BatchClassLosses` with [K] vectors (identical on every device under `axis_name`).

  Raises:
    ValueError: losses not [B] like the labels, a `where` of another shape, `num_classes` < 1, or
      (eagerly) a real row's label outside [0, K).
    TypeError: non-floating losses, non-integer labels, a non-int `num_classes`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> per_example, labels = jnp.array([0.2, 0.4, 1.5]), jnp.array([0, 0, 2])
    >>> out = reweight_jax.batch_class_losses(per_example, labels, 3)
    >>> print(np.asarray(out.class_losses, float).round(4), out.present, out.class_counts)
    [0.3 0.  1.5] [ True False  True] [2. 0. 1.]
  """
  num_classes = check_num_classes(num_classes)
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, num_classes, where=where)
  per_example_loss = check_floating(per_example_loss, 1, "per_example_loss")
  check_batch_dim(per_example_loss, labels.shape[0], "per_example_loss")
  valid = check_where(where, labels.shape[0]) & in_range
  slots = class_sums.class_slots(labels, valid, num_classes, axis_name=axis_name)
  slot_losses, slot_present = slot_class_losses(per_example_loss, valid, slots, axis_name=axis_name)
  zeros = jnp.zeros((num_classes,), slot_losses.dtype)
  return BatchClassLosses(
      class_losses=class_sums.scatter_to_classes(zeros, slot_losses, slots, slot_present),
      present=class_sums.scatter_to_classes(
          jnp.zeros((num_classes,), bool), slot_present, slots, slot_present),
      class_counts=class_sums.scatter_to_classes(
          jnp.zeros((num_classes,), jnp.float32), slots.counts, slots, slot_present))


def mean_class_loss(class_losses: jax.Array, present: jax.Array) -> jax.Array:
  r"""L̄: mean of L_c over the present classes (a class-level mean, not a sample mean); 0 if none.

  .. math::

      \bar L = \operatorname*{mean}_{c \text{ present}} L_c

  Wang et al., ICML 2026, arXiv 2605.10047: the target L̄ of the inverse problem.

  K = 1: the one class's loss when it is present.

  Args:
    class_losses: [K] per-class mean losses L_c.
    present: bool [K], the classes that enter the mean.

  Returns:
    scalar L̄ in the losses' dtype.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.mean_class_loss(jnp.array([0.3, 0.0, 1.5]), jnp.array([True, False, True])))
    0.9
  """
  safe_losses = jnp.where(present, class_losses, 0)
  num_present = jnp.sum(present).astype(safe_losses.dtype)
  return jnp.sum(safe_losses) / jnp.maximum(num_present, 1)


def closed_form_weights(class_losses: jax.Array, present: jax.Array, prior: jax.Array,
                        alpha: ArrayLike, eps: float) -> jax.Array:
  """w*_c = (L̄·L_c + α·w⁰_c) / (L_c² + α + ε) for present classes, w⁰_c for absent ones.

  Unchecked core of `inverse_weights`; the vectors may be per class [K] or per slot [S].
  """
  safe_losses = jnp.where(present, class_losses, 0)
  target = mean_class_loss(safe_losses, present)
  prior = prior.astype(safe_losses.dtype)
  solution = (target * safe_losses + alpha * prior) / (jnp.square(safe_losses) + alpha + eps)
  weights = jnp.where(present, solution, prior)
  if not is_concrete(alpha):  # a traced α < 0: NaN weights, never a silently negative strength
    weights = jnp.where(jnp.asarray(alpha) >= 0, weights, jnp.nan)
  return weights


def check_alpha(alpha: ArrayLike) -> None:
  """Raises if a concrete Tikhonov strength α is negative or not a scalar; a traced one is checked
  by `checkify` inside `traced_checks()` (`check_hyperparameter`), and `closed_form_weights` makes
  the weights NaN for a negative one."""
  check_hyperparameter(alpha, "alpha", 0.0, what="a Tikhonov strength α")


def inverse_weights(class_losses: ArrayLike, present: ArrayLike, *, prior: ArrayLike,
                    alpha: ArrayLike = 0.0, eps: float = 1e-8) -> jax.Array:
  r"""Closed-form batch-level weights: the minimiser of the Tikhonov-regularised inverse problem.

  .. math::

      \min_w \sum_c \bigl[(w_c L_c - \bar L)^2 + \alpha\, (w_c - w^0_c)^2\bigr]

  .. math::

      w^*_c =
      \begin{cases}
        \dfrac{\bar L L_c + \alpha w^0_c}{L_c^2 + \alpha + \epsilon}
          & \text{for present classes,} \\
        w^0_c & \text{for absent classes,}
      \end{cases}
      \qquad \bar L = \operatorname*{mean}_{c \text{ present}} L_c.

  Wang et al., ICML 2026, arXiv 2605.10047: the closed form of the inverse problem. With α = 0,
  :math:`w^*_c = \bar L L_c / (L_c^2 + \epsilon) \approx \bar L / L_c`; a present class with
  :math:`L_c = 0` then gets :math:`w^*_c = 0` (the ε-regularised limit), not infinity.

  K = 1: (1,) when the class is present.

  Args:
    class_losses: [K] per-class mean losses L_c (values of absent classes are ignored).
    present: bool [K], which classes are present.
    prior: [K] prior weights w⁰ (see `class_prior`).
    alpha: Tikhonov strength α ≥ 0 (0 is the reference default).
    eps: ε > 0 added to the denominator.

  Returns:
    [K] weights w*.

  Raises:
    ValueError: vectors that are not [K], α < 0 or not a scalar, ε ≤ 0.
    TypeError: non-floating losses or prior, a non-boolean `present`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> class_losses, present = jnp.array([0.5, 2.0, 0.0]), jnp.array([True, True, False])
    >>> print(np.asarray(reweight_jax.inverse_weights(class_losses, present, prior=jnp.ones(3)), float).round(4))
    [2.5   0.625 1.   ]
    >>> print(np.asarray(reweight_jax.inverse_weights(class_losses, present, prior=jnp.ones(3),
    ...                                             alpha=1.0), float).round(4))
    [1.3 0.7 1. ]
  """
  class_losses = check_floating(class_losses, 1, "class_losses")
  num_classes = class_losses.shape[0]
  present = check_class_mask(present, num_classes, "present")
  prior = check_class_vector(prior, num_classes, "prior")
  check_alpha(alpha)
  if not eps > 0:
    raise ValueError(f"eps: expected ε > 0, got {eps}.")
  return closed_form_weights(class_losses, present, prior, alpha, eps)
