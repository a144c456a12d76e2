"""Baseline class weights and per-example losses for long-tailed classification.

The baselines of Wang et al., ICML 2026, arXiv 2605.10047, with their papers' default settings.
Losses follow optax: a pure function of arrays returning per-example values [B] (0 where `where` is
False); the reduction is the caller's. Weight functions return [K] vectors with mean 1 over the
classes. Convention shared by all of them (the papers are silent): a class with zero training
examples is treated as having one, so every weight and logit adjustment stays finite.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

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


# ---------------------------------------------------------------------------------------------------
# Class weights
# ---------------------------------------------------------------------------------------------------

def inverse_frequency_weights(class_counts: ArrayLike) -> jax.Array:
  r"""Inverse-frequency class weights, normalised to mean 1:

  .. math::

      w_c \propto 1 / \max(n_c, 1)

  The inverse-frequency baseline of Wang et al., ICML 2026, arXiv 2605.10047 (and the class
  weights of the IB loss, Park et al., ICCV 2021, arXiv 2110.02444).

  K = 1: (1,) (weights have mean 1).

  Args:
    class_counts: [K] non-negative training-set class counts n_c (integer or floating); a class
      with no example (n_c = 0) gets the weight of a one-example class (the module's convention).

  Returns:
    float32 [K] weights with mean 1.

  Raises:
    ValueError: counts not rank 1 or (eagerly) negative.
    TypeError: counts neither integer nor floating.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.baselines.inverse_frequency_weights(jnp.array([100, 10, 1])), float).round(4))
    [0.027  0.2703 2.7027]
  """
  return class_prior(check_counts(class_counts, "class_counts"), "inv_freq")


def class_balanced_weights(class_counts: ArrayLike, beta: float = 0.9999) -> jax.Array:
  r"""Effective-number class weights, normalised to mean 1:

  .. math::

      w_c \propto \frac{1 - \beta}{1 - \beta^{\max(n_c, 1)}}

  Cui et al., "Class-Balanced Loss Based on Effective Number of Samples", CVPR 2019, arXiv
  1901.05555 (β = 0.9999 for CIFAR-LT). :math:`1 - \beta^n` is evaluated as
  :math:`-\operatorname{expm1}(n \log \beta)` with log β taken in double precision, because 1 − β is
  not representable to float32 accuracy for β close to 1.

  K = 1: (1,) (weights have mean 1).

  Args:
    class_counts: [K] non-negative training-set class counts n_c; a class with no example
      (n_c = 0) gets the weight of a one-example class, as in every weight of this module.
    beta: Python float β in [0, 1). β = 0 gives uniform weights.

  Returns:
    float32 [K] weights with mean 1.

  Raises:
    ValueError: β outside [0, 1), counts not rank 1 or (eagerly) negative.
    TypeError: counts neither integer nor floating.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.baselines.class_balanced_weights(jnp.array([100, 10, 1]), 0.99), float).round(4))
    [0.0422 0.28   2.6777]
  """
  class_counts = check_counts(class_counts, "class_counts")
  beta = float(beta)
  if not 0 <= beta < 1:
    raise ValueError(f"beta: expected 0 ≤ β < 1, got {beta}.")
  if beta == 0:
    return nan_where_negative(jnp.ones_like(class_counts), class_counts)
  effective_num = -jnp.expm1(jnp.maximum(class_counts, 1.0) * math.log(beta))
  return nan_where_negative(mean_normalize((1 - beta) / effective_num), class_counts)


def ldam_drw_weights(class_counts: ArrayLike, epoch: ArrayLike, *, drw_epoch: int = 160,
                     beta: float = 0.9999) -> jax.Array:
  """Deferred re-weighting (DRW) for LDAM: uniform before `drw_epoch`, class-balanced from it on.

  Cao et al., "Learning Imbalanced Datasets with Label-Distribution-Aware Margin Loss", NeurIPS
  2019, arXiv 1906.07413 (deferred re-weighting with class-balanced weights from epoch 160 of 200).

  K = 1: (1,) before and after the DRW epoch.

  Args:
    class_counts: [K] non-negative training-set class counts n_c.
    epoch: the current epoch (may be traced).
    drw_epoch: the first epoch with class-balanced weights.
    beta: β of `class_balanced_weights`.

  Returns:
    [K] weights to pass as `class_weights` to `ldam_loss`.

  Raises:
    ValueError: β outside [0, 1), counts not rank 1 or (eagerly) negative.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> counts = jnp.array([100, 10, 1])
    >>> print(reweight_jax.baselines.ldam_drw_weights(counts, epoch=10, drw_epoch=160))
    [1. 1. 1.]
    >>> print(np.asarray(reweight_jax.baselines.ldam_drw_weights(counts, epoch=160, beta=0.99), float).round(4))
    [0.0422 0.28   2.6777]
  """
  balanced = class_balanced_weights(class_counts, beta)
  return jnp.where(jnp.asarray(epoch) >= drw_epoch, balanced, jnp.ones_like(balanced))


# ---------------------------------------------------------------------------------------------------
# Per-example losses
# ---------------------------------------------------------------------------------------------------

def focal_loss(logits: ArrayLike, labels: ArrayLike, *, gamma: float = 1.0,
               class_weights: ArrayLike | None = None, where: ArrayLike | None = None) -> jax.Array:
  r"""Focal loss, per example [B]:

  .. math::

      w_y (1 - p_y)^\gamma\, \mathrm{CE}

  Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017, arXiv 1708.02002 (γ = 1 or 2;
  default 1 as in the LDAM-DRW CIFAR-LT code). :math:`1 - p_y` is computed as
  :math:`-\operatorname{expm1}(\log p_y)`.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    gamma: focusing exponent γ ≥ 0 (0 gives cross-entropy).
    class_weights: optional [K] per-class weights w (1 if None).
    where: optional bool [B]; False marks padding.

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], class_weights not [K], a `where` of another
      shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> print(np.asarray(reweight_jax.baselines.focal_loss(logits, labels, gamma=2.0), float).round(4))
    [0.0041 0.1657 0.0008 0.0641]
    >>> print(np.asarray(reweight_jax.baselines.focal_loss(logits, labels, gamma=0.0), float).round(4))  # γ = 0: CE
    [0.1698 0.6803 0.0949 0.4644]
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  log_prob = _label_log_prob(logits, labels, in_range)
  modulator = jnp.power(-jnp.expm1(log_prob), gamma)
  return _finish(-modulator * log_prob, labels, in_range, where, class_weights, logits.shape[1])


