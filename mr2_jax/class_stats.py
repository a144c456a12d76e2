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

from mr2_reweight_core import class_sums
from mr2_reweight_core import checks
from mr2_jax import class_moments


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


# The smallest B·d (this device's rows) at which the statistics look for non-finite feature rows
# only when a class moment is not finite (`defer_finite_check`): 512 × 2,048. Below it the pass
# over [B, d] costs less than the `lax.cond` that would skip it (results/benchmarks/RESULTS.md,
# "What do the guards cost?").
DEFER_MIN_ELEMENTS = 1 << 20


def defer_finite_check(features: jax.Array) -> bool:
  """Whether the statistics find the non-finite feature rows from their own moments
  (`update_class_stats_rows`) rather than by a pass over [B, d] first: for `features` of at
  least `DEFER_MIN_ELEMENTS` elements, except inside `traced_checks()`, whose checkify check
  names the non-finite rows up front. Both give the same statistics and mask bit for bit."""
  return features.size >= DEFER_MIN_ELEMENTS and not checks.traced_checks_enabled()


def batch_rows(features: ArrayLike, labels: ArrayLike, num_classes: int,
               where: ArrayLike | None, *, defer_finite: bool = False) -> BatchRows:
  """`check_stats_inputs` and the batch's row mask, computed once: a real row is valid when its
  label lies in [0, K) and its features are finite (one pass over [B, d]; inside
  `traced_checks()` a checkify check names the non-finite rows).

  `defer_finite` (see `defer_finite_check`): `valid` is `labelled`, and the features' check is left
  to `update_class_stats_rows(..., finite_checked=False)`, which returns the mask it used."""
  features, labels, labelled = check_stats_inputs(features, labels, num_classes, where)
  real = checks.check_where(where, labels.shape[0])
  if defer_finite:
    return BatchRows(features, labels, real, labelled, labelled)
  valid = labelled & checks.check_finite_rows(features, real, "features")
  return BatchRows(features, labels, real, labelled, valid)


REDUCTIONS = ("exact", "per_device")


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
      `class_moments.batch_class_moments`), and equals one device on the global batch.
      'per_device' computes a_k and v_k on each device's shard and reduces only per-class scalars
      (n_k·a_k, n_k·v_k, n_k: 3·K floats): a_k and v_k become count-weighted means of per-device values. For p = 2 their sum
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
  deferred = defer_finite_check(jnp.asarray(features))
  rows = batch_rows(features, labels, stats.num_classes, where, defer_finite=deferred)
  return _update(stats, rows, decay_checked, p, axis_name, reduction,
                 finite_checked=not deferred)[0]


def _check_update_arguments(decay: ArrayLike, p: float, reduction: str):
  decay_checked = checks.check_hyperparameter(decay, "decay", 0.0, 1.0, what="an EMA decay")
  if not p >= 1:
    raise ValueError(f"p: expected a norm order p >= 1, got {p}.")
  if reduction not in REDUCTIONS:
    raise ValueError(f"reduction: expected one of {REDUCTIONS}, got {reduction!r}.")
  return decay_checked


def update_class_stats_rows(stats: ClassStats, rows: BatchRows, *, decay: ArrayLike, p: float,
                            axis_name: str | None, reduction: str, finite_checked: bool = True
                            ) -> tuple[ClassStats, jax.Array]:
  """`update_class_stats` of a batch checked and masked by `batch_rows` (`mr2_terms` computes the
  one row mask for the statistics and ℓ_s̄), and that mask: `rows.valid`, or with
  `finite_checked=False` (rows from `batch_rows(..., defer_finite=True)`) the labelled rows whose
  features are finite, found as `class_moments.moments_of_finite_rows` finds them."""
  return _update(stats, rows, _check_update_arguments(decay, p, reduction), p, axis_name,
                 reduction, finite_checked=finite_checked)


def _update(stats, rows, decay_checked, p, axis_name, reduction, *, finite_checked=True):
  (decay, decay_ok), labels, real = decay_checked, rows.labels, rows.real
  # Bad rows are masked, not zeroed: every sum, gather and norm below selects by `valid` (or by
  # index) before it adds, so a non-finite row reaches no statistic (no pass over [B, d] for it).
  features = jax.lax.stop_gradient(rows.features)
  moments = functools.partial(class_moments.moments, features, labels, sorted_by=rows.labelled,
                              num_classes=stats.num_classes, p=p, axis_name=axis_name,
                              reduction=reduction)
  if finite_checked:
    valid = rows.valid
    slots, batch_a, batch_v = moments(valid)
  else:
    valid, slots, batch_a, batch_v = class_moments.moments_of_finite_rows(
        features, rows.labelled, moments)
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
      + overflow_rows), valid
