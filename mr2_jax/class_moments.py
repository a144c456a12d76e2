r"""Global-batch class moments of MR2's statistics (Zhu et al., ICLR 2026, arXiv 2602.00205):
a_k = ‖m_k‖_p² and v_k = mean_{i: y_i = k} ‖φ_i − m_k‖_p² per slot, reduced as sums and counts,
and the rows whose features are finite, found from the moments themselves
(`moments_of_finite_rows`). `class_stats` folds them into the carried EMA statistics.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import class_order as class_order_lib
from mr2_reweight_core import class_sums
from mr2_reweight_core import checks
from mr2_reweight_core import explicit_mesh
from mr2_jax.lp_norm import lp_sq_norm


def _reference_rows(features: jax.Array, valid: ArrayLike, slots: class_sums.ClassSlots,
                    axis_name: str | None) -> tuple[jax.Array, jax.Array]:
  """The reference row of each slot [S, d] and of each local row's slot [B, d]: the class's first
  valid row of the global batch (device order, then row order), the same on every device. Empty
  slots get zeros.

  On one device both are gathers from `features` (the per-row one straight from it, not through the
  slots' rows: one pass over [B, d] fewer). Under `axis_name` the owner of each slot's row is found
  with a `pmin` of global row positions (S int32) and the row is broadcast by a `psum` to which only
  the owner adds a non-zero: x + 0 = x, so every device holds the owner's row bit for bit, the row a
  single device would pick. Rows laid out over Explicit mesh axes (`jax.jit` of a sharded batch)
  are read the same way: each slot's row is a slot sum of the rows with every row but the first
  zeroed (an all-reduce of S·d floats, where a gather at the S positions would all-gather the
  B·d rows).
  """
  batch, num_slots = features.shape[0], slots.classes.shape[0]
  offset = 0 if axis_name is None else jax.lax.axis_index(axis_name) * batch
  position = jnp.arange(batch, dtype=jnp.int32) + offset
  unused = jnp.iinfo(jnp.int32).max
  first = jax.ops.segment_min(jnp.where(valid, position, unused), slots.slot,
                              num_segments=num_slots,
                              **explicit_mesh.replicated_out(slots.slot))
  if axis_name is None and explicit_mesh.rows_split(features):
    is_first = valid & (position == explicit_mesh.take(first, slots.slot))
    rows = class_sums.slot_sum(jnp.where(is_first[:, None], features, 0.0), slots)
    return rows, class_sums.at_rows(rows, slots)
  if axis_name is not None:
    first = jax.lax.pmin(first, axis_name)
  local = first - offset
  mine = (first != unused) & (local >= 0) & (local < batch)
  local = jnp.clip(local, 0, batch - 1)
  rows = jnp.where(mine[:, None], features[local], 0.0)
  if axis_name is None:
    return rows, features[local[slots.slot]]
  rows = jax.lax.psum(rows, axis_name)
  return rows, rows[slots.slot]


def batch_class_moments(features: jax.Array, labels: jax.Array, valid: jax.Array, num_classes: int, *,
                        p: float = 2.0, axis_name: str | None = None,
                        sorted_by: jax.Array | None = None):
  """Global-batch class moments, MR2's (a_k, v_k), per slot (see `class_sums`).

  Two passes, both reduced as sums and counts, on rows shifted by a reference row r_k of their own
  class (`_reference_rows`: the class's first row of the global batch, the same on every device):
  u_i = φ_i − r_k, δ_k = Σ_i u_i / n_k, m_k = r_k + δ_k, a_k = ‖m_k‖_p², and
  v_k = Σ_i ‖u_i − δ_k‖_p² / n_k (= Σ_i ‖φ_i − m_k‖_p² / n_k exactly).

  The shift is what keeps v_k accurate: without it φ_i − m_k carries the rounding of m_k, ~ε·‖φ‖
  per coordinate, so v_k is off by ~(ε·‖φ‖)² whatever the class's spread (the slow property run:
  two collapsed classes at ‖φ‖ ≈ 9·10⁴ gave V = 8.5·10⁻⁶ and 1.9·10⁻⁴ instead of 0, s̄ = 9.8·10⁻⁵,
  and the loss off by 1.8·10⁻⁵ through ℓ_s̄). With it the rounding is relative to ‖φ_i − r_k‖, the
  class's own spread: a collapsed class has u = 0 and v_k = 0 exactly. Each slot's result depends
  only on its own class's rows, so a non-finite row cannot change another class.

  On one device with more classes than rows (K > B, ImageNet-size label sets) the same sums are
  taken over the class-sorted batch instead (`sorted_moments`): a class seen once has m_k = φ_i,
  a_k = ‖φ_i‖_p² and v_k = 0 with no sum at all, and only the rows with a partner are summed.
  Rows split over Explicit mesh axes (`jax.jit` of a sharded batch) take the slot sums whatever
  K: the sort would all-gather the rows, where the sums cross devices as min(K, B)·d floats.

  `sorted_by`: the mask the class sort reads (`class_order_lib.class_order`; default `valid`).

  Returns:
    (slots, a [S], v [S]); slots with no example have zeros.
  """
  if (axis_name is None and num_classes > labels.shape[0]
      and not explicit_mesh.rows_split(features)):
    return sorted_moments(features, labels, valid, num_classes, p, sorted_by=sorted_by)
  return slot_moments(features, labels, valid, num_classes, p, axis_name)


def slot_moments(features, labels, valid, num_classes, p, axis_name):
  """`batch_class_moments` by slot sums (`class_sums`), psum-reduced under `axis_name`."""
  slots = class_sums.class_slots(labels, valid, num_classes, axis_name=axis_name)
  reference, row_reference = _reference_rows(features, valid, slots, axis_name)
  shifted = jnp.where(valid[:, None], features - row_reference, 0.0)
  sums = class_sums.slot_sum(shifted, slots, axis_name=axis_name)
  counts = jnp.maximum(slots.counts, 1.0)[:, None].astype(features.dtype)
  offsets = sums / counts
  class_means = reference + offsets
  deviation = lp_sq_norm(shifted - class_sums.at_rows(offsets, slots), p, where=valid)
  deviation = jnp.where(valid, deviation, 0.0)
  dev_sums = class_sums.slot_sum(deviation, slots, axis_name=axis_name)
  a = jnp.where(slots.counts > 0, lp_sq_norm(class_means, p, where=slots.counts > 0), 0.0)
  return slots, a, dev_sums / counts[:, 0]


def _prefix_moments(size: int, features: jax.Array, order: class_order_lib.ClassOrder, p: float
                    ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(a, v, n) at each class's first sorted position among the first `size` sorted rows (0
  elsewhere), padded to [B]: `batch_class_moments`' shifted sums over the classes with a partner,
  which all lie in that prefix. Runs of `size` rows hold at most size / 2 such classes."""
  batch = features.shape[0]
  position = jnp.arange(size, dtype=jnp.int32)
  # Rows without a partner are dropped by index (`run` = runs) and masked (`live`), not zeroed.
  shifted, live = class_order_lib.centred_prefix(features, order, size, zero_unpaired=False)
  starts = live & (order.first[:size] == position)
  runs = size // 2
  run = jnp.where(live, jnp.cumsum(starts, dtype=jnp.int32) - 1, runs)  # `runs`: dropped
  sums = jax.ops.segment_sum(shifted, run, num_segments=runs, mode="drop")
  counts = jax.ops.segment_sum(live.astype(features.dtype), run, num_segments=runs, mode="drop")
  safe_counts = jnp.maximum(counts, 1.0)
  offsets = sums / safe_counts[:, None]
  own_run = jnp.minimum(run, runs - 1)
  deviation = jnp.where(live, lp_sq_norm(shifted - offsets[own_run], p, where=live), 0.0)
  v = jax.ops.segment_sum(deviation, run, num_segments=runs, mode="drop") / safe_counts
  # Each run's reference row is its first row's: the row at the run's first sorted position.
  run_start = jax.ops.segment_min(position, run, num_segments=runs, mode="drop")
  run_reference = features[order.order[jnp.clip(run_start, 0, size - 1)]]
  a = lp_sq_norm(run_reference + offsets, p, where=counts > 0)

  def at_starts(per_run):
    return jnp.pad(jnp.where(starts, per_run[own_run], 0.0), (0, batch - size))

  return at_starts(a), at_starts(v), at_starts(counts)


def sorted_moments(features: jax.Array, labels: jax.Array, valid: jax.Array, num_classes: int,
                    p: float, *, sorted_by: jax.Array | None = None
                    ) -> tuple[class_sums.ClassSlots, jax.Array, jax.Array]:
  """`batch_class_moments` on one device for K > B, over the class-sorted batch
  (`mr2_reweight_core.class_order`): one slot per sorted position, holding its class when the position is
  the class's first. A singleton class gets a_k = ‖φ_i‖_p², v_k = 0 (the shifted sums' values
  exactly: u_i = 0, m_k = r_k = φ_i); the classes with a partner are summed by the branch of a
  `lax.switch` that reads only the smallest prefix of P/8, P/4, P/2 or P sorted rows holding them
  (each class's rows in batch order, as the slot sums add them)."""
  order, _ = class_order_lib.class_order(labels, valid, sorted_by=sorted_by)
  sizes = tuple(s for s in class_order_lib.prefix_sizes(labels.shape[0]) if s >= 2)
  if sizes:
    a, v, counts = jax.lax.switch(
        class_order_lib.smallest_prefix(sizes, order.active),
        [functools.partial(_prefix_moments, size, p=p) for size in sizes], features, order)
  else:  # one row: no class has a partner
    a = v = counts = jnp.zeros(labels.shape, features.dtype)
  single = valid[order.order] & (order.key == class_order_lib.MASKED)
  a = jnp.where(single, lp_sq_norm(features, p, where=valid)[order.order], a)
  counts = jnp.where(single, 1.0, counts)
  classes = jnp.where(counts > 0, labels[order.order], num_classes).astype(jnp.int32)
  own = order.inverse
  slot = jnp.where(order.key[own] != class_order_lib.MASKED, order.first[own], own)
  return class_sums.ClassSlots(classes, counts, slot), a, v


def per_device_moments(features, labels, valid, num_classes, p, axis_name):
  """Count-weighted means over devices of each device's own (a_k, v_k), as dense [K] vectors.

  Only 3·K scalars cross devices. Returns (slots over all K classes, a [K], v [K]).
  """
  local_slots, local_a, local_v = batch_class_moments(features, labels, valid, num_classes, p=p)
  local_n = local_slots.counts
  target = jnp.where(local_n > 0, local_slots.classes, num_classes)
  moments = jnp.stack([local_n * local_a, local_n * local_v, local_n], axis=-1)
  totals = jnp.zeros((num_classes, 3), moments.dtype).at[target].add(moments, mode="drop")
  totals = jax.lax.psum(totals, axis_name)
  counts = totals[:, 2]
  safe = jnp.maximum(counts, 1.0)
  slots = class_sums.ClassSlots(classes=jnp.arange(num_classes, dtype=jnp.int32), counts=counts,
                                slot=jnp.zeros(labels.shape, jnp.int32))
  return slots, totals[:, 0] / safe, totals[:, 1] / safe


def moments(features, labels, valid, sorted_by, num_classes, p, axis_name, reduction):
  """The batch's (slots, a, v) of the rows in `valid`, reduced as `reduction` says."""
  if reduction == "per_device" and axis_name is not None:
    return per_device_moments(features, labels, valid, num_classes, p, axis_name)
  return batch_class_moments(features, labels, valid, num_classes, p=p, axis_name=axis_name,
                             sorted_by=sorted_by)


def moments_of_finite_rows(
    features: jax.Array, labelled: jax.Array,
    moments: Callable[[jax.Array], tuple[class_sums.ClassSlots, jax.Array, jax.Array]]
) -> tuple[jax.Array, class_sums.ClassSlots, jax.Array, jax.Array]:
  """(valid, slots, a, v): the moments of the labelled rows whose features are finite, without a
  pass over [B, d] for them unless one is not.

  The moments are first taken over every labelled row. A non-finite row makes its class's a_k or
  v_k non-finite (NaN propagates through the sums; an infinite entry gives ∞ − ∞ = NaN in the
  shifted rows or their deviations), so when every present class's a_k and v_k are finite, every
  labelled row was finite and these are the moments. Otherwise (a non-finite row, or a class whose
  moments overflow float32) a `lax.cond` takes the finite rows (`checks.finite_rows`) and the
  moments again, those of the up-front check bit for bit. The predicate reads the global moments,
  so every device takes the same branch. The pass over [B, d] that the up-front check costs is
  paid only on a bad batch, and nothing downstream waits for it.
  """
  slots, a, v = moments(labelled)
  suspect = jnp.any((slots.counts > 0) & ~(jnp.isfinite(a) & jnp.isfinite(v)))

  def recheck(features, labelled):
    valid = labelled & checks.finite_rows(features)
    return (valid, *moments(valid))

  def keep(features, labelled):
    del features
    return labelled, slots, a, v

  if checks.is_concrete(suspect):  # eagerly: the moments again op by op, as the clean rows' are
    return (recheck if bool(suspect) else keep)(features, labelled)
  return jax.lax.cond(suspect, recheck, keep, features, labelled)
