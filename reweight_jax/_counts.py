"""Check for per-class count vectors (training-set counts n_c, batch counts B_c).

`mr2_jax.validation` has no check for non-negative counts; this is the one check `reweight_jax` adds,
written in the same style (errors name the argument; values checked eagerly, or by `checkify` under
tracing).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from mr2_jax.validation import is_concrete
from mr2_jax.validation import traced_checks_enabled

Array = Any


def check_counts(counts: Array, name: str = "counts") -> jax.Array:
  """Checks a rank-1 vector of non-negative counts (integer or floating); returns it as float32.

  Raises `ValueError`/`TypeError` naming `name` for a wrong rank or dtype and, when the values are
  concrete, for a negative entry. Under tracing inside `mr2_jax.traced_checks()` the sign check is a
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
