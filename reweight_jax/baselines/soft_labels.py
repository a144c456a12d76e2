r"""Soft (mixed) labels: the cross-entropy against soft targets and GLMC's mixed, weighted targets.

Du et al., CVPR 2023, arXiv 2305.08661 (reference code `ynu-yangpeng/GLMC`):
:math:`y = \lambda e_a + (1 - \lambda) e_b` and its class-weighted form
:math:`y^w = \lambda v_a e_a + (1 - \lambda) v_b e_b`, trained with the cross-entropy against soft
targets. Device side (jittable).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import take_class_values
from mr2_reweight_core.checks import unit_scalar_or_nan


def soft_cross_entropy(logits: ArrayLike, targets: ArrayLike, *, where: ArrayLike | None = None
                       ) -> jax.Array:
  r"""Per-example cross-entropy against soft targets [B].

  The ce of Du et al., CVPR 2023, arXiv 2305.08661, against mixed (and weighted) targets:

  .. math::

      \mathrm{ce}(z_i, t_i) = -\sum_k t_{ik} \log \operatorname{softmax}(z_i)_k

  with the stable log-softmax (`jax.nn.log_softmax`); a term with t_ik = 0 is 0 even where
  z_ik = −inf. Targets need not sum to 1 (GLMC's y^w does not). Computed in at least float32.

  B = 0: an empty [0]. K = 1: 0 on every row (a log-softmax over one class is 0).

  Args:
    logits: [B, K] floating.
    targets: [B, K] floating (e.g. `mixed_targets`).
    where: optional bool [B]; False marks padding, which gives 0 and no gradient (its logits and
      targets may be anything, NaN included).

  Returns:
    float [B]; NaN for a row whose targets hold NaN (a bad label under `jit`).

  Raises:
    ValueError: logits not rank 2, targets of another shape, a `where` of another shape.
    TypeError: non-floating logits or targets.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    >>> targets = jnp.array([[0.7, 0.3, 0.0], [0.0, 0.0, 1.0]])
    >>> print(np.asarray(reweight_jax.baselines.soft_cross_entropy(logits, targets), float).round(4))
    [0.7698 1.0986]
  """
  logits = check_floating(logits, 2, "logits")
  targets = check_floating(targets, 2, "targets")
  if targets.shape != logits.shape:
    raise ValueError(f"targets: expected the shape {logits.shape} of logits, got "
                     f"{targets.shape}.")
  real = check_where(where, logits.shape[0])
  dtype = jnp.promote_types(jnp.promote_types(logits.dtype, targets.dtype), jnp.float32)
  logits = jnp.where(real[:, None], logits, 0).astype(dtype)
  targets = jnp.where(real[:, None], targets, 0).astype(dtype)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  terms = jnp.where(targets == 0, 0, targets * log_probs)
  return jnp.where(real, -jnp.sum(terms, axis=-1), 0)


def mixed_targets(labels_a: ArrayLike, labels_b: ArrayLike, lam: ArrayLike, num_classes: int,
                  class_weights: ArrayLike | None = None, *, where: ArrayLike | None = None
                  ) -> jax.Array:
  r"""GLMC's mixed targets [B, K] (Du et al., CVPR 2023, arXiv 2305.08661):

  .. math::

      y_i = \lambda e_{a_i} + (1 - \lambda) e_{b_i}, \qquad
      y^w_i = \lambda v_{a_i} e_{a_i} + (1 - \lambda) v_{b_i} e_{b_i},

  y with `class_weights` None and y^w with `class_weights` v, used for both the mixup and the CutMix
  pass (GLMC's CutMix targets use λ, not the clipped box's area). Without weights each row sums
  to 1. `class_weights` enter as given, so a caller passing weights that carry a gradient (the
  inverse reweighting's ŵ under gradient flow, `mixed_inverse_reweighted_loss`) keeps it.

  B = 0: an empty [0, K]. K = 1: (v_0,) on every real row ((1,) without weights).

  Args:
    labels_a: int [B] labels of the instance-balanced rows, in [0, K).
    labels_b: int [B] labels of the paired re-balanced rows, in [0, K).
    lam: scalar λ in [0, 1] (eagerly checked; NaN targets under `jit` when outside).
    num_classes: K, the number of classes.
    class_weights: optional [K] v (e.g. `glmc_class_weights`).
    where: optional bool [B]; False marks padding, whose targets are 0 and whose labels are never
      checked (they may be anything, eagerly too).

  Returns:
    float [B, K] (float32, or the weights' dtype if wider). A real row with an out-of-range label
    a_i or b_i is NaN under `jit` (never a clipped class); eagerly it raises `ValueError`.

  Raises:
    ValueError: labels not [B] of one length, λ not a scalar or (eagerly) outside [0, 1],
      `class_weights` not [K], or (eagerly) a real row's label outside [0, K).
    TypeError: non-integer labels, non-floating weights.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.mixed_targets(jnp.array([0, 1]), jnp.array([2, 1]), 0.75, 3))
    [[0.75 0.   0.25]
     [0.   1.   0.  ]]
  """
  num_classes = check_num_classes(num_classes)
  labels_a = jnp.asarray(labels_a)
  ok_a = check_labels(labels_a, num_classes, "labels_a", where=where)
  labels_b = jnp.asarray(labels_b)
  check_batch_dim(labels_b, labels_a.shape[0], "labels_b", "labels_a")
  ok_b = check_labels(labels_b, num_classes, "labels_b", where=where)
  lam = unit_scalar_or_nan(lam, "lam", "mixing weight λ")
  dtype = lam.dtype
  if class_weights is None:
    weight_a = weight_b = jnp.ones(labels_a.shape, dtype)
  else:
    class_weights = check_class_vector(class_weights, num_classes, "class_weights")
    dtype = jnp.promote_types(dtype, class_weights.dtype)
    weight_a = take_class_values(class_weights, labels_a, ok_a).astype(dtype)
    weight_b = take_class_values(class_weights, labels_b, ok_b).astype(dtype)
  lam = lam.astype(dtype)
  onehot_a = jax.nn.one_hot(index_labels(labels_a, ok_a), num_classes, dtype=dtype)
  onehot_b = jax.nn.one_hot(index_labels(labels_b, ok_b), num_classes, dtype=dtype)
  targets = (lam * weight_a)[:, None] * onehot_a + ((1 - lam) * weight_b)[:, None] * onehot_b
  targets = jnp.where((ok_a & ok_b)[:, None], targets, jnp.nan)
  if where is None:
    return targets
  return jnp.where(check_where(where, labels_a.shape[0])[:, None], targets, 0)
