"""Supervised contrastive loss (Khosla et al., "Supervised Contrastive Learning",
NeurIPS 2020, arXiv 2004.11362; one of the comparison methods of MR2: Zhu et al., ICLR 2026,
arXiv 2602.00205).

Reference code: `HobbitLong/SupContrast` (`losses.py` for the loss, `networks/resnet_big.py` for the
head). Two views per image go through one forward pass on the stacked batch; `stack_views` builds
that batch, `supcon_loss` is the loss; the head is `mr2_jax.linen.SupConProjection` (Flax).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import checks
from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_reweight_core.normalize import l2_normalize


class SupConAux(NamedTuple):
  """Diagnostics of `supcon_loss`. per_anchor [N]: ℓ_i of the local anchors (0 for padding, NaN for
  an out-of-range label); num_positives int [N]: |P(i)| over the global batch (0 for padding);
  num_anchors: the global number of anchors N_valid, the denominator of the mean."""
  per_anchor: jax.Array
  num_positives: jax.Array
  num_anchors: jax.Array


def stack_views(views: ArrayLike, labels: ArrayLike, *, where: ArrayLike | None = None
                ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
  """[B, V, D] view embeddings and [B] labels → the [V·B, D] view-major batch of `supcon_loss`.

  Rows are concatenate([views[:, 0], views[:, 1], …]); labels (and `where`, when given) are
  repeated per view. Under `shard_map` or `pmap` each device stacks its own local views; a batch
  laid out over Explicit mesh axes (`jax.jit` of sharded views) gives the global view-major batch,
  its rows split over the devices as the views' are. The batch of
  SupCon (Khosla et al., NeurIPS 2020, arXiv 2004.11362): every view of every image in one pass.

  B = 0: empty [0, D], [0] (and [0]).

  Args:
    views: float [B, V, D] embeddings of V views of each of B examples.
    labels: int [B].
    where: optional bool [B] mask of real examples.

  Returns:
    (projections float [V·B, D], labels int [V·B], where bool [V·B] or None), view-major.

  Raises:
    ValueError: views not rank 3, labels not rank 1, or their batch sizes differ.
    TypeError: non-floating views.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> views = jnp.arange(12.0).reshape(2, 3, 2)  # [B = 2, V = 3, D = 2]
    >>> projections, labels, where = reweight_jax.baselines.stack_views(views, jnp.array([4, 7]))
    >>> print(projections.shape, labels, where)
    (6, 2) [4 7 4 7 4 7] None
  """
  views = checks.check_floating(views, 3, "views")
  labels = jnp.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f"labels: expected rank 1 [batch], got shape {labels.shape}.")
  checks.check_batch_dim(views, labels.shape[0], "views")
  batch, num_views = views.shape[:2]
  # Rows split over Explicit mesh axes stay split the same way; the view-major order moves rows
  # between devices (an all-to-all), which the reshape is told.
  rows = explicit_mesh.row_sharding(views)

  def view_major(x):  # [V, B, ...] → [V·B, ...]
    shape = (num_views * batch,) + x.shape[2:]
    return x.reshape(shape) if rows is None else jax.lax.reshape(x, shape, out_sharding=rows)

  projections = view_major(jnp.swapaxes(views, 0, 1))
  if where is not None:
    where = view_major(jnp.broadcast_to(checks.check_where(where, batch), (num_views, batch)))
  return projections, view_major(jnp.broadcast_to(labels, (num_views, batch))), where


def supcon_loss(projections: ArrayLike, labels: ArrayLike, *, temperature: ArrayLike = 0.1,
                base_temperature: ArrayLike = 0.07, where: ArrayLike | None = None,
                axis_name: str | None = None, num_classes: int | None = None
                ) -> tuple[jax.Array, SupConAux]:
  r"""SupCon loss of a batch of views; returns `(loss, aux)`.

  Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020, arXiv 2004.11362: the L^sup_out
  form, as the reference code `HobbitLong/SupContrast` computes it.

  For anchor i of the N views (valid rows only), A(i) = every other view, P(i) = those of A(i) with
  the label of i (i's other views among them), :math:`s_{ij} = z_i \cdot z_j / \tau`:

  .. math::

      \begin{aligned}
        \ell_i &= -\frac{\tau}{\tau_b} \frac{1}{|P(i)|} \sum_{p \in P(i)}
          \Bigl[s_{ip} - \log \sum_{a \in A(i)} \exp s_{ia}\Bigr], \\
        L &= \frac{1}{N_\mathrm{valid}} \sum_i \ell_i
      \end{aligned}

  An anchor with no positive (a view whose partners are padded out) gives ℓ_i = 0 but still counts
  in N_valid, as in the reference. τ/τ_b only scales the loss (and its gradient): with the README
  recipe τ = 0.1, τ_b = 0.07 it is 10/7; τ = τ_b gives the plain form.

  Numerics: the log-sum-exp over A(i) subtracts the row maximum over A(i) only (a constant for
  back-propagation), so exp never overflows and at least one term is 1. The reference takes the
  maximum over the whole row, s_ii included, and for unnormalised rows whose other similarities sit
  ~90 below s_ii every term of A(i) then underflows to 0 (log 0). The self-similarity s_ii and the
  padding columns are excluded with a mask (−∞ logits, exactly 0 weight), not by adding a large
  negative constant, which is not negligible when the true logits are as negative as it, and which
  would hand an anchor without candidates a finite garbage denominator. Padding rows are zeroed
  before the product, so NaN or ∞ in them reach neither the value nor any gradient (theirs is 0).
  Projections are used as given: the formula is applied to unnormalised rows too.

  Data parallel (`axis_name`, inside `shard_map` or `pmap`): P(i) and A(i) range over the global
  batch (projections, labels and `where` all-gathered, tiled, in device order), a local anchor is
  excluded from its own A(i) by its global index, and the returned loss is this device's share
  :math:`N_\mathrm{devices} \sum_{\text{local } i} \ell_i / N_\mathrm{valid}(\text{global})`:
  `lax.pmean` of the shares is the loss on the concatenated batch, and `lax.pmean` of the parameter
  gradients is its gradient (the all-gather's transpose carries each anchor's cotangents back to the
  devices that own its candidates). That is for `pmap` and `shard_map(..., check_vma=False)`. Under
  `jax.shard_map`'s default `check_vma=True` the loss is still this share; take the gradient of
  `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself (the share's own gradient is
  N_devices times the global one). Without `axis_name`, `jax.jit` over a batch laid out with
  `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss is the global value.

  B = 0 (or every row padding): loss 0, no anchor. K = 1: every other real row is a positive of each
  anchor.

  Args:
    projections: float [N, D] view embeddings z (L2-normalised by the head), N = views × batch,
      views stacked (`stack_views`). Narrower than float32 is computed in float32.
    labels: int [N] labels, repeated per view.
    temperature: τ > 0 (0.1, README recipe; the reference code's default is 0.07).
    base_temperature: τ_b > 0 (0.07).
    where: optional bool [N]; False marks padding: neither anchor, candidate nor counted in N_valid.
    axis_name: data-parallel axis name or None.
    num_classes: K, to range-check labels against [0, K); when None labels need only be ≥ 0
      (positives are matched by label equality).

  Returns:
    (loss, SupConAux); the loss is NaN when a real row has an out-of-range label (only possible
    under tracing: eagerly it raises).

  Raises:
    ValueError: `temperature` or `base_temperature` ≤ 0, projections not [N, D], labels not [N], a
      `where` of another shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating projections or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> import reweight_jax
    >>> z = mr2_jax.l2_normalize(jnp.array([[1.0, 0.1], [0.1, 1.0], [0.9, 0.2], [0.2, 0.9]]))
    >>> loss, aux = reweight_jax.baselines.supcon_loss(z, jnp.array([0, 1, 0, 1]), temperature=0.1,
    ...                                 base_temperature=0.1)
    >>> print(f"{loss:.4f}", aux.num_positives)
    0.0030 [1 1 1 1]
  """
  projections = checks.check_floating(projections, 2, "projections")
  if jnp.finfo(projections.dtype).bits < 32:
    projections = projections.astype(jnp.float32)
  temperature, temperature_ok = checks.check_hyperparameter(
      temperature, "temperature", 0.0, low_closed=False, what="a temperature τ")
  base_temperature, base_ok = checks.check_hyperparameter(
      base_temperature, "base_temperature", 0.0, low_closed=False, what="a temperature τ_b")
  if num_classes is None:
    num_classes = int(jnp.iinfo(jnp.int32).max)
  labels = jnp.asarray(labels)
  in_range = checks.check_labels(labels, num_classes, where=where)
  checks.check_batch_dim(projections, labels.shape[0], "projections")
  real = checks.check_where(where, labels.shape[0])
  valid = real & in_range
  # Zeroed before any product: a masked row's NaN/∞ would otherwise meet 0 cotangents as 0·NaN.
  local = jnp.where(valid[:, None], projections, 0.0)

  batch = labels.shape[0]
  (all_rows, all_labels, all_valid), anchor_offset = class_sums.global_batch(
      axis_name, local, labels, valid)
  anchor_index = anchor_offset + jnp.arange(batch)
  candidate = (valid[:, None] & all_valid[None, :]
               & (anchor_index[:, None] != jnp.arange(all_labels.shape[0])[None, :]))
  positive = candidate & (labels[:, None] == all_labels[None, :])

  logits = (local @ all_rows.T) / temperature  # [B_local, N_global]
  masked = jnp.where(candidate, logits, -jnp.inf)
  has_candidate = jnp.any(candidate, axis=1)
  # `initial`: an empty batch (B = 0) has no row to take a maximum of, and no error.
  row_max = jax.lax.stop_gradient(
      jnp.where(has_candidate, jnp.max(masked, axis=1, initial=-jnp.inf), 0.0))
  sum_exp = jnp.sum(jnp.exp(masked - row_max[:, None]), axis=1)
  log_denominator = row_max + jnp.log(jnp.where(has_candidate, sum_exp, 1.0))
  num_positives = jnp.sum(positive, axis=1)
  mean_positive_logit = (jnp.sum(jnp.where(positive, logits, 0.0), axis=1)
                         / jnp.maximum(num_positives, 1).astype(logits.dtype))
  per_anchor = -(temperature / base_temperature) * (mean_positive_logit - log_denominator)
  per_anchor = jnp.where(num_positives > 0, per_anchor, 0.0)
  # An out-of-range label of a real row gives NaN, never a silently dropped anchor.
  per_anchor = jnp.where(real & ~in_range, jnp.nan, per_anchor)

  num_anchors = jnp.sum(valid)
  if axis_name is not None:
    num_anchors = jax.lax.psum(num_anchors, axis_name)
  loss = class_sums.num_devices(axis_name) * jnp.sum(per_anchor) / jnp.maximum(
      num_anchors, 1).astype(per_anchor.dtype)
  if temperature_ok is not True or base_ok is not True:  # a traced τ or τ_b ≤ 0: NaN, never used
    loss = jnp.where(jnp.logical_and(temperature_ok, base_ok), loss, jnp.nan)
  return loss, SupConAux(per_anchor, num_positives, num_anchors)
