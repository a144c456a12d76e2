r"""Per-class feature statistics of MR2, carried as explicit train-state (Zhu et al., ICLR 2026,
arXiv 2602.00205: the per-class feature statistics).

For class k with batch class mean m_k (over the global batch), :math:`a_k = \|m_k\|_p^2` and
:math:`v_k = \operatorname{mean}_{i:\, y_i = k} \|\phi_i - m_k\|_p^2` are tracked as exponential
moving averages A_k, V_k; the first time a class is seen A_k ← a_k, V_k ← v_k; classes absent from
the batch keep their values. Computed without gradient.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import class_order as class_order_lib
from mr2_reweight_core import class_sums
from mr2_reweight_core import checks
from mr2_reweight_core import explicit_mesh
from mr2_jax.lp_norm import lp_sq_norm


class ClassStats(NamedTuple):
  """MR2 class statistics: a pytree for the train state (sharded and checkpointed like params).

  Zhu et al., ICLR 2026, arXiv 2602.00205 (the per-class feature statistics A_k, V_k).

  A NamedTuple, as every state of both libraries (`ReweightState`, `NCAccumulator`, `LfFState`):
  `flax.serialization` (alone or inside a Flax `TrainState`), orbax and pickle write and read it
  as it is, with no registration and no Flax import here (`flax.serialization` knows NamedTuples,
  not a chex dataclass, which this was before 0.2.0). A field is replaced with
  ``stats._replace(seen=...)``.

  Attributes:
    sq_mean_norm: float32 [K], A_k, EMA of ‖μ_k‖_p² (squared L_p norm of the class feature mean).
    mean_sq_deviation: float32 [K], V_k, EMA of mean ‖φ − μ_k‖_p² (trace of the class covariance, p = 2).
    seen: bool [K], whether class k has been seen since initialisation.
    skipped_rows: int32 scalar, the real rows (inside `where`) left out of the statistics since
      initialisation: a label outside [0, K) or a non-finite feature (docs: "Failure modes").
      0 when not given (statistics built before the field existed).
  """
  sq_mean_norm: jax.Array
  mean_sq_deviation: jax.Array
  seen: jax.Array
  skipped_rows: ArrayLike = np.int32(0)  # 0 when not given (built before the field existed)

  @property
  def num_classes(self) -> int:
    return self.seen.shape[-1]


def check_class_stats(stats, name: str = "stats") -> ClassStats:
  """Returns `stats` if it is a `ClassStats`; a TypeError naming the argument otherwise (a tuple,
  a dict of restored arrays, another state)."""
  if not isinstance(stats, ClassStats):
    raise TypeError(f"{name}: expected mr2_jax.ClassStats (from init_class_stats(K)), got "
                    f"{type(stats).__name__}.")
  return stats


def init_class_stats(num_classes: int) -> ClassStats:
  """Empty statistics for K classes: A = V = 0, nothing seen.

  Zhu et al., ICLR 2026, arXiv 2602.00205: the statistics start empty, and a class's first batch
  sets them (see `update_class_stats`).

  Args:
    num_classes: K, a positive Python int.

  Returns:
    `ClassStats` of float32 [K] zeros, ``seen`` bool [K] False, ``skipped_rows`` 0 (K = 1 alike).

  Raises:
    TypeError: `num_classes` is not an int.
    ValueError: `num_classes` < 1.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> stats = mr2_jax.init_class_stats(3)
    >>> print(stats.sq_mean_norm, stats.mean_sq_deviation, stats.seen)
    [0. 0. 0.] [0. 0. 0.] [False False False]
  """
  num_classes = checks.check_num_classes(num_classes)
  # Separate buffers, so that a train state holding them can be donated to a jitted step.
  return ClassStats(sq_mean_norm=jnp.zeros((num_classes,), jnp.float32),
                    mean_sq_deviation=jnp.zeros((num_classes,), jnp.float32),
                    seen=jnp.zeros((num_classes,), bool),
                    skipped_rows=jnp.zeros((), jnp.int32))


def check_stats_inputs(features: ArrayLike, labels: ArrayLike, num_classes: int,
                       where: ArrayLike | None) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Validates (features [B, d] float, labels [B] int, where [B] bool); returns (features, labels,
  valid), `valid` the rows inside `where` whose label lies in [0, K).

  Features narrower than float32 (bfloat16, float16) are returned as float32: the class statistics'
  sums and the representation margin accumulate in float32 (a bf16 sum of n rows is off by ~n·2⁻⁸
  of its size; the property tests found a collapsed class's V = 0 read as 0.012).
  """
  features = checks.check_floating(features, 2, "features")
  if jnp.finfo(features.dtype).bits < 32:
    features = features.astype(jnp.float32)
  labels = jnp.asarray(labels)
  in_range = checks.check_labels(labels, num_classes, "labels", where=where)
  checks.check_batch_dim(features, labels.shape[0], "features")
  mask = checks.check_where(where, labels.shape[0])
  return features, labels, in_range & mask


