"""The (global) batch sorted by class, with the rows that share their class with no other row last.

Per-class work over a batch — pair terms (MR2's ℓ_s̄), class sums — only concerns classes with at
least two rows once the singletons' trivial values are known, and when K ≫ B most rows are
singletons (B = 512 over K = 1000 classes: ~60 % of the rows; over K = 8142: ~94 %). Sorting those
rows last puts every row with a partner in a prefix of `active` rows, and a branch of a `lax.switch`
that reads only the first P/8, P/4, P/2 or P sorted rows (`prefix_sizes`, `smallest_prefix`) then
does the work at a static size proportional to the rows that need it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

MASKED = jnp.iinfo(jnp.int32).max  # the sort key of a row in no class with a partner


class ClassOrder(NamedTuple):
  """The batch sorted by class, rows without a partner last.

  `order` sorts the rows (stable) so that the rows whose class has another valid row in the batch
  come first, by class, and the others (singletons, masked rows) after them; `inverse` undoes it.
  In sorted order, `key` is the label of a row with a partner and `MASKED` for the others (they
  match nothing), and `first[r]` is the sorted position of the first row of sorted row r's class
  (the class's first row in batch order). `active` counts the rows with a partner: sorted rows from
  `active` on are singletons or masked.
  """
  key: jax.Array      # int32 [B], in sorted order
  order: jax.Array    # int32 [B]
  inverse: jax.Array  # int32 [B]
  first: jax.Array    # int32 [B], in sorted positions
  active: jax.Array   # int32 scalar


def runs(key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """For a sorted key: each position's run start and run length (positions of equal keys)."""
  rows = key.shape[0]
  position = jnp.arange(rows, dtype=jnp.int32)
  change = key[1:] != key[:-1]
  starts = jnp.concatenate([jnp.ones((1,), bool), change])
  ends = jnp.concatenate([change, jnp.ones((1,), bool)])
  first = jax.lax.cummax(jnp.where(starts, position, 0))
  last = jax.lax.cummin(jnp.where(ends, position, rows - 1), reverse=True)
  return first, last - first + 1


def _valid_first(order: jax.Array, valid: jax.Array) -> jax.Array:
  """`order` with its `valid` entries first, each part in its order (a stable partition by one
  running count, `_partition`, and a scatter)."""
  destination, _ = _partition(valid)
  return jnp.zeros_like(order).at[destination].set(order, unique_indices=True)


def _partition(first: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(int32 [B], int32 scalar): each row's place in a stable partition of the rows, the `first`
  ones first, and how many rows are `first`.

  From one running count c of `first`: a `first` row goes to c − 1, another to
  n_first + (its position − c) (the other rows before it), with n_first the count's last entry.
  One running count where there were two and a sum: XLA:CPU lowers each running count of B = 512
  entries to several kernels (`mr2_loss` at B = 512, d = 64, K = 100: 126 compiled kernels against
  142 with the two counts)."""
  rows = first.shape[0]
  running = jnp.cumsum(first, dtype=jnp.int32)
  count = running[-1] if rows else jnp.int32(0)
  position = jnp.arange(rows, dtype=jnp.int32)
  return jnp.where(first, running - 1, count + position - running), count


def class_order(labels: jax.Array, valid: jax.Array, *, sorted_by: jax.Array | None = None
                ) -> tuple[ClassOrder, jax.Array]:
  """Sorts the batch by class, rows without a partner last; returns (ClassOrder, the largest class
  count among valid rows).

  `sorted_by` (bool [B], every valid row in it): the rows whose labels the sort reads, the others
  of them then moved after the valid rows (a stable partition, O(B)). With a mask of the labels
  and `where` alone the compiled step can sort before the rest of `valid` (a check of the
  features) is known: beside the cross-entropy's pass over the logits, say, not after it.
  """
  rows = labels.shape[0]
  position = jnp.arange(rows, dtype=jnp.int32)
  if sorted_by is None:
    sorted_by = valid
  by_label = jnp.argsort(jnp.where(sorted_by, labels, MASKED).astype(jnp.int32),
                         stable=True).astype(jnp.int32)
  if sorted_by is not valid:
    by_label = _valid_first(by_label, valid[by_label])
  label_key = jnp.where(valid, labels, MASKED).astype(jnp.int32)[by_label]
  _, count = runs(label_key)
  in_class = label_key != MASKED
  largest = jnp.max(jnp.where(in_class, count, 0), initial=0)
  paired = in_class & (count > 1)
  # A stable partition of the label-sorted rows (each class stays contiguous and in batch order):
  # the paired rows to 0 … active − 1 and the others after them, by one running count (a scatter,
  # not a second sort: XLA:CPU sorts 512 keys in ~0.1 ms).
  destination, active = _partition(paired)
  regroup = jnp.zeros((rows,), jnp.int32).at[destination].set(position, unique_indices=True)
  order = by_label[regroup]
  key = jnp.where(paired, label_key, MASKED)[regroup]
  inverse = jnp.zeros((rows,), jnp.int32).at[order].set(position, unique_indices=True)
  first, _ = runs(key)
  return ClassOrder(key, order, inverse, first, active), largest


def pair_count(order: ClassOrder) -> jax.Array:
  """Σ_k n_k (n_k − 1) / 2, the same-class pairs of the batch (int32 scalar): each row with a
  partner pairs with the rows of its class sorted before it (its position − its class's first)."""
  position = jnp.arange(order.key.shape[0], dtype=jnp.int32)
  return jnp.sum(jnp.where(order.key != MASKED, position - order.first, 0), dtype=jnp.int32)


def padded(order: ClassOrder, rows: int) -> ClassOrder:
  """`order` extended to `rows` sorted positions: the extra positions read row 0, match nothing
  (key `MASKED`) and are their own reference (`first`)."""
  pad = rows - order.order.shape[0]
  return order._replace(
      order=jnp.pad(order.order, (0, pad)),
      key=jnp.pad(order.key, (0, pad), constant_values=MASKED),
      first=jnp.concatenate([order.first, jnp.arange(order.first.shape[0], rows, dtype=jnp.int32)]))


def centred_prefix(features: jax.Array, order: ClassOrder, size: int, *,
                   zero_unpaired: bool = True) -> tuple[jax.Array, jax.Array]:
  """(u [size, d], live [size]): the first `size` class-sorted rows, each minus its class's
  reference row (the class's first sorted row: its first row in batch order), and whether the row
  has a partner. All the rows with a partner lie in a prefix of `active` rows, so a `size` ≥ active
  sees every class that has one.

  Rows without a partner are 0 when `zero_unpaired` (a caller that multiplies them by a zero
  weight, where a non-finite row would give NaN); otherwise they hold any finite or non-finite
  value, for callers that drop them by index (one pass over [size, d] fewer)."""
  live = order.key[:size] != MASKED
  rows = features[order.order[:size]]
  # The reference lies in the prefix (a class's rows are contiguous); gathered from the sorted rows.
  centred = rows - rows[jnp.minimum(order.first[:size], size - 1)]
  if zero_unpaired:
    centred = jnp.where(live[:, None], centred, 0.0)
  return centred, live


def prefix_sizes(rows: int) -> tuple[int, ...]:
  """The static prefix sizes P/8, P/4, P/2 and P of `rows` = P (rounded down, the empty ones
  dropped), ascending."""
  return tuple(sorted({size for size in (rows // 8, rows // 4, rows // 2, rows) if size > 0}))


def smallest_prefix(sizes: tuple[int, ...], active: jax.Array) -> jax.Array:
  """The index of the smallest of `sizes` (ascending) that holds `active` rows."""
  return jnp.sum(jnp.asarray(sizes, jnp.int32) < active).astype(jnp.int32)