def ldam_margins(class_counts: ArrayLike, max_margin: float = 0.5) -> jax.Array:
  r"""LDAM's margins Δ_c, with C such that max_c Δ_c = `max_margin`:

  .. math::

      \Delta_c = C / \max(n_c, 1)^{1/4}

  Cao et al., NeurIPS 2019, arXiv 1906.07413 (the largest margin 0.5 in their CIFAR code).

  K = 1: (max_margin,).

  Args:
    class_counts: [K] non-negative training-set class counts n_c; a class with no example
      (n_c = 0) gets the margin of a one-example class, `max_margin` (the module's convention).
    max_margin: the rarest class's margin.

  Returns:
    float32 [K] margins.

  Raises:
    ValueError: counts not rank 1 or (eagerly) negative.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.baselines.ldam_margins(jnp.array([10000, 625, 16])), float).round(4))
    [0.1 0.2 0.5]
  """
  class_counts = check_counts(class_counts, "class_counts")
  raw = jnp.power(jnp.maximum(class_counts, 1.0), -0.25)
  return nan_where_negative(raw * (max_margin / jnp.max(raw)), class_counts)


def ldam_loss(logits: ArrayLike, labels: ArrayLike, class_counts: ArrayLike, *,
              max_margin: float = 0.5, scale: float = 30.0, class_weights: ArrayLike | None = None,
              where: ArrayLike | None = None) -> jax.Array:
  r"""LDAM loss, per example [B], optionally weighted by w_y (DRW):

  .. math::

      \mathrm{CE}\bigl(s\, (z - \Delta_y e_y),\ y\bigr)

  Cao et al., NeurIPS 2019, arXiv 1906.07413: the margin :math:`\Delta_c = C / n_c^{1/4}` (largest
  0.5) is subtracted from the true-class logit and the logits scaled by s = 30. Pass
  `class_weights=ldam_drw_weights(...)` for LDAM-DRW. (The original code reduces a weighted batch by
  :math:`\sum w_y \ell / \sum w_y`; the reduction is the caller's.)

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K] (normalised-feature logits in the original recipe).
    labels: int [B] in [0, K).
    class_counts: [K] training-set class counts n_c.
    max_margin: largest margin (that of the rarest class).
    scale: the logit scale s (30 in the paper's CIFAR recipe).
    class_weights: optional [K] weights w_y (DRW: `ldam_drw_weights`).
    where: optional bool [B]; False marks padding.

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], class_counts not [K], a `where` of another shape,
      or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> counts = jnp.array([100, 10, 1])
    >>> print(np.asarray(reweight_jax.baselines.ldam_loss(logits / 30, labels, counts), float).round(4))
    [ 3.1026  8.4094 12.6931  7.9096]
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  margins = check_class_vector(ldam_margins(class_counts, max_margin), logits.shape[1],
                               "class_counts")
  one_hot = jax.nn.one_hot(labels, logits.shape[1], dtype=logits.dtype)
  shifted = logits - one_hot * margins.astype(logits.dtype)
  per_example = -_label_log_prob(scale * shifted, labels, in_range)
  return _finish(per_example, labels, in_range, where, class_weights, logits.shape[1])


def logit_adjusted_loss(logits: ArrayLike, labels: ArrayLike, class_counts: ArrayLike, *,
                        tau: float = 1.0, where: ArrayLike | None = None) -> jax.Array:
  r"""Logit-adjusted cross-entropy, per example [B]:

  .. math::

      \mathrm{CE}(z + \tau \log \pi,\ y), \qquad \pi_c = \frac{\max(n_c, 1)}{\sum_k \max(n_k, 1)}

  Menon et al., "Long-tail learning via logit adjustment", ICLR 2021, arXiv 2007.07314 (the
  logit-adjusted loss, τ = 1).

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    class_counts: [K] non-negative training-set class counts n_c (they give the prior π).
    tau: τ ≥ 0 (0 gives cross-entropy).
    where: optional bool [B]; False marks padding.

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], class_counts not [K] or (eagerly) negative,
      a `where` of another shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> counts = jnp.array([100, 10, 1])
    >>> print(np.asarray(reweight_jax.baselines.logit_adjusted_loss(logits, labels, counts, tau=1.0), float).round(4))
    [0.0139 1.9604 1.8682 1.5478]
  """
  logits, labels, in_range = _check_logits_and_labels(logits, labels, where)
  class_counts = check_class_vector(check_counts(class_counts, "class_counts"), logits.shape[1],
                                    "class_counts")
  clamped = jnp.maximum(class_counts, 1.0)
  log_prior = nan_where_negative(jnp.log(clamped / jnp.sum(clamped)), class_counts)
  per_example = -_label_log_prob(logits + tau * log_prior.astype(logits.dtype), labels, in_range)
  return _finish(per_example, labels, in_range, where, None, logits.shape[1])


def balanced_softmax_loss(logits: ArrayLike, labels: ArrayLike, class_counts: ArrayLike, *,
                          where: ArrayLike | None = None) -> jax.Array:
  r"""Balanced Softmax, per example [B]:

  .. math::

      \mathrm{CE}(z + \log n_c,\ y)

  Ren et al., "Balanced Meta-Softmax for Long-Tailed Visual Recognition", NeurIPS 2020, arXiv
  2007.10740. Equal to `logit_adjusted_loss` with τ = 1 (log n_c and log π_c differ by a constant
  that the softmax cancels); kept under its own name because the literature reports it separately.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    class_counts: [K] non-negative training-set class counts n_c.
    where: optional bool [B]; False marks padding.

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], class_counts not [K] or (eagerly) negative,
      a `where` of another shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> counts = jnp.array([100, 10, 1])
    >>> print(np.asarray(reweight_jax.baselines.balanced_softmax_loss(logits, labels, counts), float).round(4))
    [0.0139 1.9604 1.8682 1.5478]
  """
  return logit_adjusted_loss(logits, labels, class_counts, tau=1.0, where=where)


def ib_loss(logits: ArrayLike, labels: ArrayLike, features: ArrayLike, *, alpha: float = 1000.0,
            epsilon: float = 1e-3, class_weights: ArrayLike | None = None,
            where: ArrayLike | None = None) -> jax.Array:
  r"""Influence-balanced loss, per example [B]:

  .. math::

      \frac{w_y\, \mathrm{CE}\, \alpha}{\lVert \operatorname{softmax}(z) - e_y \rVert_1\,
        \lVert h \rVert_1 + \epsilon}

  Park et al., "Influence-Balanced Loss for Imbalanced Visual Classification", ICCV 2021, arXiv
  2110.02444 (α = 1000, switched on from epoch 100 — before that, train with plain CE). As in the
  original code, gradients flow through the influence factor, and ε = 1e-3; the original passes
  inverse-frequency `class_weights`.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    features: float [B, d] penultimate features h.
    alpha: α, the loss scale.
    epsilon: ε in the denominator.
    class_weights: optional [K] weights w_y (inverse frequency in the original).
    where: optional bool [B]; False marks padding (its features may be anything).

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit` (never a clipped class).

  Raises:
    ValueError: logits not [B, K], labels not [B], features not [B, d], a `where` of another shape,
      or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> features = jnp.array([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0], [1.0, 1.0]])
    >>> print(np.asarray(reweight_jax.baselines.ib_loss(logits, labels, features, alpha=1.0), float).round(4))
    [0.5419 0.6885 0.2613 0.3123]
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
