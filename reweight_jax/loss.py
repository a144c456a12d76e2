r"""The inverse-reweighted loss: batch-level closed form × macro factor, clipped.

Wang et al., ICML 2026, arXiv 2605.10047: the closed form of the inverse problem (batch level)
times the macro factor (macro level):

.. math::

    \begin{aligned}
      \hat w_c &= \operatorname{clip}(\beta_c w^*_c,\ 0,\ \mathrm{max\_weight}), \\
      \mathrm{loss} &= \frac{1}{B} \sum_i \hat w_{y_i} \ell_i.
    \end{aligned}

Gradient semantics (`stop_gradient`):

* `stop_gradient=False` (default, the authors' released code): gradients flow through L_c, L̄ and w*.
  With α = 0, β ≡ 1 and the clamp inactive,
  :math:`\sum_i w^*_{y_i} \ell_i = \sum_c n_c w^*_c L_c = B \bar L` (up to ε), so the loss *is* L̄,
  the mean over present classes of their mean loss, and
  :math:`\partial \mathrm{loss} / \partial \ell_i = 1 / (P\, n_{y_i})` (P present classes): every
  present class gets the same total gradient — a per-batch class-balanced mean. With β the loss is
  :math:`\bar L S / B,\ S = \sum_c n_c \beta_c`; α > 0 and an active clamp reshape it further.
* `stop_gradient=True`: ŵ is a constant,
  :math:`\partial \mathrm{loss} / \partial \ell_i = \hat w_{y_i} / B`. This is a genuine
  reweighting that up-weights the classes whose loss is *low* (:math:`w^*_c \approx \bar L / L_c`)
  — a different algorithm.

Results should say which of the two produced them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_finite_rows
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_hyperparameter
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import poison_unless
from reweight_jax.inverse_weights import check_alpha
from reweight_jax.inverse_weights import closed_form_weights
from reweight_jax.inverse_weights import mean_class_loss
from reweight_jax.inverse_weights import slot_class_losses
from reweight_jax.macro import check_gamma
from reweight_jax.macro import macro_factor_unchecked
from reweight_jax.state import ReweightState


class ReweightAux(NamedTuple):
  r"""Diagnostics of one step (global-batch values, identical on every device under `axis_name`).

  Attributes:
    class_losses: [K], L_c of the global batch; 0 for absent classes.
    present: bool [K], classes present in the global batch.
    mean_class_loss: scalar L̄.
    inverse_weights: [K], w* (w⁰ for absent classes).
    class_weights: [K], :math:`\hat w = \operatorname{clip}(\beta w^*, 0, \mathrm{max\_weight})`
      (β = 1 when `macro=False`); for absent classes the value their examples would get,
      :math:`\operatorname{clip}(\beta w^0)`.
    example_weights: [B], ŵ_{y_i} of the local examples; 0 for masked ones.
  """
  class_losses: jax.Array
  present: jax.Array
  mean_class_loss: jax.Array
  inverse_weights: jax.Array
  class_weights: jax.Array
  example_weights: jax.Array


def _clip(weights: jax.Array, max_weight: ArrayLike | None) -> jax.Array:
  if max_weight is not None and not is_concrete(max_weight):  # a traced clip ≤ 0: NaN weights
    return jnp.where(jnp.asarray(max_weight) > 0, jnp.clip(weights, 0, max_weight), jnp.nan)
  if max_weight is None:
    return jnp.maximum(weights, 0)
  return jnp.clip(weights, 0, max_weight)


def check_reweight_arguments(state: ReweightState, prior: ArrayLike, alpha: ArrayLike,
                             gamma: ArrayLike, max_weight: ArrayLike | None, eps: float
                             ) -> tuple[jax.Array, jax.Array]:
  """The checks every inverse-reweighted loss makes on its state and hyper-parameters; returns
  (the state's batch counts B [K], the prior [K])."""
  if not isinstance(state, ReweightState):
    raise TypeError(f"state: expected reweight_jax.ReweightState (from init_reweight_state(K)), "
                    f"got {type(state).__name__}.")
  batch_counts = check_floating(state.batch_counts, 1, "state.batch_counts")
  num_classes = batch_counts.shape[0]
  check_class_vector(state.beta, num_classes, "state.beta")
  skipped = jnp.asarray(state.skipped_rows)
  if skipped.shape != () or not jnp.issubdtype(skipped.dtype, jnp.integer):
    raise ValueError(f"state.skipped_rows: expected an integer scalar, got {skipped.dtype} of shape "
                     f"{skipped.shape}.")
  prior = check_floating(prior, 1, "prior")
  if prior.shape[0] != num_classes:  # which one is wrong is not known here: both are named
    raise ValueError(f"state: built for {num_classes} classes (init_reweight_state({num_classes})), "
                     f"but the prior has {prior.shape[0]} entries: build the state and the prior "
                     f"for the same K.")
  check_alpha(alpha)
  check_gamma(gamma)
  if not eps > 0:
    raise ValueError(f"eps: expected ε > 0 in the denominator of w*, got {eps}.")
  if max_weight is not None:
    check_hyperparameter(max_weight, "max_weight", 0.0, low_closed=False,
                         what="a positive clip value (or None)")
  return batch_counts, prior


class SlotClassWeights(NamedTuple):
  """`slot_class_weights`' results: w* and ŵ per slot, ŵ per class, the new state."""
  inverse: jax.Array
  weights: jax.Array
  class_weights: jax.Array
  new_state: ReweightState


def slot_class_weights(slot_losses: jax.Array, slot_present: jax.Array,
                       slots: class_sums.ClassSlots, state: ReweightState, prior: jax.Array, *,
                       alpha: ArrayLike, gamma: ArrayLike, max_weight: ArrayLike | None, macro: bool,
                       stop_gradient: bool, refresh_macro: ArrayLike, eps: float,
                       skipped: jax.Array) -> SlotClassWeights:
  """Steps 1, 2 and 4 of a reweighted step from the batch's per-class losses L_c (in slots):

      β ← macro_factor(B, γ) if refresh_macro else the state's β     (counts before this batch)
      w* = closed-form Tikhonov weights of L_c (prior w⁰, α, ε)
      ŵ_c = clip(β_c·w*_c, 0, max_weight)     (β ≡ 1 when `macro` is False; constant under
                                               `stop_gradient`)
      B_c += 1 for every present class;  skipped_rows += `skipped` (the batch's bad real rows)

  Shared by `inverse_reweighted_loss` and `mixed_inverse_reweighted_loss`, whose L_c differ (one
  label per row, or the class masses of mixed labels). `class_weights` [K] is ŵ for present classes
  and clip(β·w⁰) for absent ones.
  """
  batch_counts = state.batch_counts
  dtype = slot_losses.dtype
  slot_prior = class_sums.gather_from_classes(prior, slots)
  slot_inverse = closed_form_weights(slot_losses, slot_present, slot_prior, alpha, eps)
  beta = jnp.where(refresh_macro, macro_factor_unchecked(batch_counts, gamma), state.beta)
  if macro:
    slot_beta = class_sums.gather_from_classes(beta, slots).astype(dtype)
    class_beta = beta
  else:
    slot_beta = jnp.ones_like(slot_inverse)
    class_beta = jnp.ones_like(beta)
  slot_weights = _clip(slot_beta * slot_inverse, max_weight)
  if stop_gradient:
    slot_weights = jax.lax.stop_gradient(slot_weights)
  class_weights = class_sums.scatter_to_classes(
      _clip(class_beta * prior, max_weight).astype(dtype), slot_weights, slots, slot_present)
  new_counts = class_sums.scatter_to_classes(
      batch_counts, class_sums.gather_from_classes(batch_counts, slots) + 1, slots, slot_present)
  return SlotClassWeights(slot_inverse, slot_weights, class_weights,
                          ReweightState(batch_counts=new_counts, beta=beta,
                                        skipped_rows=state.skipped_rows + skipped))


def inverse_reweighted_loss(
    per_example_loss: ArrayLike,
    labels: ArrayLike,
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
) -> tuple[jax.Array, ReweightState, ReweightAux]:
  r"""Inverse-view reweighted loss of one step; returns `(loss, new_state, aux)`.

  Wang et al., ICML 2026, arXiv 2605.10047: the batch-level weights w* (closed form of the
  Tikhonov-regularised inverse problem) times the macro factor β, clipped:

  .. math::

      \begin{aligned}
        \hat w_c &= \operatorname{clip}(\beta_c w^*_c,\ 0,\ \mathrm{max\_weight}), \qquad
          w^*_c = \frac{\bar L L_c + \alpha w^0_c}{L_c^2 + \alpha + \epsilon}, \\
        \mathrm{loss} &= \frac{1}{B} \sum_i \hat w_{y_i} \ell_i.
      \end{aligned}

  Order of operations in a step:
    1. if `refresh_macro`: β ← ``macro_factor(B, γ)`` from the counts *before* this batch;
    2. L_c, L̄ and w* from this (global) batch;
       :math:`\hat w_c = \operatorname{clip}(\beta_c w^*_c,\ 0,\ \mathrm{max\_weight})`;
    3. :math:`\mathrm{loss} = \frac{1}{B} \sum_i \hat w_{y_i} \ell_i`, B the number of valid
       examples of the global batch;
    4. :math:`B_c \mathrel{+}= 1` for every class present in the (global) batch.

  β refresh cadence: `refresh_macro=True` (default) refreshes every step. The reference refreshes once
  per epoch: pass `refresh_macro=(step_in_epoch == 0)` (a traced bool is fine), so epoch e uses β from
  the batches of the reweighting epochs before e, and the first reweighting epoch uses β ≡ 1.

  Data parallelism (`axis_name`): L_c and L̄ come from the global batch (sums and counts are
  psum-ed), and B_c counts a class once per global batch. The returned loss is this device's
  *share*,
  :math:`N_\mathrm{devices} \sum_{\text{local } i} \hat w_{y_i} \ell_i / B_\mathrm{global}`, so that
  `lax.pmean(loss, axis_name)` is the single-device loss on the concatenated batch and `lax.pmean`
  of the parameter gradients is its gradient (the psum-s inside carry the cross-device terms of the
  gradient). Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and the
  new state and the per-class aux are typed replicated (`out_specs=P()`); take the gradient of
  `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself (the share's own gradient is
  N_devices times the global one). Without `axis_name`, `jax.jit` over a batch laid out with
  `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss is the global value,
  state and per-class aux replicated, example weights laid out like the rows.

  Bad rows (docs: "Failure modes"): a row inside `where` with a label outside [0, K) (possible only
  under tracing, where `check_labels` cannot raise) or a non-finite loss is left out of every class
  statistic, the weights and the counts B_c, and counted in `new_state.skipped_rows`; the loss of
  such a batch and its gradient are NaN (under `axis_name`, every device's share). A padding row
  (`where` False) counts nowhere whatever its label or loss (as in `mr2_loss` and
  `cross_entropy_loss`).

  B = 0 (or every row padding): loss 0 and the counts unchanged (no class present). K = 1: ŵ = (1,),
  the loss is the mean loss of the real rows.

  Args:
    per_example_loss: [B] per-example losses ℓ_i (cross-entropy in the reference).
    labels: int [B] labels in [0, K), K = `state.batch_counts.shape[0]`.
    state: `ReweightState` from `init_reweight_state(K)` or the previous step.
    alpha: Tikhonov strength α ≥ 0 (reference default 0).
    prior: [K] prior weights w⁰ (see `class_prior`; uniform is the reference default).
    gamma: macro exponent γ (reference default 1).
    max_weight: upper clip of ŵ (reference 10); None disables the clip (ŵ is still ≥ 0).
    macro: apply β (False: β ≡ 1 in the loss; the state is updated either way).
    stop_gradient: treat ŵ as a constant (see the module docstring).
    refresh_macro: bool, recompute β before this step (see above).
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere.
    eps: ε in the denominator of w*.

  Returns:
    `(loss, new_state, aux)`: scalar loss (this device's share under `axis_name`), the updated
    `ReweightState` and `ReweightAux`.

  Raises:
    ValueError: shapes that do not match (losses [B], labels [B], state and prior [K]), α < 0, γ <
      0, ε ≤ 0, a non-positive `max_weight`, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating losses or state, non-integer labels, a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> per_example = jnp.array([0.2, 0.4, 1.5, 0.9])
    >>> labels = jnp.array([0, 0, 1, 2])
    >>> state = reweight_jax.init_reweight_state(3)
    >>> loss, state, aux = reweight_jax.inverse_reweighted_loss(
    ...     per_example, labels, state, alpha=0.0, prior=jnp.ones(3), gamma=1.0)
    >>> print(f"{loss:.4f}")  # = L̄, the mean of the class means 0.3, 1.5, 0.9
    0.9000
    >>> print(np.asarray(aux.inverse_weights, float).round(4))  # w*_c ≈ L̄ / L_c
    [3.  0.6 1. ]
    >>> print(state.batch_counts)  # B_c: each class was in one batch
    [1. 1. 1.]
  """
  batch_counts, prior = check_reweight_arguments(state, prior, alpha, gamma, max_weight, eps)
  num_classes = batch_counts.shape[0]
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, num_classes, where=where)
  batch = labels.shape[0]
  per_example_loss = check_floating(per_example_loss, 1, "per_example_loss")
  check_batch_dim(per_example_loss, batch, "per_example_loss")
  real = check_where(where, batch)
  labelled = real & in_range
  valid = labelled & check_finite_rows(per_example_loss, real, "per_example_loss")

  dtype = jnp.promote_types(per_example_loss.dtype, jnp.float32)
  per_example_loss = per_example_loss.astype(dtype)
  # Slots from the labels alone (their sort, when K > B, need not wait for the losses); the
  # counts, and so every class statistic, count the valid rows only.
  slots = class_sums.class_slots(labels, labelled, num_classes, axis_name=axis_name,
                                 counted=valid)
  slot_losses, slot_present = slot_class_losses(per_example_loss, valid, slots,
                                                axis_name=axis_name)
  skipped = class_sums.skipped_rows(real, slots, axis_name=axis_name)
  weights = slot_class_weights(slot_losses, slot_present, slots, state, prior, alpha=alpha,
                              gamma=gamma, max_weight=max_weight, macro=macro,
                              stop_gradient=stop_gradient, refresh_macro=refresh_macro, eps=eps,
                              skipped=skipped)
  slot_weights = weights.weights

  example_weights = jnp.where(valid, class_sums.at_rows(slot_weights, slots), 0)
  weighted_sum = jnp.sum(example_weights * jnp.where(valid, per_example_loss, 0))
  global_valid = jnp.sum(slots.counts).astype(dtype)
  loss = class_sums.num_devices(axis_name) * weighted_sum / jnp.maximum(global_valid, 1)
  # A bad real row of the global batch makes the loss and its gradient NaN; a padding row counts
  # nowhere.
  loss = poison_unless(loss, skipped == 0)

  def to_classes(default, slot_values):
    return class_sums.scatter_to_classes(default, slot_values, slots, slot_present)

  aux = ReweightAux(
      class_losses=to_classes(jnp.zeros((num_classes,), dtype), slot_losses),
      present=to_classes(jnp.zeros((num_classes,), bool), slot_present),
      mean_class_loss=mean_class_loss(slot_losses, slot_present),
      inverse_weights=to_classes(prior.astype(dtype), weights.inverse),
      class_weights=weights.class_weights, example_weights=example_weights)
  return loss, weights.new_state, aux
