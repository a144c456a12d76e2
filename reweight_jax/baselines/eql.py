"""Equalization loss, softmax form (Tan et al., "Equalization Loss for Long-Tailed
Object Recognition", CVPR 2020, arXiv 2003.05176; the softmax form of `BagofTricks-LT`; one of MR2's
comparison methods).

The rare-class mask is an input (`eql_rare_classes` gives the frequency rule), and the Bernoulli
draws β are an input too (`eql_dropped` draws them from a PRNG key per step), so the loss itself is
a deterministic function of arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.cross_entropy import check_logits_and_labels as _check_logits_and_labels
from mr2_reweight_core.cross_entropy import finish_per_example as _finish
from mr2_reweight_core.cross_entropy import label_log_prob as _label_log_prob


def eql_rare_classes(class_counts: ArrayLike, lam: float = 5e-3) -> jax.Array:
  r"""The rare classes T_λ(f_k), bool [K] (λ = 5e-3, BagofTricks-LT):

  .. math::

      T_\lambda(f_k) = \mathbf{1}[f_k < \lambda], \qquad f_k = n_k / N

  Tan et al., CVPR 2020, arXiv 2003.05176: the threshold function of the frequency of each class.

  K = 1: (False,): the one class has frequency 1, never below λ.

  Args:
    class_counts: [K] non-negative training-set class counts n_k.
    lam: the frequency threshold λ.

  Returns:
    bool [K], True for the rare classes.

  Raises:
    ValueError: counts not rank 1 or (eagerly) negative.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.eql_rare_classes(jnp.array([900, 99, 1]), lam=0.05))
    [False False  True]
  """
  counts = check_counts(class_counts, "class_counts")
  return counts / jnp.maximum(jnp.sum(counts), 1.0) < lam


def eql_dropped(key: jax.Array, batch: int, num_classes: int, gamma: float = 0.9) -> jax.Array:
  """β_ik ~ Bernoulli(γ), iid per example and class: bool [B, K] (γ = 0.9).

  Tan et al., CVPR 2020, arXiv 2003.05176: the random drop of the softmax form.

  B = 0: an empty [0, K]. K = 1: a [B, 1] draw as for any K.

  Args:
    key: a PRNG key.
    batch: B, the number of rows in the batch.
    num_classes: K, the number of classes.
    gamma: the drop probability γ in [0, 1].

  Returns:
    bool [B, K].

  Raises:
    ValueError: γ outside [0, 1].

  Examples:
    >>> import jax
    >>> import reweight_jax
    >>> dropped = reweight_jax.baselines.eql_dropped(jax.random.key(0), 4, 3, gamma=0.9)
    >>> print(dropped.shape, dropped.dtype)
    (4, 3) bool
  """
  if not 0 <= gamma <= 1:
    raise ValueError(f"gamma: expected a probability in [0, 1], got {gamma}.")
  return jax.random.bernoulli(key, gamma, (batch, num_classes))


def eql_dropped_at(key: jax.Array, rows: ArrayLike, num_classes: int, gamma: float = 0.9
                   ) -> jax.Array:
  """β_ik ~ Bernoulli(γ) drawn per example from `fold_in(key, rows_i)`: bool [B, K].

  `rows` are the examples' positions in the global batch, so each example's draws do not depend on
  how the batch is split over devices (data parallel equals one device, draw for draw). The draws
  of Tan et al., CVPR 2020, arXiv 2003.05176.

  B = 0 (no rows): an empty [0, K]. K = 1: a [B, 1] draw as for any K.

  Args:
    key: a PRNG key, the same on every device.
    rows: int [B] global-batch positions of the local rows.
    num_classes: K, the number of classes.
    gamma: the drop probability γ in [0, 1].

  Returns:
    bool [B, K].

  Raises:
    ValueError: γ outside [0, 1], rows not an int [B] vector.

  Examples:
    >>> import jax
    >>> import jax.numpy as jnp
    >>> import reweight_jax
    >>> key = jax.random.key(0)
    >>> whole = reweight_jax.baselines.eql_dropped_at(key, jnp.arange(4), 3)
    >>> half = reweight_jax.baselines.eql_dropped_at(key, jnp.arange(2, 4), 3)  # rows 2, 3 on another device
    >>> print(bool((whole[2:] == half).all()))
    True
  """
  if not 0 <= gamma <= 1:
    raise ValueError(f"gamma: expected a probability in [0, 1], got {gamma}.")
  rows = jnp.asarray(rows)
  if rows.ndim != 1 or not jnp.issubdtype(rows.dtype, jnp.integer):
    raise ValueError(f"rows: expected int [B] positions, got {rows.dtype} {rows.shape}.")
  return jax.vmap(lambda row: jax.random.bernoulli(jax.random.fold_in(key, row), gamma,
                                                   (num_classes,)))(rows)


def eql_loss(logits: ArrayLike, labels: ArrayLike, rare: ArrayLike, dropped: ArrayLike, *,
             where: ArrayLike | None = None) -> jax.Array:
  r"""Softmax equalization loss per example [B].

  Tan et al., CVPR 2020, arXiv 2003.05176, in the softmax form:

  .. math::

      \ell_i = -z_{i,y_i} + \log \sum_k \tilde w_{ik} \exp z_{ik}, \qquad
      \tilde w_{ik} = 1 - \beta_{ik}\, T_k \bigl(1 - \mathbf{1}[k = y_i]\bigr)

  i.e. cross-entropy with the logits of rare negative classes dropped where β_ik = 1 (w̃ = 0 is a
  −∞ logit; the label's own logit is never dropped, so the log-sum-exp is shifted by a finite
  maximum — the reference exponentiates without a shift). Masked logits get zero gradient.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    rare: bool [K], T_k (e.g. `eql_rare_classes(counts)`).
    dropped: bool [B, K], β (e.g. `eql_dropped(key, B, K)`).
    where: optional bool [B]; padding rows give 0.

  Returns:
    float [B]; NaN for an out-of-range label under `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], `rare` not bool [K], `dropped` not bool [B, K],
      or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> rare = jnp.array([False, False, True])
    >>> dropped = jnp.ones((4, 3), bool)  # β_ik = 1: every rare negative logit is dropped
    >>> print(np.asarray(reweight_jax.baselines.eql_loss(logits, labels, rare, dropped), float).round(4))
    [0.1269 0.4741 0.0949 0.3133]
    >>> print(np.asarray(reweight_jax.cross_entropy_loss(logits, labels), float).round(4))
    [0.1698 0.6803 0.0949 0.4644]
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  batch, num_classes = logits.shape
  rare = jnp.asarray(rare)
  if rare.shape != (num_classes,) or rare.dtype != jnp.bool_:
    raise ValueError(f"rare: expected a bool mask of shape {(num_classes,)}, got {rare.dtype} "
                     f"{rare.shape}.")
  dropped = jnp.asarray(dropped)
  if dropped.shape != (batch, num_classes) or dropped.dtype != jnp.bool_:
    raise ValueError(f"dropped: expected a bool array of shape {(batch, num_classes)}, got "
                     f"{dropped.dtype} {dropped.shape}.")
  is_label = jnp.arange(num_classes)[None, :] == labels[:, None]
  masked = dropped & rare[None, :] & ~is_label
  # −∞ for the dropped logits: their exp is 0 and their gradient 0 (the where selects a constant).
  kept = jnp.where(masked, -jnp.inf, logits)
  per_example = -_label_log_prob(kept, labels, in_range)
  return _finish(per_example, labels, in_range, where, None, num_classes)
