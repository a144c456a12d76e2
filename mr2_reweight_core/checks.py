"""Input checks shared by every public function of `mr2_jax` and `reweight_jax` (the one place).

Shapes, ranks and dtypes are checked at trace time and raise an error that names the argument. Label
*values* can only be checked when they are concrete: eagerly they raise `ValueError`. Under `jit` or
`pmap` the functions exclude out-of-range labels from every class statistic and give those examples a
NaN loss, so a bad label is never silently clipped into a valid class (plain JAX indexing would clip
it); for the error itself, trace the step inside `traced_checks()` and wrap it with
`jax.experimental.checkify.checkify`. A real row with a non-finite value in what a carried state
reads is left out of that state and counted in its `skipped_rows` (`check_finite_rows`), and the
batch's loss and its gradient are NaN (`poison_unless`). The whole policy is one page of the docs,
"Failure modes".

Why opt-in: a `checkify.check` is an effect even when nothing checkifies it, and a jitted function
with an effect loses JAX's C++ dispatch fast path (about 45 µs more per call on the development CPU,
measured by `experiments/benchmarks/run.py`, section 'scaling'), so by default a traced function
emits no check at all.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.experimental import checkify
from jax.typing import ArrayLike

from mr2_reweight_core import explicit_mesh


# Part of jit's cache key: a function traced inside `traced_checks()` is traced again (with checks),
# not served from a trace made outside it.
_TRACED_CHECKS = jax.make_user_context(default_value=False)


def traced_checks(enabled: bool = True):
  """Context manager: functions traced inside it emit `checkify` checks of label and count values.

      with mr2_jax.traced_checks():   # or reweight_jax.traced_checks(): the same switch
        err, out = checkify.checkify(jax.jit(step), errors=checkify.user_checks)(...)
      err.throw()   # ValueError-like message naming the argument and the offending range

  Outside it (the default) nothing is emitted and an out-of-range label only yields NaN (see the
  module docstring for why). The setting is part of `jax.jit`'s cache key, so a function first
  traced outside the context is traced again inside it. JAX's limit: under `jax.shard_map` over
  Explicit mesh axes (`jax.make_mesh`'s default) `checkify.checkify` itself raises
  `ShardingTypeError`; `jit` (Explicit sharding too), `pmap` and `shard_map` over Auto axes work
  (docs: "Failure modes").

  Args:
    enabled: whether checks are emitted inside the context.

  Returns:
    A context manager.

  Examples:
    >>> import jax
    >>> import jax.numpy as jnp
    >>> from jax.experimental import checkify
    >>> import reweight_jax
    >>> step = jax.jit(lambda z, y: reweight_jax.cross_entropy_loss(z, y).sum())
    >>> logits, bad_labels = jnp.zeros((2, 3)), jnp.array([0, 5])
    >>> print(step(logits, bad_labels))  # under jit: NaN, never a clipped class
    nan
    >>> with reweight_jax.traced_checks():
    ...   err, _ = checkify.checkify(step, errors=checkify.user_checks)(logits, bad_labels)
    >>> print(err.get().split(" (")[0])
    labels: class labels must lie in [0, 3); got values from 0 to 5.
  """
  return _TRACED_CHECKS(bool(enabled))


def traced_checks_enabled() -> bool:
  """True inside `traced_checks()`."""
  return bool(_TRACED_CHECKS.value)


def is_concrete(x: ArrayLike) -> bool:
  """True when `x` holds values now (not a tracer under `jit`, `pmap` or `grad`)."""
  return not isinstance(x, Tracer)


def check_num_classes(num_classes: int, name: str = "num_classes") -> int:
  """Returns `num_classes` as an int; raises if it is not a positive integer."""
  if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
    raise TypeError(f"{name}: expected a Python int, got {type(num_classes).__name__}.")
  if num_classes < 1:
    raise ValueError(f"{name}: expected a positive number of classes, got {num_classes}.")
  return int(num_classes)


def check_labels(labels: ArrayLike, num_classes: int, name: str = "labels", *,
                 where: ArrayLike | None = None) -> jax.Array:
  """Checks integer class labels of shape [batch] and returns the mask of in-range labels.

  Raises `ValueError`/`TypeError` naming `name` for a wrong rank or dtype, and, when the values are
  concrete, for any label outside [0, num_classes) on a real row. `where` (optional bool [batch],
  checked here as `check_where` does) marks the real rows: a padding row's label is never checked,
  whatever it is, eagerly or traced (the callers leave padding out of everything they compute).
  Under tracing inside `traced_checks()`, the range check of the real rows is a
  `checkify.check(..., debug=True)` (reported under `checkify.checkify`); outside it nothing is
  emitted. The returned mask is the range test of every row, padding included.
  """
  labels = jnp.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f"{name}: expected rank 1 [batch], got shape {labels.shape}.")
  if not jnp.issubdtype(labels.dtype, jnp.integer):
    raise TypeError(f"{name}: expected an integer dtype, got {labels.dtype}.")
  real = None if where is None else check_where(where, labels.shape[0])
  if is_concrete(labels) and (real is None or is_concrete(real)):
    values = np.asarray(labels)
    if real is not None:
      values = values[np.asarray(real)]
    if values.size and (values.min() < 0 or values.max() >= num_classes):
      raise ValueError(
          f"{name}: class labels must lie in [0, {num_classes}); got values from {values.min()} "
          f"to {values.max()}.")
  elif traced_checks_enabled():
    real = jnp.ones(labels.shape, bool) if real is None else real
    checkify.check(
        jnp.all((labels >= 0) & (labels < num_classes) | ~real),
        f"{name}: class labels must lie in [0, {num_classes}); got values from {{lo}} to {{hi}}.",
        lo=jnp.min(labels, initial=0, where=real), hi=jnp.max(labels, initial=0, where=real),
        debug=True)
  return (labels >= 0) & (labels < num_classes)


def finite_rows(x: jax.Array) -> jax.Array:
  """bool [B]: the rows of `x` [B, ...] whose every entry is finite (no NaN, no ±inf).

  Taken as Σ_j (x_ij − x_ij), finite exactly when every x_ij is (±inf − ±inf = NaN, and a sum
  keeps a NaN): one vectorised float sum, about half the time of `all(isfinite(x))`'s boolean
  reduction on XLA:CPU (0.17 against 0.25 ms over [512, 1000]); unlike a max of |x| it cannot
  drop a NaN (XLA's vectorised max returns the other operand), unlike a sum of |x| it cannot
  overflow, and unlike 0·x it has no constant for YNNPACK's fusions to materialise.
  """
  x = jnp.asarray(x)
  return jnp.isfinite(jnp.sum(x - x, axis=tuple(range(1, x.ndim))))  # also for B = 0


def check_finite_rows(x: jax.Array, real: jax.Array, name: str) -> jax.Array:
  """bool [B]: `finite_rows(x)`, the rows a function that carries state may use.

  The bad-row policy of both libraries (docs: "Failure modes"): a real row (inside `where`) with a
  non-finite value in an input that a carried state reads is left out of that state and counted in
  its `skipped_rows`; the loss of the batch is NaN. Nothing raises, eagerly or traced (a NaN is a
  value, not a shape); inside `traced_checks()` a traced call also emits a
  `checkify.check(..., debug=True)` naming `name` and the number of such rows.
  """
  finite = finite_rows(x)
  if not is_concrete(x) and traced_checks_enabled():
    checkify.check(jnp.all(finite | ~real),
                   f"{name}: {{bad}} real rows hold a non-finite value (NaN or ±inf); they are left "
                   f"out of the carried state and counted in its skipped_rows.",
                   bad=jnp.sum(real & ~finite), debug=True)
  return finite


def count_skipped(real: jax.Array, kept: jax.Array, axis_name: str | None = None) -> jax.Array:
  """int32 scalar: the real rows (inside `where`) of the global batch that a state leaves out (an
  out-of-range label or a non-finite value), summed over `axis_name` (the same on every device)."""
  skipped = jnp.sum(real & ~kept, dtype=jnp.int32)
  if axis_name is not None:
    skipped = jax.lax.psum(skipped, axis_name)
  return skipped


def poison_unless(value: jax.Array, ok: jax.Array) -> jax.Array:
  """`value` where `ok`, NaN otherwise, and so is its gradient: `value · (1 if ok else NaN)`.

  The loss of a batch with a bad real row (see `check_finite_rows`): NaN, with a NaN gradient, so
  that `optax.apply_if_finite` (or the user's own check) skips the step; `jnp.where(ok, value,
  nan)` would give a zero gradient that an optimiser with momentum or weight decay still applies.
  For `ok` True the value and its gradient are unchanged bit for bit (a product with 1).
  """
  return value * jnp.where(ok, 1.0, jnp.nan).astype(value.dtype)


def check_floating(x: ArrayLike, rank: int, name: str) -> jax.Array:
  """Checks that `x` is a floating-point array of the given rank; returns it as a jax array."""
  x = jnp.asarray(x)
  if x.ndim != rank:
    raise ValueError(f"{name}: expected rank {rank}, got shape {x.shape}.")
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"{name}: expected a floating dtype, got {x.dtype}.")
  return x


def check_batch_dim(x: jax.Array, batch: int, name: str, labels_name: str = "labels") -> None:
  """Raises if the leading dimension of `x` differs from the batch size of the labels."""
  if x.shape[0] != batch:
    raise ValueError(
        f"{name}: leading dimension {x.shape[0]} does not match {labels_name} batch size {batch}.")


def check_where(where: ArrayLike | None, batch: int, name: str = "where") -> jax.Array:
  """Returns a boolean [batch] mask (all True when `where` is None); raises on a wrong shape."""
  if where is None:
    return jnp.ones((batch,), dtype=bool)
  where = jnp.asarray(where)
  if where.shape != (batch,):
    raise ValueError(f"{name}: expected shape ({batch},) matching the labels, got {where.shape}.")
  if where.dtype != jnp.bool_:
    raise TypeError(f"{name}: expected a boolean mask, got {where.dtype}.")
  return where


def check_class_mask(x: ArrayLike, num_classes: int, name: str) -> jax.Array:
  """Checks a boolean per-class mask of shape [num_classes]."""
  x = jnp.asarray(x)
  if x.shape != (num_classes,):
    raise ValueError(f"{name}: expected shape ({num_classes},) matching the number of classes, "
                     f"got {x.shape}.")
  if x.dtype != jnp.bool_:
    raise TypeError(f"{name}: expected a boolean mask, got {x.dtype}.")
  return x


def check_class_vector(x: ArrayLike, num_classes: int, name: str) -> jax.Array:
  """Checks a floating per-class vector of shape [num_classes]."""
  x = check_floating(x, 1, name)
  if x.shape[0] != num_classes:
    raise ValueError(f"{name}: expected shape ({num_classes},), got {x.shape}.")
  return x


def check_unit_scalar(value: ArrayLike, name: str, what: str) -> jax.Array:
  """A real scalar meant to lie in [0, 1] (a mixing weight λ, GLMC's α), as an array: a shape or
  dtype that is not a real scalar raises; a concrete value outside [0, 1] raises; a traced one is
  returned as is (callers make their result NaN for it)."""
  value = jnp.asarray(value)
  if value.ndim != 0 or not (jnp.issubdtype(value.dtype, jnp.floating)
                             or jnp.issubdtype(value.dtype, jnp.integer)):
    raise ValueError(f"{name}: expected a real scalar {what}, got {value.dtype} of shape "
                     f"{value.shape}.")
  if is_concrete(value) and not 0 <= float(value) <= 1:
    raise ValueError(f"{name}: expected {what} in [0, 1], got {float(value)}.")
  return value


def check_exponent(value, name: str) -> float:
  """A host-side real exponent ≥ 0 (a Python or NumPy scalar); returns it as a float."""
  if isinstance(value, bool) or np.ndim(value) != 0:
    raise TypeError(f"{name}: expected a real scalar exponent, got {type(value).__name__}.")
  value = float(value)
  if not (math.isfinite(value) and value >= 0):
    raise ValueError(f"{name}: expected a finite exponent ≥ 0, got {value}.")
  return value


def check_positive_int(value, name: str) -> int:
  """A positive Python (or NumPy) int; returns it as an int."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{name}: expected a Python int, got {type(value).__name__}.")
  if value < 1:
    raise ValueError(f"{name}: expected a positive integer, got {value}.")
  return int(value)


def unit_scalar_or_nan(value: ArrayLike, name: str, what: str) -> jax.Array:
  """`check_unit_scalar` as a float array (at least float32); under `jit` NaN when outside [0, 1]."""
  value = check_unit_scalar(value, name, what)
  value = value.astype(jnp.promote_types(value.dtype, jnp.float32))
  return jnp.where((value >= 0) & (value <= 1), value, jnp.nan)


def check_hyperparameter(value: ArrayLike, name: str, low: float, high: float = float("inf"), *,
                         low_closed: bool = True, high_closed: bool = False, what: str = "a value"):
  """A real scalar hyperparameter that may be traced (a `jit` argument, a `vmap`ped sweep, a
  schedule): returns (value, in_range), `in_range` a boolean scalar (Python True for a concrete
  value, which is returned as given).

  A concrete value outside the interval (low, high), closed where `low_closed` / `high_closed` say,
  or NaN, raises `ValueError` naming `name`. A traced one cannot be checked at trace time: inside
  `traced_checks()` its range is a `checkify.check(..., debug=True)` naming it (as labels are), and
  callers make their result NaN where `in_range` is False, so an out-of-range value is never used
  silently. A value that is not a real scalar raises `ValueError` naming it. `what` names the
  quantity in the message ("a positive mean margin").
  """
  if np.ndim(value) != 0 or not (jnp.issubdtype(jnp.result_type(value), jnp.floating)
                                 or jnp.issubdtype(jnp.result_type(value), jnp.integer)):
    raise ValueError(f"{name}: expected a real scalar, got {jnp.result_type(value)} of shape "
                     f"{np.shape(value)}.")
  interval = (f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}")

  def inside(x):
    above = x >= low if low_closed else x > low
    below = x <= high if high_closed else x < high
    return above & below

  if is_concrete(value):
    number = float(np.asarray(value))
    if not inside(number):  # NaN is outside
      raise ValueError(f"{name}: expected {what} in {interval}, got {number}.")
    return value, True
  value = jnp.asarray(value)
  in_range = inside(value)
  if traced_checks_enabled():
    checkify.check(in_range, f"{name}: expected {what} in {interval}, got {{value}}.",
                   value=value, debug=True)
  return value, in_range


def check_counts(counts: ArrayLike, name: str = "counts") -> jax.Array:
  """Checks a rank-1 vector of non-negative counts (integer or floating); returns it as float32.

  Raises `ValueError`/`TypeError` naming `name` for a wrong rank or dtype and, when the values are
  concrete, for a negative entry. Under tracing inside `traced_checks()` the sign check is a
  `checkify.check(..., debug=True)`; in any case callers turn negative entries into NaN so that they
  are never silently used.
  """
  counts = jnp.asarray(counts)
  if counts.ndim != 1:
    raise ValueError(f"{name}: expected rank 1 [num_classes], got shape {counts.shape}.")
  if counts.shape[0] < 1:
    raise ValueError(f"{name}: expected at least one class, got shape {counts.shape}.")
  if not (jnp.issubdtype(counts.dtype, jnp.integer) or jnp.issubdtype(counts.dtype, jnp.floating)):
    raise TypeError(f"{name}: expected an integer or floating dtype, got {counts.dtype}.")
  if is_concrete(counts):
    values = np.asarray(counts)
    if np.any(values < 0) or np.any(np.isnan(values)):
      raise ValueError(f"{name}: counts must be non-negative, got minimum {np.nanmin(values)}"
                       f"{' and NaN' if np.any(np.isnan(values)) else ''}.")
  elif traced_checks_enabled():
    checkify.check(jnp.all(counts >= 0), f"{name}: counts must be non-negative.", debug=True)
  return counts.astype(jnp.float32)


def nan_where_negative(values: jax.Array, counts: jax.Array) -> jax.Array:
  """Makes every entry NaN when any count is negative (only reachable under tracing)."""
  return jnp.where(jnp.any(counts < 0), jnp.nan, values)


def index_labels(labels: jax.Array, in_range: jax.Array) -> jax.Array:
  """Labels usable as indices: an out-of-range label becomes 0 *only to index*.

  The one guard of both libraries against JAX's silent clipping of out-of-range indices: every
  caller masks what it read with `in_range` (a NaN loss, no class statistic), so a bad label is
  never trained or counted as class 0 or K − 1.
  """
  return jnp.where(in_range, labels, 0)


def take_class_values(per_class: jax.Array, labels: jax.Array, in_range: jax.Array) -> jax.Array:
  """v_{y_i} [B, ...] from per-class values [K, ...]; NaN for an out-of-range label."""
  values = explicit_mesh.take(per_class, index_labels(labels, in_range))
  mask = in_range.reshape(in_range.shape + (1,) * (values.ndim - 1))
  return jnp.where(mask, values, jnp.nan)
