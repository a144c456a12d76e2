"""Baseline class weights and per-example losses for long-tailed classification.

REWEIGHT spec, 'Common baselines (canonical defaults)'. Losses follow optax: a pure function of
arrays returning per-example values [B] (0 where `where` is False); the reduction is the caller's.
Weight functions return [K] vectors with mean 1 over the classes. Convention shared by all of them
(the spec is silent): a class with zero training examples is treated as having one, so every weight
and logit adjustment stays finite.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import nan_where_negative
from mr2_reweight_core.cross_entropy import check_logits_and_labels as _check_logits_and_labels
from mr2_reweight_core.cross_entropy import finish_per_example as _finish
from mr2_reweight_core.cross_entropy import label_log_prob as _label_log_prob
from reweight_jax.priors import class_prior
from reweight_jax.priors import mean_normalize

Array = Any


# ---------------------------------------------------------------------------------------------------
# Class weights
# ---------------------------------------------------------------------------------------------------

def inverse_frequency_weights(class_counts: Array) -> jax.Array:
  """w_c ∝ 1 / max(n_c, 1), normalised to mean 1 (spec, 'Common baselines': inverse frequency)."""
  return class_prior(check_counts(class_counts, "class_counts"), "inv_freq")


def class_balanced_weights(class_counts: Array, beta: float = 0.9999) -> jax.Array:
  """Effective-number weights w_c ∝ (1 − β) / (1 − β^{n_c}), normalised to mean 1.

  Cui et al. 2019, "Class-Balanced Loss Based on Effective Number of Samples"; spec, 'Common baselines'
  (β = 0.9999). 1 − β^n is evaluated as −expm1(n·log β) with log β taken in double precision, because
  1 − β is not representable to float32 accuracy for β close to 1.

  Args:
    class_counts: [K] non-negative training-set class counts n_c.
    beta: Python float β in [0, 1). β = 0 gives uniform weights.
  """
  class_counts = check_counts(class_counts, "class_counts")
  beta = float(beta)
  if not 0 <= beta < 1:
    raise ValueError(f"beta: expected 0 ≤ β < 1, got {beta}.")
  if beta == 0:
    return nan_where_negative(jnp.ones_like(class_counts), class_counts)
  effective_num = -jnp.expm1(jnp.maximum(class_counts, 1.0) * math.log(beta))
  return nan_where_negative(mean_normalize((1 - beta) / effective_num), class_counts)


def ldam_drw_weights(class_counts: Array, epoch: Array, *, drw_epoch: int = 160,
                     beta: float = 0.9999) -> jax.Array:
  """Deferred re-weighting (DRW) for LDAM: uniform before `drw_epoch`, class-balanced from it on.

  Cao et al. 2019, "Learning Imbalanced Datasets with Label-Distribution-Aware Margin Loss"; spec,
  'Common baselines' ("DRW switches on class-balanced weights at epoch 160"). `epoch` may be traced.

  Returns:
    [K] weights to pass as `class_weights` to `ldam_loss`.
  """
  balanced = class_balanced_weights(class_counts, beta)
  return jnp.where(jnp.asarray(epoch) >= drw_epoch, balanced, jnp.ones_like(balanced))


# ---------------------------------------------------------------------------------------------------
# Per-example losses
# ---------------------------------------------------------------------------------------------------

def focal_loss(logits: Array, labels: Array, *, gamma: float = 1.0,
               class_weights: Array | None = None, where: Array | None = None) -> jax.Array:
  """Focal loss w_y·(1 − p_y)^γ · CE, per example [B].

  Lin et al. 2017, "Focal Loss for Dense Object Detection"; spec, 'Common baselines' (γ = 1 or 2;
  default 1 as in the LDAM-DRW CIFAR-LT code). 1 − p_y is computed as −expm1(log p_y).

  Args:
    logits: [B, K]. labels: int [B]. gamma: focusing exponent γ ≥ 0.
    class_weights: optional [K] per-class weights w (1 if None).
    where: optional bool [B].
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  log_prob = _label_log_prob(logits, labels, in_range)
  modulator = jnp.power(-jnp.expm1(log_prob), gamma)
  return _finish(-modulator * log_prob, labels, in_range, where, class_weights, logits.shape[1])


def ldam_margins(class_counts: Array, max_margin: float = 0.5) -> jax.Array:
  """Δ_c = C / max(n_c, 1)^{1/4}, with C such that max_c Δ_c = `max_margin` (spec: 0.5)."""
  class_counts = check_counts(class_counts, "class_counts")
  raw = jnp.power(jnp.maximum(class_counts, 1.0), -0.25)
  return nan_where_negative(raw * (max_margin / jnp.max(raw)), class_counts)


