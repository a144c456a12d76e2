"""Equalization loss, softmax form (COMPARISONS spec, 'EQL, softmax form'; Tan et al. CVPR 2020).

The rare-class mask is an input (`eql_rare_classes` gives the frequency rule), and the Bernoulli
draws β are an input too (`eql_dropped` draws them from a PRNG key per step), so the loss itself is
a deterministic function of arrays.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.cross_entropy import check_logits_and_labels as _check_logits_and_labels
from mr2_reweight_core.cross_entropy import finish_per_example as _finish
from mr2_reweight_core.cross_entropy import label_log_prob as _label_log_prob

Array = Any


def eql_rare_classes(class_counts: Array, lam: float = 5e-3) -> jax.Array:
  """T_λ(f_k) = 1[f_k < λ], f_k = n_k / N: bool [K] (λ = 5e-3, BagofTricks-LT)."""
  counts = check_counts(class_counts, "class_counts")
  return counts / jnp.maximum(jnp.sum(counts), 1.0) < lam


def eql_dropped(key: jax.Array, batch: int, num_classes: int, gamma: float = 0.9) -> jax.Array:
  """β_ik ~ Bernoulli(γ), iid per example and class: bool [B, K] (γ = 0.9)."""
  if not 0 <= gamma <= 1:
    raise ValueError(f"gamma: expected a probability in [0, 1], got {gamma}.")
  return jax.random.bernoulli(key, gamma, (batch, num_classes))


def eql_dropped_at(key: jax.Array, rows: Array, num_classes: int, gamma: float = 0.9) -> jax.Array:
  """β_ik ~ Bernoulli(γ) drawn per example from `fold_in(key, rows_i)`: bool [B, K].

  `rows` are the examples' positions in the global batch, so each example's draws do not depend on
  how the batch is split over devices (data parallel equals one device, draw for draw)."""
  if not 0 <= gamma <= 1:
    raise ValueError(f"gamma: expected a probability in [0, 1], got {gamma}.")
  rows = jnp.asarray(rows)
  if rows.ndim != 1 or not jnp.issubdtype(rows.dtype, jnp.integer):
    raise ValueError(f"rows: expected int [B] positions, got {rows.dtype} {rows.shape}.")
  return jax.vmap(lambda row: jax.random.bernoulli(jax.random.fold_in(key, row), gamma,
                                                   (num_classes,)))(rows)


def eql_loss(logits: Array, labels: Array, rare: Array, dropped: Array, *,
             where: Array | None = None) -> jax.Array:
  """Softmax equalization loss per example [B]:

      ℓ_i = −z_{i,y_i} + log Σ_k w̃_ik · exp z_ik,   w̃_ik = 1 − β_ik · T_k · (1 − 1[k = y_i])

  i.e. cross-entropy with the logits of rare negative classes dropped where β_ik = 1 (w̃ = 0 is a
  −∞ logit; the label's own logit is never dropped, so the log-sum-exp is shifted by a finite
  maximum — the reference exponentiates without a shift). Masked logits get zero gradient.

  Args:
    logits: [B, K]. labels: int [B] in [0, K).
    rare: bool [K], T_k (e.g. `eql_rare_classes(counts)`).
    dropped: bool [B, K], β (e.g. `eql_dropped(key, B, K)`).
    where: optional bool [B]; padding rows give 0.

  Returns:
    float [B]; NaN for an out-of-range label under `jit` (never a clipped class).
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
