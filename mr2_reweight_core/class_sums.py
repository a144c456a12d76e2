"""Per-class sums and counts over the (global) batch, in O(B·d + K) without a one-hot product.

Every class statistic of both libraries is built from the two reductions here: the classes present
in the batch are given *slots*, per-example values are summed into their slot with
`jax.ops.segment_sum`, and under data parallelism the slot sums are `psum`-reduced, so the result is
the one a single device would compute on the concatenated global batch (sums and counts, never means
of means).

Slots: when K ≤ global batch size, slot k is class k (the psum moves K values per feature). When
K > global batch size (ImageNet or iNaturalist with small batches), the labels are all-gathered and
the present classes are compacted with `jnp.unique`, so the work and the communication are bounded by
the global batch size instead of K, and per-class state is touched by one gather and one scatter.

The three ways to split a batch over devices, and what a function of both libraries returns:

* `jax.jit` over a batch laid out with `NamedSharding`, Explicit or Auto mesh axes, no `axis_name`:
  the function sees the global batch. Losses and their gradients are the global values, per-class
  results replicated (over Explicit axes each per-class reduction says so: `explicit_mesh`).
* `pmap`, or `jax.shard_map(..., check_vma=False)`, with `axis_name`: per-class results are the
  global batch's on every device; a loss is this device's share (`num_devices`): `lax.pmean` of the
  shares is the global loss, and `lax.pmean` of each device's gradient of its share is the global
  gradient.
* `jax.shard_map` with its default `check_vma=True`, with `axis_name`: the same values; per-class
  results are typed replicated (return them with `out_specs=P()`), the loss is still the share
  (typed varying). Differentiate `lax.pmean(loss, axis_name)`: JAX sums a replicated parameter's
  cotangent over the devices itself, so that gradient is the global one (the gradient of the share
  alone is N_devices times it, for parameters and rows alike; a further `pmean` changes nothing).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import checks
from mr2_reweight_core import explicit_mesh


class ClassSlots(NamedTuple):
  """Where each example's class statistics are summed. S = K exactly when slot k is class k
  (K ≤ global batch size); compacted slots are fewer (S ≤ B < K).

  Attributes:
    classes: int32 [S], the class of each slot; `num_classes` marks an empty slot.
    counts: float32 [S], number of valid examples of the slot's class in the global batch.
    slot: int32 [B], the slot of each local example (an empty slot for masked examples).
  """
  classes: jax.Array
  counts: jax.Array
  slot: jax.Array


def global_batch(axis_name: str | None, *arrays) -> tuple[tuple, jax.Array | int]:
  """The global batch of per-row arrays and this device's row offset in it.

  Without an axis: the arrays as given (all-gathered when they are laid out over Explicit mesh
  axes, `explicit_mesh.gathered`) and offset 0. Under `axis_name`: each array all-gathered along its
  first axis (tiled, in device order; gradients flow back through the gather to the device that
  owns each row) and offset = axis_index · B_local, so local row i is global row offset + i.
  """
  if axis_name is None:
    return tuple(explicit_mesh.gathered(x) for x in arrays), 0
  gathered = tuple(jax.lax.all_gather(x, axis_name, tiled=True) for x in arrays)
  return gathered, jax.lax.axis_index(axis_name) * arrays[0].shape[0]


def replicated_batch(axis_name: str | None, *arrays) -> tuple[tuple, jax.Array | int]:
  """`global_batch` for arrays that carry no gradient (labels, masks, positions, stop-gradient
  values), typed as what they are: the same on every device.

  Under `shard_map` with `check_vma=True` an `all_gather` is typed varying (it transposes to a
  reduce-scatter), so per-class state computed from it could not be returned with `out_specs=P()`;
  here the gather is `all_gather(..., to='invarying')` (the same all-gather, transposed to each
  device's slice). Under `pmap` or `check_vma=False` the type is not tracked and the two are one.
  """
  if axis_name is None:
    return global_batch(None, *arrays)
  gathered = tuple(jax.lax.all_gather(x, axis_name, tiled=True, to="invarying") for x in arrays)
  return gathered, jax.lax.axis_index(axis_name) * arrays[0].shape[0]


def num_devices(axis_name: str | None) -> int:
  """Devices along the data-parallel axis (1 without one).

  Losses reduced over the global batch are returned as this device's share, N·(local sum)/(global
  normaliser), so that `lax.pmean` of the shares, and of their gradients, is the global value
  (under `shard_map`'s `check_vma=True`: the gradient of `lax.pmean` of the share; see the module
  docstring).
  """
  return 1 if axis_name is None else jax.lax.axis_size(axis_name)


def _global_batch_size(batch: int, axis_name: str | None) -> int:
  return batch * num_devices(axis_name)


def class_slots(labels: jax.Array, valid: jax.Array, num_classes: int, *,
                axis_name: str | None = None, counted: jax.Array | None = None) -> ClassSlots:
  """Assigns the classes of the (global) batch to summation slots.

  Args:
    labels: int [B] labels of the local batch (already range-checked).
    valid: bool [B], False for padding or out-of-range labels; such examples count nowhere.
    num_classes: K, the number of classes.
    axis_name: pmap/shard_map axis over which the global batch is split, or None.
    counted: optional bool [B] within `valid`: the rows the counts count (default `valid`). The
      slots come from `labels` and `valid` alone, so that with a `valid` of labels and `where`
      only, the compiled step can assign them (a sort of the labels when K > B) beside the work
      that `counted` waits for (a loss and its finiteness), not after it.
  """
  batch = labels.shape[0]
  global_batch = _global_batch_size(batch, axis_name)
  counted = valid if counted is None else counted
  masked_labels = jnp.where(valid, labels, num_classes).astype(jnp.int32)
  if num_classes <= global_batch:
    counts = jax.ops.segment_sum(counted.astype(jnp.float32), masked_labels,
                                 num_segments=num_classes,
                                 **explicit_mesh.replicated_out(masked_labels))
    if axis_name is not None:
      counts = jax.lax.psum(counts, axis_name)
    return ClassSlots(jnp.arange(num_classes, dtype=jnp.int32), counts, masked_labels)

  (all_labels, all_counted), offset = replicated_batch(axis_name, masked_labels, counted)
  classes, inverse = jnp.unique(
      all_labels, size=global_batch, fill_value=num_classes, return_inverse=True)
  inverse = inverse.reshape(-1).astype(jnp.int32)
  counts = jax.ops.segment_sum(
      ((all_labels < num_classes) & all_counted).astype(jnp.float32), inverse,
      num_segments=global_batch)
  slot = jax.lax.dynamic_slice_in_dim(inverse, offset, batch)
  return ClassSlots(classes.astype(jnp.int32), counts,
                    explicit_mesh.laid_out_like(slot, masked_labels))


def skipped_rows(real: jax.Array, slots: ClassSlots, *, axis_name: str | None = None
                 ) -> jax.Array:
  """int32 scalar: the real rows (`real`, inside `where`) of the global batch that `slots.counts`
  leave out (an out-of-range label or a non-finite value), the same on every device.

  `checks.count_skipped(real, counted, axis_name)` from the counts the statistics take anyway: the
  real rows less the counts' sum (exact: float32 sums of whole numbers below 2²⁴), without another
  pass over the rows' masks (with no `where`, `real` is all True and its sum a constant of the
  compiled program).
  """
  real_rows = jnp.sum(real, dtype=jnp.int32)
  if axis_name is not None:
    real_rows = jax.lax.psum(real_rows, axis_name)
  return real_rows - jnp.sum(slots.counts).astype(jnp.int32)


def example_class_counts(labels: jax.Array, valid: jax.Array, num_classes: int, *,
                         axis_name: str | None = None) -> jax.Array:
  """n_{y_i} [B]: the number of valid examples of each local example's class in the (global) batch.

  On one device a count per class (K floats, one scatter-add, one gather: no sort even when K > B);
  under `axis_name` the slots' psum-reduced counts (`class_slots`). `valid` must exclude
  out-of-range labels; an example that is not valid gets NaN (callers mask it).
  """
  if axis_name is not None:
    slots = class_slots(labels, valid, num_classes, axis_name=axis_name)
    return jnp.where(valid, at_rows(slots.counts, slots), jnp.nan)
  masked_labels = jnp.where(valid, labels, num_classes).astype(jnp.int32)
  counts = jnp.zeros((num_classes,), jnp.float32).at[masked_labels].add(
      1.0, mode="drop", **explicit_mesh.replicated_out(masked_labels))
  return checks.take_class_values(counts, labels, valid)


def slot_sum(values: ArrayLike, slots: ClassSlots, *, axis_name: str | None = None) -> jax.Array:
  """Σ over the global batch of `values` [B, ...] per slot → [S, ...] (psum-reduced)."""
  sums = jax.ops.segment_sum(values, slots.slot, num_segments=slots.classes.shape[0],
                             **explicit_mesh.replicated_out(slots.slot))
  if axis_name is not None:
    sums = jax.lax.psum(sums, axis_name)
  return sums


def at_rows(slot_values: jax.Array, slots: ClassSlots) -> jax.Array:
  """Each local row's slot value [B, ...] from `slot_values` [S, ...] (laid out like the rows under
  Explicit mesh axes)."""
  return explicit_mesh.take(slot_values, slots.slot)


def _one_slot_per_class(per_class: jax.Array, slots: ClassSlots) -> bool:
  # Slot k is class k: a select, not a scatter or gather (each its own kernel on XLA:CPU).
  return slots.classes.shape[0] == per_class.shape[0]


def scatter_to_classes(per_class: jax.Array, slot_values: ArrayLike, slots: ClassSlots,
                       present: jax.Array) -> jax.Array:
  """Writes `slot_values` [S, ...] into `per_class` [K, ...] for slots where `present`; others kept."""
  if _one_slot_per_class(per_class, slots):
    mask = present.reshape(present.shape + (1,) * (per_class.ndim - 1))
    return jnp.where(mask, jnp.asarray(slot_values, per_class.dtype), per_class)
  num_classes = per_class.shape[0]
  target = jnp.where(present, slots.classes, num_classes)
  return per_class.at[target].set(slot_values, mode="drop", unique_indices=False)


def gather_from_classes(per_class: jax.Array, slots: ClassSlots) -> jax.Array:
  """Reads `per_class` [K, ...] at each slot's class ([S, ...]; empty slots read class K−1)."""
  if _one_slot_per_class(per_class, slots):
    return per_class
  return per_class[jnp.minimum(slots.classes, per_class.shape[0] - 1)]