class BatchRows(NamedTuple):
  """The checked batch of MR2's statistics and terms, with its one row mask (`batch_rows`).

  Attributes:
    features: float [B, d] (at least float32).
    labels: int [B].
    real: bool [B], the rows inside `where`.
    labelled: bool [B], the real rows whose label lies in [0, K): the class sort reads this mask,
      of the labels and `where` alone, so that it need not wait for the features.
    valid: bool [B], the labelled rows a carried state may read: every feature finite. Every
      statistic and ℓ_s̄ read this one mask.
  """
  features: jax.Array
  labels: jax.Array
  real: jax.Array
  labelled: jax.Array
  valid: jax.Array


def batch_rows(features: ArrayLike, labels: ArrayLike, num_classes: int,
               where: ArrayLike | None) -> BatchRows:
  """`check_stats_inputs` and the batch's row mask, computed once: a real row is valid when its
  label lies in [0, K) and its features are finite (one pass over [B, d]; inside
  `traced_checks()` a checkify check names the non-finite rows)."""
  features, labels, labelled = check_stats_inputs(features, labels, num_classes, where)
  real = checks.check_where(where, labels.shape[0])
  valid = labelled & checks.check_finite_rows(features, real, "features")
  return BatchRows(features, labels, real, labelled, valid)


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
  taken over the class-sorted batch instead (`_sorted_moments`): a class seen once has m_k = φ_i,
  a_k = ‖φ_i‖_p² and v_k = 0 with no sum at all, and only the rows with a partner are summed.
  Rows split over Explicit mesh axes (`jax.jit` of a sharded batch) take the slot sums whatever
  K: the sort would all-gather the rows, where the sums cross devices as min(K, B)·d floats.

  `sorted_by`: the mask the class sort reads (`class_order_lib.class_order`; default `valid`).

  Returns:
    (slots, a [S], v [S]); slots with no example have zeros.
  """
  if (axis_name is None and num_classes > labels.shape[0]
      and not explicit_mesh.rows_split(features)):
    return _sorted_moments(features, labels, valid, num_classes, p, sorted_by=sorted_by)
  return _slot_moments(features, labels, valid, num_classes, p, axis_name)


def _slot_moments(features, labels, valid, num_classes, p, axis_name):
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


def _sorted_moments(features: jax.Array, labels: jax.Array, valid: jax.Array, num_classes: int,
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


REDUCTIONS = ("exact", "per_device")


def _per_device_moments(features, labels, valid, num_classes, p, axis_name):
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


def update_class_stats(stats: ClassStats, features: ArrayLike, labels: ArrayLike, *,
                       decay: ArrayLike = 0.9, p: float = 2.0, axis_name: str | None = None,
                       where: ArrayLike | None = None, reduction: str = "exact") -> ClassStats:
  r"""EMA update of the class statistics with one (global) batch.

  Zhu et al., ICLR 2026, arXiv 2602.00205: the per-class feature statistics, tracked as exponential
  moving averages over mini-batches.

  For each class k present in the batch (a_k, v_k as in the module docstring),
  :math:`A_k \leftarrow \mathrm{decay} \cdot A_k + (1 - \mathrm{decay}) \cdot a_k` if k was seen
  before, else :math:`A_k \leftarrow a_k`; :math:`V_k` likewise. Absent classes keep their values.
  Cost O(B·d + K), no Python loop over classes, no one-hot product.

  B = 0 (or every row padding): the statistics unchanged, nothing skipped. K = 1: A and V of the one
  class, from every real row.

  Args:
    stats: current `ClassStats` with K classes.
    features: float [B, d] penultimate features φ (gradient is stopped here).
    labels: int [B] in [0, K).
    decay: EMA decay (0.9 in the reference's CIFAR setting, 0.999 for ImageNet/CLIP).
    p: norm order of the statistics (2 for linear classifiers; ≠ 2, e.g. 5, for L2-normalised
      features, where ‖μ_k‖₂² + v_k is the same for every class).
    axis_name: pmap/shard_map axis of the data-parallel batch; sums and counts are reduced over it, so
      the result equals one device seeing the global batch (typed replicated under `shard_map`'s
      `check_vma=True`: return it with `out_specs=P()`). Without it, `jax.jit` over features laid
      out with `NamedSharding` gives the same statistics, replicated.
    where: optional bool [B]; False rows (padding) are ignored. A row inside `where` with a label
      outside [0, K) (possible only traced) or a non-finite feature is left out of every statistic
      and counted in `skipped_rows`: the statistics equal those of the other rows alone. A class
      whose batch moments overflow float32 (finite features of ~1e19 or more) keeps its
      statistics for this batch, its rows counted in `skipped_rows` too.
    reduction: with `axis_name`, 'exact' (default) reduces per-class feature sums, min(K, B_global)·d
      floats per step, twice (each class's reference row, then the sums of rows shifted by it; see
      `batch_class_moments`), and equals one device on the global batch. 'per_device' computes a_k
      and v_k on each device's shard and reduces only per-class scalars (n_k·a_k, n_k·v_k, n_k: 3·K
      floats): a_k and v_k become count-weighted means of per-device values. For p = 2 their sum
      A_k + V_k, and hence γ, is still exact (both sides equal the class's mean ‖φ‖²); V_k is biased
      low (it misses the spread between device means) and A_k high by the same amount, so s̄ drifts.
      See results/benchmarks/RESULTS.md for the measured drift and bytes.

  Returns:
    The updated `ClassStats` (identical on every device under `axis_name`).

  Raises:
    ValueError: `decay` outside [0, 1) (traced: NaN statistics, and a `checkify` check inside
      `traced_checks()`), `p` < 1, an unknown `reduction`, features not [B, d] with B the labels'
      length, a `where` of another shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating features, non-integer labels or a non-boolean `where`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(3), features, labels)
    >>> print(stats.sq_mean_norm)  # A_k = ‖mean of class k‖²
    [4. 4. 0.]
    >>> print(stats.mean_sq_deviation)  # V_k: class 0 spreads by 1, class 1 not at all
    [1. 0. 0.]
    >>> print(stats.seen)
    [ True  True False]
    >>> stats = mr2_jax.update_class_stats(stats, features[:2] * 2, labels[:2], decay=0.5)
    >>> print(stats.sq_mean_norm)  # class 0: 0.5·4 + 0.5·16; class 1 absent, kept
    [10.  4.  0.]
  """
  check_class_stats(stats)
  decay_checked = _check_update_arguments(decay, p, reduction)
  return _update(stats, batch_rows(features, labels, stats.num_classes, where), decay_checked, p,
                 axis_name, reduction)


def _check_update_arguments(decay: ArrayLike, p: float, reduction: str):
  decay_checked = checks.check_hyperparameter(decay, "decay", 0.0, 1.0, what="an EMA decay")
  if not p >= 1:
    raise ValueError(f"p: expected a norm order p >= 1, got {p}.")
  if reduction not in REDUCTIONS:
    raise ValueError(f"reduction: expected one of {REDUCTIONS}, got {reduction!r}.")
  return decay_checked


def update_class_stats_rows(stats: ClassStats, rows: BatchRows, *, decay: ArrayLike, p: float,
                            axis_name: str | None, reduction: str) -> ClassStats:
  """`update_class_stats` of a batch checked and masked by `batch_rows` (`mr2_terms` computes the
  one row mask for the statistics and ℓ_s̄)."""
  return _update(stats, rows, _check_update_arguments(decay, p, reduction), p, axis_name,
                 reduction)


def _update(stats, rows, decay_checked, p, axis_name, reduction):
  (decay, decay_ok), labels, real, valid = decay_checked, rows.labels, rows.real, rows.valid
  # Bad rows are masked, not zeroed: every sum, gather and norm below selects by `valid` (or by
  # index) before it adds, so a non-finite row reaches no statistic (no pass over [B, d] for it).
  features = jax.lax.stop_gradient(rows.features)
  if reduction == "per_device" and axis_name is not None:
    slots, batch_a, batch_v = _per_device_moments(features, labels, valid, stats.num_classes, p,
                                                  axis_name)
  else:
    slots, batch_a, batch_v = batch_class_moments(
        features, labels, valid, stats.num_classes, p=p, axis_name=axis_name,
        sorted_by=rows.labelled)
  # A class whose batch moments overflow (finite features of ~1e19 and more: ‖·‖² beyond float32)
  # is left out like a non-finite row, its rows counted (the slots' counts are already global).
  overflow = (slots.counts > 0) & ~(jnp.isfinite(batch_a) & jnp.isfinite(batch_v))
  present = (slots.counts > 0) & ~overflow
  overflow_rows = jnp.sum(jnp.where(overflow, slots.counts, 0.0)).astype(jnp.int32)
  seen_before = class_sums.gather_from_classes(stats.seen, slots)

  def ema(old_per_class, batch_value):
    old = class_sums.gather_from_classes(old_per_class, slots)
    new = jnp.where(seen_before, decay * old + (1.0 - decay) * batch_value, batch_value)
    if decay_ok is not True:  # a traced decay outside [0, 1): NaN statistics, never a silent EMA
      new = jnp.where(decay_ok, new, jnp.nan)
    return class_sums.scatter_to_classes(old_per_class, new.astype(old_per_class.dtype), slots,
                                         present)

  return ClassStats(
      sq_mean_norm=ema(stats.sq_mean_norm, batch_a),
      mean_sq_deviation=ema(stats.mean_sq_deviation, batch_v),
      seen=class_sums.scatter_to_classes(stats.seen, present, slots, present),
      skipped_rows=stats.skipped_rows + checks.count_skipped(real, valid, axis_name)
      + overflow_rows)
