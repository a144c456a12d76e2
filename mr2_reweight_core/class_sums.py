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
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from mr2_reweight_core import checks

Array = Any


class ClassSlots(NamedTuple):
  """Where each example's class statistics are summed.

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

  Without an axis: the arrays as given and offset 0. Under `axis_name`: each array all-gathered
  along its first axis (tiled, in device order; gradients flow back through the gather to the
  device that owns each row) and offset = axis_index · B_local, so local row i is global row
  offset + i.
  """
  if axis_name is None:
    return arrays, 0
  gathered = tuple(jax.lax.all_gather(x, axis_name, tiled=True) for x in arrays)
  return gathered, jax.lax.axis_index(axis_name) * arrays[0].shape[0]


def num_devices(axis_name: str | None) -> int:
  """Devices along the data-parallel axis (1 without one).

  Losses reduced over the global batch are returned as this device's share, N·(local sum)/(global
  normaliser), so that `lax.pmean` of the shares, and of their gradients, is the global value.
  """
  return 1 if axis_name is None else jax.lax.axis_size(axis_name)


def _global_batch_size(batch: int, axis_name: str | None) -> int:
  return batch * num_devices(axis_name)


def class_slots(labels: Array, valid: Array, num_classes: int, *,
                axis_name: str | None = None) -> ClassSlots:
  """Assigns the classes of the (global) batch to summation slots.

  Args:
    labels: int [B] labels of the local batch (already range-checked).
    valid: bool [B], False for padding or out-of-range labels; such examples count nowhere.
    num_classes: K.
    axis_name: pmap/shard_map axis over which the global batch is split, or None.
  """
  batch = labels.shape[0]
  global_batch = _global_batch_size(batch, axis_name)
  masked_labels = jnp.where(valid, labels, num_classes).astype(jnp.int32)
  if num_classes <= global_batch:
    counts = jax.ops.segment_sum(valid.astype(jnp.float32), masked_labels, num_segments=num_classes)
    if axis_name is not None:
      counts = jax.lax.psum(counts, axis_name)
    return ClassSlots(jnp.arange(num_classes, dtype=jnp.int32), counts, masked_labels)

  if axis_name is None:
    all_labels, offset = masked_labels, 0
  else:
    all_labels = jax.lax.all_gather(masked_labels, axis_name, tiled=True)
    offset = jax.lax.axis_index(axis_name) * batch
  classes, inverse = jnp.unique(
      all_labels, size=global_batch, fill_value=num_classes, return_inverse=True)
  inverse = inverse.reshape(-1).astype(jnp.int32)
  counts = jax.ops.segment_sum(
      (all_labels < num_classes).astype(jnp.float32), inverse, num_segments=global_batch)
  slot = jax.lax.dynamic_slice_in_dim(inverse, offset, batch)
  return ClassSlots(classes.astype(jnp.int32), counts, slot)


def example_class_counts(labels: Array, valid: Array, num_classes: int, *,
                         axis_name: str | None = None) -> jax.Array:
  """n_{y_i} [B]: the number of valid examples of each local example's class in the (global) batch.

  On one device a count per class (K floats, one scatter-add, one gather: no sort even when K > B);
  under `axis_name` the slots' psum-reduced counts (`class_slots`). `valid` must exclude
  out-of-range labels; an example that is not valid gets NaN (callers mask it).
  """
  if axis_name is not None:
    slots = class_slots(labels, valid, num_classes, axis_name=axis_name)
    return jnp.where(valid, slots.counts[slots.slot], jnp.nan)
  masked_labels = jnp.where(valid, labels, num_classes).astype(jnp.int32)
  counts = jnp.zeros((num_classes,), jnp.float32).at[masked_labels].add(1.0, mode="drop")
  return checks.take_class_values(counts, labels, valid)


def slot_sum(values: Array, slots: ClassSlots, *, axis_name: str | None = None) -> jax.Array:
  """Σ over the global batch of `values` [B, ...] per slot → [S, ...] (psum-reduced)."""
  sums = jax.ops.segment_sum(values, slots.slot, num_segments=slots.classes.shape[0])
  if axis_name is not None:
    sums = jax.lax.psum(sums, axis_name)
  return sums


def scatter_to_classes(per_class: Array, slot_values: Array, slots: ClassSlots,
                       present: Array) -> jax.Array:
  """Writes `slot_values` [S, ...] into `per_class` [K, ...] for slots where `present`; others kept."""
  num_classes = per_class.shape[0]
  target = jnp.where(present, slots.classes, num_classes)
  return per_class.at[target].set(slot_values, mode="drop", unique_indices=False)


def gather_from_classes(per_class: Array, slots: ClassSlots) -> jax.Array:
  """Reads `per_class` [K, ...] at each slot's class ([S, ...]; empty slots read class K−1)."""
  return per_class[jnp.minimum(slots.classes, per_class.shape[0] - 1)]
