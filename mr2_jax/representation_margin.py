"""MR2 representation margin ℓ_s̄ (MR2 spec, 'Representation margin')."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mr2_jax import class_stats as class_stats_lib
from mr2_jax import validation
from mr2_jax.class_stats import ClassStats

Array = Any


def mean_class_deviation(stats: ClassStats) -> jax.Array:
  """s̄ = mean over seen classes k of V_k (0 when no class is seen). MR2 spec, 'Representation margin'."""
  stats = jax.lax.stop_gradient(stats)
  num_seen = jnp.sum(stats.seen)
  total = jnp.sum(jnp.where(stats.seen, stats.mean_sq_deviation, 0.0))
  return total / jnp.maximum(num_seen, 1).astype(total.dtype)


def representation_margin_loss(features: Array, labels: Array, s_bar: Array, *,
                               temperature: float = 1.0, axis_name: str | None = None,
                               where: Array | None = None, num_classes: int | None = None
                               ) -> jax.Array:
  """Per-anchor representation margin. MR2 spec, 'Representation margin'.

      ℓ_s̄(x_i) = log(1 + Σ_{j ≠ i, y_j = y_i} exp((‖φ_i − φ_j‖₂² − 2 s̄) / τ))

  Positives are the other examples of the anchor's class in the (global) batch; an anchor with no
  positive gives 0. Computed as a log-sum-exp that includes the implicit 0 term, so neither the value
  nor the gradient overflows for large feature norms. Distances are taken between features centred on
  their (stop-gradient) batch class mean: pairs are same-class, so the value is unchanged, and the
  Gram-matrix form ‖u‖² + ‖v‖² − 2⟨u, v⟩ does not lose precision to large norms. φ is not detached.

  Args:
    features: float [B, d] features φ (local batch).
    labels: int [B] labels in [0, K).
    s_bar: scalar s̄ (treated as a constant), e.g. `mean_class_deviation(stats)`.
    temperature: τ > 0 (1 in the paper form; 10·d in the released-code form).
    axis_name: data-parallel axis; positives come from the features all-gathered over it (gradients
      flow back to the device that owns each feature).
    where: optional bool [B]; masked rows are neither anchors (loss 0) nor positives.
    num_classes: K, to range-check labels against [0, K); when None, labels need only be ≥ 0
      (positives are matched by label equality, so K is not otherwise needed).

  Returns:
    float [B] per-anchor losses (the caller reduces them).
  """
  features = validation.check_floating(features, 2, "features")
  if not temperature > 0:
    raise ValueError(f"temperature: expected τ > 0, got {temperature}.")
  if num_classes is None:
    num_classes = int(jnp.iinfo(jnp.int32).max)
  features, labels, valid = class_stats_lib.check_stats_inputs(features, labels, num_classes, where)
  s_bar = jnp.asarray(s_bar, features.dtype)
  if s_bar.ndim != 0:
    raise ValueError(f"s_bar: expected a scalar, got shape {s_bar.shape}.")
  s_bar = jax.lax.stop_gradient(s_bar)

  batch = labels.shape[0]
  if axis_name is None:
    all_features, all_labels, all_valid, anchor_offset = features, labels, valid, 0
  else:
    # Positives come from the global batch. Only this all-gather crosses devices: the class means
    # used for centring are computed here from the gathered rows (no psum), and gradients flow back
    # through the gather to the device that owns each row.
    all_features = jax.lax.all_gather(features, axis_name, tiled=True)
    all_labels = jax.lax.all_gather(labels, axis_name, tiled=True)
    all_valid = jax.lax.all_gather(valid, axis_name, tiled=True)
    anchor_offset = jax.lax.axis_index(axis_name) * batch
  slots, class_means, _, _ = class_stats_lib.batch_class_moments(
      jax.lax.stop_gradient(all_features), all_labels, all_valid, num_classes)
  anchor_slot = jax.lax.dynamic_slice_in_dim(slots.slot, anchor_offset, batch)
  centred = jnp.where(valid[:, None], features - class_means[anchor_slot], 0.0)
  all_centred = jnp.where(all_valid[:, None], all_features - class_means[slots.slot], 0.0)

  sq_norm_anchor = jnp.sum(jnp.square(centred), axis=-1)
  sq_norm_all = jnp.sum(jnp.square(all_centred), axis=-1)
  sq_dist = sq_norm_anchor[:, None] + sq_norm_all[None, :] - 2.0 * centred @ all_centred.T
  sq_dist = jnp.maximum(sq_dist, 0.0)
  positive = (anchor_slot[:, None] == slots.slot[None, :]) & valid[:, None] & all_valid[None, :]
  anchor_index = jnp.arange(batch) + anchor_offset
  positive &= anchor_index[:, None] != jnp.arange(all_labels.shape[0])[None, :]

  exponent = (sq_dist - 2.0 * s_bar) / temperature
  # log(1 + Σ_j e^{x_j}) as a log-sum-exp over {0} ∪ {x_j}; masked terms are replaced before exp
  # (double-where) so their gradient is exactly 0 rather than 0·inf.
  shift = jax.lax.stop_gradient(
      jnp.maximum(jnp.max(jnp.where(positive, exponent, -jnp.inf), axis=-1), 0.0))
  terms = jnp.where(positive, jnp.exp(jnp.where(positive, exponent, 0.0) - shift[:, None]), 0.0)
  loss = shift + jnp.log(jnp.exp(-shift) + jnp.sum(terms, axis=-1))
  # An out-of-range label (possible only under tracing) gives NaN, never a silently dropped anchor.
  out_of_range = validation.check_where(where, batch) & ~((labels >= 0) & (labels < num_classes))
  return jnp.where(valid, loss, jnp.where(out_of_range, jnp.nan, 0.0))
