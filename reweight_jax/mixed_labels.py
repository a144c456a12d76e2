r"""The inverse reweighting of mixed-label batches (mixup, CutMix, GLMC's soft labels).

The project's definition of the inverse reweighting (Wang et al., ICML 2026, arXiv 2605.10047)
inside mixed-label pipelines such as ETF-DR's mixup and GLMC; the paper reports these combinations
but releases no integration code. Row i of the batch carries two labels a_i, b_i with weights λ and
1 − λ (one λ per batch) and two per-example losses ℓ_i^a, ℓ_i^b, its loss against a_i and against
b_i (the caller's: CE :math:`-\log \operatorname{softmax}(z_i)_{a_i}`, or ETF-DR's DR loss with
y = a_i). Each label enters the class statistics with its weight: the class mass m_c, the class
losses L_c (a class is present iff m_c > 0), the weights ŵ_c (w* the paper's closed form from these
L_c) and the loss are

.. math::

    \begin{aligned}
      m_c &= \sum_i \bigl(\lambda\, \mathbf{1}[a_i = c]
        + (1 - \lambda)\, \mathbf{1}[b_i = c]\bigr), \\
      L_c &= \frac{1}{m_c} \sum_i \bigl(\lambda\, \mathbf{1}[a_i = c]\, \ell_i^a
        + (1 - \lambda)\, \mathbf{1}[b_i = c]\, \ell_i^b\bigr), \\
      \hat w_c &= \operatorname{clip}(\beta_c w^*_c,\ 0,\ \mathrm{max\_weight}), \\
      \mathrm{loss} &= \frac{1}{B} \sum_i \bigl(\lambda\, \hat w_{a_i} \ell_i^a
        + (1 - \lambda)\, \hat w_{b_i} \ell_i^b\bigr).
    \end{aligned}

Everything after L_c — L̄, w*, the macro factor β and its refresh, the clip, the two gradient modes,
the counter update B_c += 1 for the present classes (once per step) — is
`inverse_reweighted_loss`'s, through the same functions. Identities (tested in
tests/lib/reweight_jax/test_mixed_labels.py):

* λ = 1, or b = a with ℓ^b = ℓ^a: `inverse_reweighted_loss(ℓ^a, a)` (b = a for any ℓ^b:
  `inverse_reweighted_loss(λℓ^a + (1 − λ)ℓ^b, a)`).
* ŵ = v (e.g. α → ∞ with prior v, macro off, no clip): GLMC's soft-label reweighted CE L_reb,

  .. math::

      \frac{1}{B} \sum_i \mathrm{ce}\bigl(z_i,\ \lambda v_{a_i} e_{a_i}
        + (1 - \lambda) v_{b_i} e_{b_i}\bigr).

* α = 0, no clip active, β ≡ 1:

  .. math::

      \sum_i \bigl(\lambda \hat w_{a_i} \ell_i^a + (1 - \lambda) \hat w_{b_i} \ell_i^b\bigr)
        = \sum_c m_c w^*_c L_c = \bar L \sum_c m_c = B \bar L

  (up to ε), so loss = L̄; with β, :math:`\mathrm{loss} = \bar L S / B,\ S = \sum_c m_c \beta_c`.
  Under gradient flow :math:`\partial \mathrm{loss} / \partial \ell_i^a = \lambda / (P\, m_{a_i})`
  (P present classes): a per-batch class-balanced mean over the label mass, as for the unmixed
  loss.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_finite_rows
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import check_unit_scalar
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import count_skipped
from mr2_reweight_core.checks import poison_unless
from reweight_jax.inverse_weights import mean_class_loss
from reweight_jax.loss import check_reweight_arguments
from reweight_jax.loss import slot_class_weights
from reweight_jax.state import ReweightState


class MixedReweightAux(NamedTuple):
  r"""Diagnostics of one mixed-label step (global-batch values, identical on every device).

  The fields of `ReweightAux`, with the label mass and two example weights per row.

  Attributes:
    class_losses: [K], L_c of the global batch; 0 for absent classes.
    present: bool [K], m_c > 0.
    class_mass: [K],
      :math:`m_c = \sum_i (\lambda\, \mathbf{1}[a_i = c] + (1 - \lambda)\, \mathbf{1}[b_i = c])` of
      the global batch.
    mean_class_loss: scalar L̄.
    inverse_weights: [K], w* (w⁰ for absent classes).
    class_weights: [K], :math:`\hat w = \operatorname{clip}(\beta w^*, 0, \mathrm{max\_weight})`
      (β = 1 when `macro=False`); for absent classes the value their labels would get,
      :math:`\operatorname{clip}(\beta w^0)`.
    example_weights_a: [B], ŵ_{a_i} of the local rows; 0 for padding or an out-of-range a_i.
    example_weights_b: [B], ŵ_{b_i} likewise.
  """
  class_losses: jax.Array
  present: jax.Array
  class_mass: jax.Array
  mean_class_loss: jax.Array
  inverse_weights: jax.Array
  class_weights: jax.Array
  example_weights_a: jax.Array
  example_weights_b: jax.Array


def mixed_inverse_reweighted_loss(
    loss_a: ArrayLike,
    loss_b: ArrayLike,
    labels_a: ArrayLike,
    labels_b: ArrayLike,
    lam: ArrayLike,
    state: ReweightState,
    *,
    alpha: ArrayLike,
    prior: ArrayLike,
    gamma: ArrayLike,
    max_weight: ArrayLike | None = 10.0,
    macro: bool = True,
    stop_gradient: bool = False,
    refresh_macro: ArrayLike = True,
    axis_name: str | None = None,
    where: ArrayLike | None = None,
    eps: float = 1e-8,
) -> tuple[jax.Array, ReweightState, MixedReweightAux]:
  r"""Inverse-view reweighted loss of a mixed-label batch; returns `(loss, new_state, aux)`.

  The inverse reweighting of Wang et al., ICML 2026, arXiv 2605.10047, over the label mass of
  mixed labels (the project's definition; see the module docstring for the identities), with ŵ_c
  as in `inverse_reweighted_loss`:

  .. math::

      \begin{aligned}
        m_c &= \sum_i \bigl(\lambda\, \mathbf{1}[a_i = c]
          + (1 - \lambda)\, \mathbf{1}[b_i = c]\bigr), \\
        L_c &= \frac{1}{m_c} \sum_i \bigl(\lambda\, \mathbf{1}[a_i = c]\, \ell_i^a
          + (1 - \lambda)\, \mathbf{1}[b_i = c]\, \ell_i^b\bigr), \\
        \hat w_c &= \operatorname{clip}(\beta_c w^*_c,\ 0,\ \mathrm{max\_weight}), \\
        \mathrm{loss} &= \frac{1}{B} \sum_i \bigl(\lambda\, \hat w_{a_i} \ell_i^a
          + (1 - \lambda)\, \hat w_{b_i} \ell_i^b\bigr).
      \end{aligned}

  The order of operations, the β refresh cadence (`refresh_macro`), the gradient modes
  (`stop_gradient`), data parallelism (`axis_name`: m_c and the sums are psum-reduced, B_c counts a
  class once per global batch, the loss is this device's share N_devices·(local sum)/B_global) and
  padding (`where`) are those of `inverse_reweighted_loss`; here a class is present, and its B_c
  incremented (once per step, whichever label brought it), iff m_c > 0 — so with λ = 1 the b labels
  count nowhere, and with λ = 0 the a labels.

  λ is a constant for back-propagation (the caller's draw) and must be the same on every device. A
  label part with weight 0 contributes nothing, even if its loss is NaN or infinite.

  Bad rows (docs: "Failure modes"): eagerly an out-of-range `labels_a` or `labels_b` raises (naming
  it); under tracing a real row with an out-of-range label, or with a non-finite loss in a part of
  non-zero weight, is left out whole (both parts) of every class statistic and of the counts (never a
  clipped class) and counted in `new_state.skipped_rows`, and the loss and its gradient are NaN —
  unless `where` marks the row as padding. A traced λ outside [0, 1] also makes the loss NaN.

  B = 0 (or every row padding): loss 0 and the counts unchanged. K = 1: ŵ = (1,), the loss is the
  mean of the rows' mixed losses λℓ_a + (1 − λ)ℓ_b.

  Args:
    loss_a: [B] per-example losses ℓ^a against `labels_a`.
    loss_b: [B] per-example losses ℓ^b against `labels_b`.
    labels_a: int [B] labels a in [0, K), K = `state.batch_counts.shape[0]`.
    labels_b: int [B] labels b in [0, K) (mixup: the permuted rows' labels y_π).
    lam: scalar λ in [0, 1], the weight of the a labels.
    state: `ReweightState` from `init_reweight_state(K)` or the previous step.
    alpha: Tikhonov strength α ≥ 0 (reference default 0).
    prior: [K] prior weights w⁰ (`class_prior`).
    gamma: macro exponent γ (reference default 1).
    max_weight: upper clip of ŵ (reference 10); None disables it (ŵ is still ≥ 0).
    macro: apply β (False: β ≡ 1 in the loss; the state is updated either way).
    stop_gradient: treat ŵ as a constant (see `reweight_jax.loss`).
    refresh_macro: bool, recompute β from the counts before this step.
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere.
    eps: ε in the denominator of w*.

  Returns:
    `(loss, new_state, aux)`: scalar loss (this device's share under `axis_name`), the updated
    `ReweightState` and `MixedReweightAux`.

  Raises:
    ValueError: shapes that do not match (losses and labels [B], state and prior [K]), λ not a
      scalar or (eagerly) outside [0, 1], α < 0, γ < 0, ε ≤ 0, a non-positive `max_weight`, or
      (eagerly) a real row's label outside [0, K).
    TypeError: non-floating losses or state, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> loss_a, loss_b = jnp.array([0.2, 1.0, 0.6]), jnp.array([0.8, 0.4, 0.5])
    >>> labels_a, labels_b = jnp.array([0, 1, 2]), jnp.array([1, 2, 0])
    >>> loss, state, aux = reweight_jax.mixed_inverse_reweighted_loss(
    ...     loss_a, loss_b, labels_a, labels_b, 0.7, reweight_jax.init_reweight_state(3),
    ...     alpha=0.0, prior=jnp.ones(3), gamma=1.0)
    >>> print(f"{loss:.4f}", np.asarray(aux.class_mass, float).round(2))
    0.5900 [1. 1. 1.]
  """
  batch_counts, prior = check_reweight_arguments(state, prior, alpha, gamma, max_weight, eps)
  num_classes = batch_counts.shape[0]
  labels_a = jnp.asarray(labels_a)
  in_range_a = check_labels(labels_a, num_classes, "labels_a", where=where)
  batch = labels_a.shape[0]
  labels_b = jnp.asarray(labels_b)
  in_range_b = check_labels(labels_b, num_classes, "labels_b", where=where)
  check_batch_dim(labels_b, batch, "labels_b", "labels_a")
  loss_a = check_floating(loss_a, 1, "loss_a")
  check_batch_dim(loss_a, batch, "loss_a", "labels_a")
  loss_b = check_floating(loss_b, 1, "loss_b")
  check_batch_dim(loss_b, batch, "loss_b", "labels_a")
  lam = check_unit_scalar(lam, "lam", "mixing weight λ (one per batch)")
  real = check_where(where, batch)

  dtype = jnp.promote_types(jnp.promote_types(loss_a.dtype, loss_b.dtype), jnp.float32)
  lam = jax.lax.stop_gradient(lam.astype(dtype))
  # The batch as 2B label parts [a-parts; b-parts], each with its weight (λ or 1 − λ): one set of
  # class slots over both labels, so that a class is counted once per step whichever label has it.
  labels = jnp.concatenate([labels_a.astype(jnp.int32), labels_b.astype(jnp.int32)])
  part_weights = jnp.concatenate([jnp.full((batch,), lam, dtype),
                                  jnp.full((batch,), 1 - lam, dtype)])
  # A bad row (an out-of-range label, or a non-finite loss of a part that counts) is left out
  # whole, both parts, and counted in the state's `skipped_rows`.
  finite_a = check_finite_rows(loss_a, real & (lam > 0), "loss_a") | (lam <= 0)
  finite_b = check_finite_rows(loss_b, real & (lam < 1), "loss_b") | (lam >= 1)
  kept = real & in_range_a & in_range_b & finite_a & finite_b
  labelled = jnp.concatenate([kept, kept])
  counted = labelled & (part_weights > 0)
  part_losses = jnp.concatenate([loss_a.astype(dtype), loss_b.astype(dtype)])
  # u·ℓ per part, 0 where the part does not count (its loss may be NaN: padding, weight 0).
  weighted_losses = part_weights * jnp.where(counted, part_losses, 0)

  slots = class_sums.class_slots(labels, counted, num_classes, axis_name=axis_name)
  slot_mass = class_sums.slot_sum(jnp.where(counted, part_weights, 0), slots, axis_name=axis_name)
  slot_present = slot_mass > 0
  slot_losses = (class_sums.slot_sum(weighted_losses, slots, axis_name=axis_name)
                 / jnp.where(slot_present, slot_mass, 1))

  # From here on as in `inverse_reweighted_loss` (steps 1–2 and 4 of its docstring).
  weights = slot_class_weights(slot_losses, slot_present, slots, state, prior, alpha=alpha,
                               gamma=gamma, max_weight=max_weight, macro=macro,
                               stop_gradient=stop_gradient, refresh_macro=refresh_macro, eps=eps,
                               skipped=count_skipped(real, kept, axis_name))
  slot_weights, class_weights = weights.weights, weights.class_weights

  # ŵ of every labelled part: its class has a slot (counted) or, with weight 0, reads the class
  # vector; either way the product below is 0 for parts that do not count.
  def to_classes(default, slot_values):
    return class_sums.scatter_to_classes(default, slot_values, slots, slot_present)

  index = index_labels(labels, labelled)
  part_class_weights = jnp.where(counted, class_sums.at_rows(slot_weights, slots),
                                 explicit_mesh.take(class_weights, index))
  part_class_weights = jnp.where(labelled, part_class_weights, 0)
  weighted_sum = jnp.sum(part_class_weights * weighted_losses)
  global_rows = jnp.sum(real.astype(dtype))
  if axis_name is not None:
    global_rows = jax.lax.psum(global_rows, axis_name)
  loss = class_sums.num_devices(axis_name) * weighted_sum / jnp.maximum(global_rows, 1)
  # A bad real row makes the loss and its gradient NaN; a padding row counts nowhere.
  loss = poison_unless(loss, jnp.all(kept | ~real) & (lam >= 0) & (lam <= 1))

  aux = MixedReweightAux(
      class_losses=to_classes(jnp.zeros((num_classes,), dtype), slot_losses),
      present=to_classes(jnp.zeros((num_classes,), bool), slot_present),
      class_mass=to_classes(jnp.zeros((num_classes,), dtype), slot_mass),
      mean_class_loss=mean_class_loss(slot_losses, slot_present),
      inverse_weights=to_classes(prior.astype(dtype), weights.inverse),
      class_weights=class_weights,
      example_weights_a=part_class_weights[:batch],
      example_weights_b=part_class_weights[batch:])
  return loss, weights.new_state, aux