def ldam_loss(logits: Array, labels: Array, class_counts: Array, *, max_margin: float = 0.5,
              scale: float = 30.0, class_weights: Array | None = None,
              where: Array | None = None) -> jax.Array:
  """LDAM: CE on s·(z − Δ_y·e_y), per example [B], optionally weighted by w_y (DRW).

  Cao et al. 2019; spec, 'Common baselines': "subtract margin Δ_c = C / n_c^{1/4} (max margin 0.5)
  from the true-class logit, scale s = 30". Pass `class_weights=ldam_drw_weights(...)` for LDAM-DRW.
  (The original code reduces a weighted batch by Σ w_y ℓ / Σ w_y; the reduction is the caller's.)

  Args:
    logits: [B, K] (normalised-feature logits in the original recipe). labels: int [B].
    class_counts: [K] training-set class counts n_c.
    max_margin: largest margin (that of the rarest class). scale: s.
    class_weights: optional [K]. where: optional bool [B].
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  margins = check_class_vector(ldam_margins(class_counts, max_margin), logits.shape[1],
                               "class_counts")
  one_hot = jax.nn.one_hot(labels, logits.shape[1], dtype=logits.dtype)
  shifted = logits - one_hot * margins.astype(logits.dtype)
  per_example = -_label_log_prob(scale * shifted, labels, in_range)
  return _finish(per_example, labels, in_range, where, class_weights, logits.shape[1])


def logit_adjusted_loss(logits: Array, labels: Array, class_counts: Array, *, tau: float = 1.0,
                        where: Array | None = None) -> jax.Array:
  """Logit-adjusted CE: CE(z + τ·log π, y), π_c = max(n_c, 1) / Σ_k max(n_k, 1), per example [B].

  Menon et al. 2021, "Long-tail learning via logit adjustment"; spec, 'Common baselines' (τ = 1).
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  class_counts = check_class_vector(check_counts(class_counts, "class_counts"), logits.shape[1],
                                    "class_counts")
  clamped = jnp.maximum(class_counts, 1.0)
  log_prior = nan_where_negative(jnp.log(clamped / jnp.sum(clamped)), class_counts)
  per_example = -_label_log_prob(logits + tau * log_prior.astype(logits.dtype), labels, in_range)
  return _finish(per_example, labels, in_range, where, None, logits.shape[1])


def balanced_softmax_loss(logits: Array, labels: Array, class_counts: Array, *,
                          where: Array | None = None) -> jax.Array:
  """Balanced Softmax: CE(z + log n_c, y), per example [B].

  Ren et al. 2020, "Balanced Meta-Softmax for Long-Tailed Visual Recognition"; spec, 'Common
  baselines'. Equal to `logit_adjusted_loss` with τ = 1 (log n_c and log π_c differ by a constant that
  the softmax cancels); kept under its own name because the literature reports it separately.
  """
  return logit_adjusted_loss(logits, labels, class_counts, tau=1.0, where=where)


def ib_loss(logits: Array, labels: Array, features: Array, *, alpha: float = 1000.0,
            epsilon: float = 1e-3, class_weights: Array | None = None,
            where: Array | None = None) -> jax.Array:
  """Influence-balanced loss: w_y·CE·α / (‖softmax(z) − e_y‖₁·‖h‖₁ + ε), per example [B].

  Park et al. 2021, "Influence-Balanced Loss for Imbalanced Visual Classification"; spec, 'Common
  baselines' (α = 1000, switched on from epoch 100 — before that, train with plain CE). As in the
  original code, gradients flow through the influence factor, and ε = 1e-3; the original passes
  inverse-frequency `class_weights`.

  Args:
    logits: [B, K]. labels: int [B]. features: [B, d] penultimate features h.
    alpha: α. epsilon: ε. class_weights: optional [K]. where: optional bool [B].
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  features = check_floating(features, 2, "features")
  check_batch_dim(features, labels.shape[0], "features")
  features = jnp.where(check_where(where, labels.shape[0])[:, None], features, 0)
  one_hot = jax.nn.one_hot(labels, logits.shape[1], dtype=logits.dtype)
  grad_norm = jnp.sum(jnp.abs(jax.nn.softmax(logits, axis=-1) - one_hot), axis=-1)
  feature_norm = jnp.sum(jnp.abs(features), axis=-1).astype(logits.dtype)
  influence = alpha / (grad_norm * feature_norm + epsilon)
  per_example = -_label_log_prob(logits, labels, in_range) * influence
  return _finish(per_example, labels, in_range, where, class_weights, logits.shape[1])
