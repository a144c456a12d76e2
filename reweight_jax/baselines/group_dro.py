r"""Class-level Group DRO (Sagawa et al., "Distributionally Robust Neural Networks
for Group Shifts", ICLR 2020, arXiv 1911.08731: online group DRO, Algorithm 1; one of MR2's
comparison methods).

Groups are classes. The state is the group distribution :math:`q \in \Delta^K` (start:
`init_group_dro_q`, 1/K each), carried in the train state like any other loss state. The step loss
:math:`\sum_c q_c g_c` with global-batch class means is `class_weighted_loss`, shared with FairDRO
(`reweight_jax/fairdro.py`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_finite_rows
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_hyperparameter
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import count_skipped
from mr2_reweight_core.checks import poison_unless
from reweight_jax.inverse_weights import slot_class_losses


class GroupDROAux(NamedTuple):
  """class_losses [K]: g_c of this (global) batch (0 if absent); present bool [K]; q [K] updated;
  skipped_rows: int32 scalar, the real rows of the (global) batch left out of g_c and of the update
  of q (a label outside [0, K) or a non-finite loss; docs: "Failure modes")."""
  class_losses: jax.Array
  present: jax.Array
  q: jax.Array
  skipped_rows: jax.Array


class ClassWeightedAux(NamedTuple):
  """class_losses [K]: g_c of this (global) batch (0 if absent); present bool [K]; skipped_rows:
  int32 scalar, the real rows left out of g_c (a label outside [0, K) or a non-finite loss)."""
  class_losses: jax.Array
  present: jax.Array
  skipped_rows: jax.Array


class _BatchClasses(NamedTuple):
  """The checked batch and its global-batch class means g_c, shared by the Σ_c q_c g_c losses."""
  per_example_loss: jax.Array  # [B], promoted to at least float32
  real: jax.Array  # bool [B], not padding
  valid: jax.Array  # real, label in [0, K) and a finite loss
  slots: class_sums.ClassSlots
  class_losses: jax.Array  # [K] g_c, 0 if absent
  present: jax.Array  # bool [K]
  skipped_rows: jax.Array  # int32 scalar: real rows that are not valid, over the global batch


def _batch_classes(per_example_loss: ArrayLike, labels: ArrayLike, num_classes: int, *,
                   axis_name: str | None, where: ArrayLike | None) -> _BatchClasses:
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, num_classes, where=where)
  per_example_loss = check_floating(per_example_loss, 1, "per_example_loss")
  check_batch_dim(per_example_loss, labels.shape[0], "per_example_loss")
  dtype = jnp.promote_types(per_example_loss.dtype, jnp.float32)
  per_example_loss = per_example_loss.astype(dtype)
  real = check_where(where, labels.shape[0])
  valid = real & in_range & check_finite_rows(per_example_loss, real, "per_example_loss")
  slots = class_sums.class_slots(labels, valid, num_classes, axis_name=axis_name)
  slot_losses, slot_present = slot_class_losses(per_example_loss, valid, slots, axis_name=axis_name)
  class_losses = class_sums.scatter_to_classes(jnp.zeros((num_classes,), dtype), slot_losses, slots,
                                               slot_present)
  present = class_sums.scatter_to_classes(jnp.zeros((num_classes,), bool), slot_present, slots,
                                          slot_present)
  return _BatchClasses(per_example_loss, real, valid, slots, class_losses, present,
                       count_skipped(real, valid, axis_name))


def _weighted_share(q: jax.Array, batch: _BatchClasses, axis_name: str | None) -> jax.Array:
  """This device's share of Σ_c q_c g_c with q constant:
  N_devices · Σ_{local i} q_{y_i} ℓ_i / n_{y_i} (n global); it and its gradient are NaN if a real
  row has an out-of-range label or a non-finite loss."""
  dtype = batch.per_example_loss.dtype
  slot_weights = class_sums.gather_from_classes(
      jax.lax.stop_gradient(q).astype(dtype), batch.slots) / jnp.maximum(
          batch.slots.counts, 1.0).astype(dtype)
  example_weights = jnp.where(batch.valid, class_sums.at_rows(slot_weights, batch.slots), 0.0)
  loss = class_sums.num_devices(axis_name) * jnp.sum(
      example_weights * jnp.where(batch.valid, batch.per_example_loss, 0.0))
  return poison_unless(loss, jnp.all(batch.valid | ~batch.real))


def class_weighted_loss(per_example_loss: ArrayLike, labels: ArrayLike, q: ArrayLike, *,
                        axis_name: str | None = None, where: ArrayLike | None = None
                        ) -> tuple[jax.Array, ClassWeightedAux]:
  r"""Σ_c q_c g_c over the (global) batch with fixed class weights q; returns `(loss, aux)`.

  .. math::

      g_c = \frac{1}{n_c} \sum_{i:\, y_i = c} \ell_i, \qquad \mathrm{loss} = \sum_c q_c g_c,

  with :math:`g_c = 0` for a class absent from the batch, and q a constant:
  :math:`\partial\, \mathrm{loss} / \partial \ell_i = q_{y_i} / n_{y_i}`.

  The step loss of Group DRO (Sagawa et al., ICLR 2020, arXiv 1911.08731; with its updated q) and of
  FairDRO (Jung et al., ICLR 2023, arXiv 2303.00442), with classes as groups. q may be any real
  vector (FairDRO's q may have negative entries); it is not normalised here.

  Data parallel (`axis_name`): g_c comes from the global batch (class sums and counts psum-ed), q
  must be the same on every device, and the returned loss is this device's share
  :math:`N_\mathrm{devices} \sum_{\text{local } i} q_{y_i} \ell_i / n_{y_i}`: `lax.pmean` of it is
  the loss on the concatenated batch and `lax.pmean` of the parameter gradients is its gradient.
  Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and aux is typed
  replicated; take the gradient of `lax.pmean(loss, axis_name)`, which JAX sums over the devices
  itself (the share's own gradient is N_devices times the global one). Without `axis_name`,
  `jax.jit` over a batch laid out with `NamedSharding` (Explicit or Auto mesh axes) sees the global
  batch: the loss is the global value, aux replicated.

  B = 0 (or every row padding): loss 0, no class present. K = 1: q_0 times the mean loss of the real
  rows.

  Args:
    per_example_loss: [B] per-example losses ℓ_i.
    labels: int [B] labels in [0, K), K = q.shape[0].
    q: [K] class weights.
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere.

  Returns:
    (loss, ClassWeightedAux); a real row with an out-of-range label or a non-finite loss is left
    out of g_c (counted in `aux.skipped_rows`) and makes the loss and its gradient NaN.

  Raises:
    ValueError: losses not [B] like the labels, q not rank 1, a `where` of another shape, or
      (eagerly) a real row's label outside [0, K).
    TypeError: non-floating losses or q, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> per_example, labels = jnp.array([0.2, 0.4, 1.5, 0.9]), jnp.array([0, 0, 1, 2])
    >>> loss, aux = reweight_jax.baselines.class_weighted_loss(per_example, labels, jnp.array([0.5, 0.25, 0.25]))
    >>> print(f"{loss:.4f}", np.asarray(aux.class_losses, float).round(4))  # 0.5·0.3 + 0.25·1.5 + 0.25·0.9
    0.7500 [0.3 1.5 0.9]
  """
  q = check_floating(q, 1, "q")
  batch = _batch_classes(per_example_loss, labels, q.shape[0], axis_name=axis_name, where=where)
  loss = _weighted_share(q, batch, axis_name)
  return loss, ClassWeightedAux(batch.class_losses, batch.present, batch.skipped_rows)


def init_group_dro_q(num_classes: int) -> jax.Array:
  """q = 1/K for every class (the start of Group DRO's exponentiated-gradient ascent).

  Sagawa et al., ICLR 2020, arXiv 1911.08731, Algorithm 1 (q starts uniform).

  K = 1: (1,).

  Args:
    num_classes: K, the number of classes.

  Returns:
    float32 [K], each 1/K.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.init_group_dro_q(4))
    [0.25 0.25 0.25 0.25]
  """
  return jnp.full((num_classes,), 1.0 / num_classes, jnp.float32)


def group_dro_adjustment(class_counts: ArrayLike, c: float) -> jax.Array:
  r"""The generalisation adjustment C/√n_c of each class (n_c training counts; a class with none
  is treated as having one, as the other count-based weights here do).

  Sagawa et al., ICLR 2020, arXiv 1911.08731: the group adjustment :math:`C / \sqrt{n_g}` added to
  each group's loss before the update of q.

  K = 1: (c/√n_0,).

  Args:
    class_counts: [K] training-set class counts n_c.
    c: the constant C ≥ 0.

  Returns:
    float32 [K].

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.group_dro_adjustment(jnp.array([100, 4, 0]), c=1.0))
    [0.1 0.5 1. ]
  """
  counts = jnp.maximum(jnp.asarray(class_counts, jnp.float32), 1.0)
  return c / jnp.sqrt(counts)


def group_dro_loss(per_example_loss: ArrayLike, labels: ArrayLike, q: ArrayLike, *,
                   eta: ArrayLike = 0.01, adjustment: ArrayLike | None = None, normalize: bool = False,
                   axis_name: str | None = None, where: ArrayLike | None = None
                   ) -> tuple[jax.Array, jax.Array, GroupDROAux]:
  r"""One Group DRO step with classes as groups; returns `(loss, new_q, aux)`.

  Sagawa et al., ICLR 2020, arXiv 1911.08731, Algorithm 1 (online group DRO), with the groups the
  K classes as MR2 (Zhu et al., ICLR 2026, arXiv 2602.00205) compares it:

  .. math::

      \begin{aligned}
        g_c &= \frac{1}{n_c} \sum_{i:\, y_i = c} \ell_i, \\
        a_c &= g_c + \mathrm{adjustment}_c, \\
        q_c &\leftarrow q_c \exp\bigl(\eta\, \operatorname{sg}(a_c)\bigr), \qquad
          q \leftarrow q \,/\, \textstyle\sum_k q_k, \\
        \mathrm{loss} &= \sum_c q_c g_c,
      \end{aligned}

  with :math:`g_c = 0` for a class absent from the batch, a optionally normalised to
  :math:`a / \sum_k a_k` (`normalize`), and the loss taken with the updated q, a constant for
  back-propagation (as `class_weighted_loss`).

  Absent classes get :math:`\exp(\eta\, \mathrm{adjustment}_c)` (exp(0) without adjustment) and
  lose mass relative to the present ones. The reference adds the adjustment to g in place, so its
  logged loss includes :math:`C / \sqrt{n_c}`; here the loss is :math:`\sum_c q_c g_c` without it
  (the paper's objective). The multiplicative update is taken in log space
  (:math:`q \leftarrow \operatorname{softmax}(\log q + \eta a)`), so it neither overflows nor
  underflows to NaN.

  Data parallel (`axis_name`): g_c comes from the global batch (class sums and counts psum-ed), q is
  the same on every device, and the returned loss is this device's share
  :math:`N_\mathrm{devices} \sum_{\text{local } i} q_{y_i} \ell_i / n_{y_i}`: `lax.pmean` of it is
  the loss on the concatenated batch and `lax.pmean` of the parameter gradients is its gradient.
  Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and the new q and
  aux are typed replicated (`out_specs=P()`); take the gradient of `lax.pmean(loss, axis_name)`,
  which JAX sums over the devices itself (the share's own gradient is N_devices times the global
  one). Without `axis_name`, `jax.jit` over a batch laid out with `NamedSharding` (Explicit or Auto
  mesh axes) sees the global batch: the loss is the global value, q and aux replicated.

  B = 0 (or every row padding): loss 0 and q unchanged (no class present). K = 1: q = (1,), the loss
  is the mean loss of the real rows.

  Args:
    per_example_loss: [B] per-example losses ℓ_i (cross-entropy in the reference).
    labels: int [B] labels in [0, K), K = q.shape[0].
    q: [K] the group distribution from the previous step (`init_group_dro_q` at the start).
    eta: step size η ≥ 0 of the ascent (0.01).
    adjustment: optional [K] non-negative adjustment, e.g. `group_dro_adjustment(counts, C)`.
    normalize: divide the adjusted losses by their sum before the update.
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere.

  Returns:
    (loss, new_q, GroupDROAux); a real row with an out-of-range label or a non-finite loss is
    left out of g_c and of the update of q (counted in `aux.skipped_rows`) and makes the loss and
    its gradient NaN.

  Raises:
    ValueError: η < 0, an `adjustment` that is not [K], losses not [B] like the labels, or (eagerly)
      a label outside [0, K).
    TypeError: non-floating losses or q, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> per_example, labels = jnp.array([0.2, 0.4, 1.5, 0.9]), jnp.array([0, 0, 1, 2])
    >>> q = reweight_jax.baselines.init_group_dro_q(3)
    >>> loss, q, aux = reweight_jax.baselines.group_dro_loss(per_example, labels, q, eta=1.0)
    >>> print(f"{loss:.4f}", np.asarray(q, float).round(4))  # mass moves to the class with the largest loss
    1.1266 [0.1628 0.5405 0.2967]
  """
  q = check_floating(q, 1, "q")
  num_classes = q.shape[0]
  eta, eta_ok = check_hyperparameter(eta, "eta", 0.0, what="a step size η")
  batch = _batch_classes(per_example_loss, labels, num_classes, axis_name=axis_name, where=where)
  class_losses = batch.class_losses
  dtype = class_losses.dtype
  adjusted = jax.lax.stop_gradient(class_losses)
  if adjustment is not None:
    adjusted = adjusted + check_class_vector(adjustment, num_classes, "adjustment").astype(dtype)
  if normalize:
    adjusted = adjusted / jnp.maximum(jnp.sum(adjusted), jnp.finfo(dtype).tiny)
  new_q = jax.nn.softmax(jnp.log(q.astype(dtype)) + eta * adjusted)
  if eta_ok is not True:  # a traced η < 0: NaN, never mass moved towards the smallest losses
    new_q = jnp.where(eta_ok, new_q, jnp.nan)
  loss = _weighted_share(new_q, batch, axis_name)
  new_q = new_q.astype(q.dtype)
  return loss, new_q, GroupDROAux(class_losses, batch.present, new_q, batch.skipped_rows)
