r"""Global and Local Mixture Consistency cumulative learning.

Du et al., "Global and Local Mixture Consistency Cumulative Learning for Long-tailed Visual
Recognitions", CVPR 2023, arXiv 2305.08661; reference code `ynu-yangpeng/GLMC`
(`GLMC-2023/Trainer.py` and `utils/util.py`). Wang et al. (ICML 2026, arXiv 2605.10047) report the
inverse reweighting inside it (`mixed_inverse_reweighted_loss`).

One GLMC step sees two batches of B rows paired row by row: an instance-balanced one (a shuffled
epoch) with labels a and a re-balanced one (drawn with replacement,
:math:`P(\text{row}) \propto n_y^{-r}`, `glmc_rebalanced_indices`) with labels b, each with two
crops per image. With one λ per step, the global mixture (`mix_images`), the local mixture
(`cutmix_box`, `cutmix`), and the targets of both (`mixed_targets`, v = `glmc_class_weights`) are

.. math::

    \begin{aligned}
      x_g &= \lambda x^1_a + (1 - \lambda) x^1_b, \\
      x_l &= x^2_a \text{ with a box taken from } x^2_b, \\
      y &= \lambda e_a + (1 - \lambda) e_b, \\
      y^w &= \lambda v_a e_a + (1 - \lambda) v_b e_b,
    \end{aligned}

and the loss of the two forward passes (`glmc_loss`), with α_e from `glmc_alpha`:

.. math::

    L = \alpha_e L_\mathrm{bal} + (1 - \alpha_e) L_\mathrm{reb} + w_\mathrm{con} L_\mathrm{con},
    \qquad \alpha_e = 1 - (e / E)^2

λ is drawn by the caller, once per step and the same on every device: λ ~ Beta(1, 1) = U(0, 1), the
released code's actual draw (its `--beta 0.5` never reaches `GLMC_mixed`, a defect of the release;
there is no β option here). The CutMix targets use λ, not the fraction of the image the clipped box
actually replaces: that is the method's definition (as released), kept and not corrected.

This module holds GLMC's own terms: the re-balanced head's class weights, the consistency term, the
α schedule and the loss. The pieces it shares with other methods live in modules named for what
they are: the host-side re-balanced sampler in `reweight_jax.baselines.rebalanced_sampling`, the mixup and
CutMix image ops in `reweight_jax.baselines.image_mixing`, the soft-target cross-entropy and the mixed targets
in `reweight_jax.baselines.soft_labels` (every name is also `reweight_jax.baselines.<name>`).
Inference uses the re-balanced head fc_cb.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.checks import check_exponent
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_positive_int
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import nan_where_negative
from mr2_reweight_core.checks import unit_scalar_or_nan
from reweight_jax.baselines.soft_labels import mixed_targets
from reweight_jax.baselines.soft_labels import soft_cross_entropy

# ε of the cosine's norms, as torch's F.cosine_similarity (the reference's SimSiam loss).
_COSINE_EPS = 1e-8


class GLMCAux(NamedTuple):
  r"""The three terms of `glmc_loss`, each this device's share (as the loss: `lax.pmean` of a share
  is its value on the global batch).

  Attributes:
    balanced: :math:`L_\mathrm{bal}`, the mean of
      :math:`\mathrm{ce}(\mathrm{fc}(x_g), y) + \mathrm{ce}(\mathrm{fc}(x_l), y)`.
    rebalanced: :math:`L_\mathrm{reb}`, the mean of
      :math:`\mathrm{ce}(\mathrm{fc_{cb}}(x_g), y^w) + \mathrm{ce}(\mathrm{fc_{cb}}(x_l), y^w)`.
    consistency: :math:`L_\mathrm{con}`, the mean of
      :math:`-\cos(p_g, \operatorname{sg}(z_l)) - \cos(p_l, \operatorname{sg}(z_g))`.
  """
  balanced: jax.Array
  rebalanced: jax.Array
  consistency: jax.Array


def glmc_class_weights(class_counts: ArrayLike, exponent: float) -> jax.Array:
  r"""The re-balanced head's label weights (`Trainer.update_weight`), float32 [K].

  Du et al., CVPR 2023, arXiv 2305.08661, the weights of the re-balanced branch:

  .. math::

      v_c =
      \begin{cases}
        n_c^{-\ell_w} \,/\, \operatorname{mean}_{k:\, n_k > 0} n_k^{-\ell_w}
          & \text{for } n_c > 0, \\
        0 & \text{for } n_c = 0,
      \end{cases}

  so the weights average 1 over the classes that have training examples (over all K classes when
  every class has some, as in the reference). A class without examples never occurs as a label; it
  gets weight 0 and is left out of the mean (the reference would divide by :math:`0^{\ell_w}`).
  Computed in log space. ℓw = 0 gives 1 for every class with examples.

  K = 1: (1,) (weights have mean 1).

  Args:
    class_counts: [K] non-negative training counts n_c, at least one positive.
    exponent: ℓw, finite and ≥ 0 (`--label_weighting`: 1.2 for CIFAR-LT, 1 for ImageNet-LT).

  Returns:
    float32 [K]; NaN everywhere under `jit` when a count is negative or none is positive.

  Raises:
    ValueError: counts not rank 1, (eagerly) negative or all 0, ℓw negative or not finite.
    TypeError: counts neither integer nor floating, ℓw not a real scalar.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.baselines.glmc_class_weights(jnp.array([100, 10, 0]), 1.0), float).round(4))
    [0.1818 1.8182 0.    ]
  """
  counts = check_counts(class_counts, "class_counts")
  exponent = check_exponent(exponent, "exponent")
  if is_concrete(counts) and not np.any(np.asarray(counts) > 0):
    raise ValueError("class_counts: expected at least one class with n_c > 0.")
  present = counts > 0
  log_weights = -exponent * jnp.log(jnp.where(present, counts, 1.0))
  log_weights = log_weights - jnp.max(jnp.where(present, log_weights, -jnp.inf))
  weights = jnp.where(present, jnp.exp(log_weights), 0.0)
  weights = weights * jnp.sum(present) / jnp.sum(weights)
  return nan_where_negative(weights, counts)


def _safe_norm(x: jax.Array) -> jax.Array:
  """max(‖x‖, ε) per row, with a finite (zero) gradient at x = 0."""
  return jnp.sqrt(jnp.maximum(jnp.sum(x * x, axis=-1), _COSINE_EPS ** 2))


def _cosine(p: jax.Array, z: jax.Array) -> jax.Array:
  return jnp.sum(p * z, axis=-1) / (_safe_norm(p) * _safe_norm(z))


def glmc_consistency(pred_g: ArrayLike, proj_g: ArrayLike, pred_l: ArrayLike, proj_l: ArrayLike, *,
                     where: ArrayLike | None = None) -> jax.Array:
  r"""The cumulative (SimSiam) consistency of the two mixtures, per example [B].

  Du et al., CVPR 2023, arXiv 2305.08661 (a SimSiam loss: Chen & He, "Exploring Simple Siamese
  Representation Learning", CVPR 2021, arXiv 2011.10566):

  .. math::

      \begin{aligned}
        c_i &= -\cos\bigl(p_{g,i}, \operatorname{sg}(z_{l,i})\bigr)
          - \cos\bigl(p_{l,i}, \operatorname{sg}(z_{g,i})\bigr), \\
        \cos(p, z) &= \frac{\langle p, z \rangle}{\max(\lVert p \rVert, \epsilon)\,
          \max(\lVert z \rVert, \epsilon)}, \qquad \epsilon = 10^{-8}
      \end{aligned}

  z = projector(h), p = predictor(z) of the global (g) and local (l) pass. The projections are
  stop-gradient targets (`SimSiamLoss` detaches z), so no gradient flows into `proj_g`, `proj_l`
  from here; the projector still learns through the predictor's input. The clamped norms (torch's
  `F.cosine_similarity`) keep a zero row finite, with a zero gradient. Computed in at least float32.

  B = 0: an empty [0].

  Args:
    pred_g: float [B, D] predictor output p_g of the global (mixup) pass.
    proj_g: float [B, D] projection z_g of the global pass.
    pred_l: float [B, D] predictor output p_l of the local (CutMix) pass.
    proj_l: float [B, D] projection z_l of the local pass.
    where: optional bool [B]; padding rows give 0 and no gradient.

  Returns:
    float [B] in [−2, 2].

  Raises:
    ValueError: arrays not rank 2 or of different shapes, a `where` of another shape.
    TypeError: non-floating arrays.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> p, z = jnp.array([[1.0, 0.0], [0.6, 0.8]]), jnp.array([[1.0, 0.0], [1.0, 0.0]])
    >>> print(reweight_jax.baselines.glmc_consistency(p, z, p, z))  # −2 cos(p, z): −2 and −1.2
    [-2.  -1.2]
  """
  pred_g = check_floating(pred_g, 2, "pred_g")
  arrays = [pred_g]
  for name, value in (("proj_g", proj_g), ("pred_l", pred_l), ("proj_l", proj_l)):
    value = check_floating(value, 2, name)
    if value.shape != pred_g.shape:
      raise ValueError(f"{name}: expected the shape {pred_g.shape} of pred_g, got {value.shape}.")
    arrays.append(value)
  real = check_where(where, pred_g.shape[0])
  dtype = jnp.promote_types(jnp.result_type(*arrays), jnp.float32)
  pred_g, proj_g, pred_l, proj_l = (jnp.where(real[:, None], x, 0).astype(dtype) for x in arrays)
  consistency = (-_cosine(pred_g, jax.lax.stop_gradient(proj_l))
                 - _cosine(pred_l, jax.lax.stop_gradient(proj_g)))
  return jnp.where(real, consistency, 0)


def glmc_alpha(epoch: ArrayLike, num_epochs: int) -> jax.Array:
  r"""The cumulative-learning weight of the balanced branch, float32 scalar (jittable in `epoch`).

  Du et al., CVPR 2023, arXiv 2305.08661, the cumulative learning schedule:

  .. math::

      \alpha_e = 1 - (e / E)^2

  with e the 0-based epoch, as the reference (`alpha = 1 - (epoch / epochs) ** 2`): 1 at e = 0, and
  :math:`1 - ((E - 1)/E)^2 > 0` in the last epoch; e = E gives 0.

  Args:
    epoch: scalar e in [0, E] (integer or floating; may be traced). Eagerly outside → ValueError;
      under `jit` NaN (never a clipped value, which would silently flip the branch weights).
    num_epochs: E, a positive Python int.

  Returns:
    float32 scalar α_e in [0, 1].

  Raises:
    ValueError: `epoch` not a real scalar or (eagerly) outside [0, E].
    TypeError: `num_epochs` not an int.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.glmc_alpha(0, 200), reweight_jax.baselines.glmc_alpha(100, 200))
    1.0 0.75
  """
  num_epochs = check_positive_int(num_epochs, "num_epochs")
  epoch = jnp.asarray(epoch)
  if epoch.ndim != 0 or not (jnp.issubdtype(epoch.dtype, jnp.integer)
                             or jnp.issubdtype(epoch.dtype, jnp.floating)):
    raise ValueError(f"epoch: expected a real scalar, got {epoch.dtype} of shape {epoch.shape}.")
  if is_concrete(epoch) and not 0 <= float(epoch) <= num_epochs:
    raise ValueError(f"epoch: expected 0 ≤ e ≤ num_epochs = {num_epochs}, got {float(epoch)}.")
  epoch = epoch.astype(jnp.float32)
  # (E − e)(E + e)/E²: exact products for integer epochs, so α keeps its relative accuracy near
  # e = E, where 1 − (e/E)² would cancel.
  alpha = (num_epochs - epoch) * (num_epochs + epoch) / float(num_epochs) ** 2
  return jnp.where((epoch >= 0) & (epoch <= num_epochs), alpha, jnp.nan)


def glmc_loss(logits_fc_g: ArrayLike, logits_fc_l: ArrayLike, logits_cb_g: ArrayLike,
              logits_cb_l: ArrayLike, pred_g: ArrayLike, proj_g: ArrayLike, pred_l: ArrayLike,
              proj_l: ArrayLike, labels_a: ArrayLike, labels_b: ArrayLike, *, lam: ArrayLike,
              class_weights: ArrayLike, alpha: ArrayLike, w_con: ArrayLike,
              axis_name: str | None = None, where: ArrayLike | None = None
              ) -> tuple[jax.Array, GLMCAux]:
  r"""GLMC's loss of one step (`Trainer.train`), returns `(loss, GLMCAux)`.

  Du et al., CVPR 2023, arXiv 2305.08661: the global and local mixture losses of the two heads and
  the cumulative consistency, with the targets of `mixed_targets` and the consistency of
  `glmc_consistency`:

  .. math::

      \begin{aligned}
        y &= \lambda e_a + (1 - \lambda) e_b, \qquad
          y^w = \lambda v_a e_a + (1 - \lambda) v_b e_b, \\
        L_\mathrm{bal} &= \operatorname{mean}_i \mathrm{ce}(\mathrm{fc}(x_g)_i, y_i)
          + \operatorname{mean}_i \mathrm{ce}(\mathrm{fc}(x_l)_i, y_i), \\
        L_\mathrm{reb} &= \operatorname{mean}_i \mathrm{ce}(\mathrm{fc}_\mathrm{cb}(x_g)_i, y^w_i)
          + \operatorname{mean}_i \mathrm{ce}(\mathrm{fc}_\mathrm{cb}(x_l)_i, y^w_i), \\
        L_\mathrm{con} &= \operatorname{mean}_i
          \bigl[-\cos\bigl(p_{g,i}, \operatorname{sg}(z_{l,i})\bigr)
          - \cos\bigl(p_{l,i}, \operatorname{sg}(z_{g,i})\bigr)\bigr], \\
        L &= \alpha L_\mathrm{bal} + (1 - \alpha) L_\mathrm{reb} + w_\mathrm{con} L_\mathrm{con}.
      \end{aligned}

  ce is `soft_cross_entropy`; g is the mixup pass (x_g), l the CutMix pass (x_l); both passes use
  the same targets. The gradient flows into the four logits and the two predictions, not into the
  projections (stop-gradient); `class_weights` enter as given (v is a constant; the inverse
  reweighting's ŵ (`mixed_inverse_reweighted_loss`) may be passed in its place, with or without its
  gradient).

  Data parallel (`axis_name`): the means run over the real rows of the global batch (their count
  psum-ed), λ, v, α and w_con must be the same on every device, and the loss and each aux term are
  this device's share
  :math:`N_\mathrm{devices} (\sum_{\text{local } i} \ldots) / B_\mathrm{global}`: `lax.pmean` of it,
  and of the parameter gradients, is the value (gradient) of the concatenated batch on one device.
  Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and so are the aux
  terms; take the gradient of `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself
  (the share's own gradient is N_devices times the global one). Without `axis_name`, `jax.jit` over
  a batch laid out with `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss
  is the global value, and so are the aux terms.

  B = 0 (or every row padding): loss and every term 0. K = 1: L_bal = L_reb = 0 (one-class targets),
  the loss is w_con · L_con.

  Args:
    logits_fc_g: float [B, K] logits of the instance-balanced head fc on x_g.
    logits_fc_l: float [B, K] logits of fc on x_l.
    logits_cb_g: float [B, K] logits of the re-balanced head fc_cb on x_g.
    logits_cb_l: float [B, K] logits of fc_cb on x_l.
    pred_g: float [B, D] predictor output p of the global pass.
    proj_g: float [B, D] projection z of the global pass.
    pred_l: float [B, D] predictor output p of the local pass.
    proj_l: float [B, D] projection z of the local pass.
    labels_a: int [B] labels of the instance-balanced rows.
    labels_b: int [B] labels of the paired re-balanced rows.
    lam: scalar λ of the step in [0, 1].
    class_weights: [K] v (`glmc_class_weights`), or ŵ.
    alpha: scalar α in [0, 1] (`glmc_alpha`; NaN loss under `jit` when outside).
    w_con: scalar consistency weight w_con ≥ 0 (1–10 in the recipes).
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding (e.g. a short last batch), which counts nowhere
      and gets no gradient. Its inputs, labels included, may be anything, eagerly too.

  Returns:
    (loss, GLMCAux). A real row with an out-of-range label makes the loss (and L_bal, L_reb) NaN
    under `jit`; eagerly it raises `ValueError` naming labels_a or labels_b.

  Raises:
    ValueError: logits of different shapes, labels not [B], arrays of mismatched batch sizes, α or λ
      not a scalar in [0, 1] (eagerly), `w_con` negative or not a real scalar, or (eagerly) a real
      row's label outside [0, K).
    TypeError: non-floating logits or projections, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0]])
    >>> pred, proj = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 0.1], [0.1, 1.0]])
    >>> from reweight_jax import baselines
    >>> loss, aux = baselines.glmc_loss(
    ...     logits, logits, logits, logits, pred, proj, pred, proj, jnp.array([0, 1]),
    ...     jnp.array([2, 2]), lam=0.6, class_weights=jnp.array([0.5, 1.0, 1.5]), alpha=0.75,
    ...     w_con=1.0)
    >>> print(f"{loss:.4f}", f"{aux.balanced:.4f}", f"{aux.rebalanced:.4f}", f"{aux.consistency:.4f}")
    0.6898 2.4501 3.3692 -1.9901
  """
  logits_fc_g = check_floating(logits_fc_g, 2, "logits_fc_g")
  for name, value in (("logits_fc_l", logits_fc_l), ("logits_cb_g", logits_cb_g),
                      ("logits_cb_l", logits_cb_l)):
    value = check_floating(value, 2, name)
    if value.shape != logits_fc_g.shape:
      raise ValueError(f"{name}: expected the shape {logits_fc_g.shape} of logits_fc_g, got "
                       f"{value.shape}.")
  batch, num_classes = logits_fc_g.shape
  labels_a = jnp.asarray(labels_a)
  if labels_a.ndim != 1:
    raise ValueError(f"labels_a: expected rank 1 [batch], got shape {labels_a.shape}.")
  check_batch_dim(logits_fc_g, labels_a.shape[0], "logits_fc_g", "labels_a")
  pred_g = check_floating(pred_g, 2, "pred_g")
  check_batch_dim(pred_g, batch, "pred_g", "labels_a")
  real = check_where(where, batch)
  alpha = unit_scalar_or_nan(alpha, "alpha", "branch weight α")
  w_con = jnp.asarray(w_con)
  if w_con.ndim != 0 or not (jnp.issubdtype(w_con.dtype, jnp.floating)
                             or jnp.issubdtype(w_con.dtype, jnp.integer)):
    raise ValueError(f"w_con: expected a real scalar, got {w_con.dtype} of shape {w_con.shape}.")
  if is_concrete(w_con) and not (math.isfinite(float(w_con)) and float(w_con) >= 0):
    raise ValueError(f"w_con: expected a finite weight ≥ 0, got {float(w_con)}.")

  targets = mixed_targets(labels_a, labels_b, lam, num_classes, where=real)
  weighted_targets = mixed_targets(labels_a, labels_b, lam, num_classes, class_weights, where=real)
  balanced = (soft_cross_entropy(logits_fc_g, targets, where=real)
              + soft_cross_entropy(logits_fc_l, targets, where=real))
  rebalanced = (soft_cross_entropy(logits_cb_g, weighted_targets, where=real)
                + soft_cross_entropy(logits_cb_l, weighted_targets, where=real))
  consistency = glmc_consistency(pred_g, proj_g, pred_l, proj_l, where=real)

  count = jnp.sum(real.astype(jnp.float32))
  if axis_name is not None:
    count = jax.lax.psum(count, axis_name)
  scale = class_sums.num_devices(axis_name) / jnp.maximum(count, 1.0)
  aux = GLMCAux(scale * jnp.sum(balanced), scale * jnp.sum(rebalanced),
                scale * jnp.sum(consistency))
  loss = alpha * aux.balanced + (1 - alpha) * aux.rebalanced + w_con * aux.consistency
  return loss, aux
