"""The squared L_p norm of MR2's class statistics (Zhu et al., ICLR 2026, arXiv 2602.00205), whose
released code uses p = 5 for L2-normalised features."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


def abs_pow(x: ArrayLike, p: float) -> jax.Array:
  """|x|^p elementwise: repeated multiplication (`lax.integer_pow`) for an integral Python p — the
  released form's p = 5 — instead of `**`, which lowers a float exponent to exp(p·log|x|), several
  times the cost per element; a real power otherwise (or when p is traced)."""
  if isinstance(p, (int, float)) and float(p).is_integer():
    return jax.lax.integer_pow(jnp.abs(x), int(p))
  return jnp.abs(x) ** p


# Σ_j |x_j|^p in float32 is taken as it is when it lies in [_LP_DIRECT_MIN, ∞): its terms below
# float32's normal range (< 1.2e-38 each, perhaps flushed to 0) then move it by < d·1.2e-18 relative.
_LP_DIRECT_MIN = 1e-20


def _scaled_lp_sq_norm(x: jax.Array, p: float) -> jax.Array:
  """‖x‖_p² as (m · (Σ_j |x_j / m|^p)^{1/p})², m = max_j |x_j|: no overflow or underflow whatever
  the scale of x (two passes over x)."""
  scale = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
  safe_scale = jnp.where(scale > 0, scale, 1.0)
  norm = safe_scale[..., 0] * jnp.sum(abs_pow(x / safe_scale, p), axis=-1) ** (1.0 / p)
  return jnp.square(norm)


def lp_sq_norm(x: ArrayLike, p: float, *, where: ArrayLike | None = None) -> jax.Array:
  """‖x‖_p² = (Σ_j |x_j|^p)^{2/p} over the last axis; for p = 2, Σ_j x_j² exactly.

  The norm of MR2's class statistics (Zhu et al., ICLR 2026, arXiv 2602.00205), whose released code
  uses p = 5 for L2-normalised features.

  For p ≠ 2 the sum is taken in one pass; a row whose sum overflows, is not finite, or is below
  `_LP_DIRECT_MIN` (a zero row, or |x| so small that |x|^p leaves float32's normal range) gets the
  scaled form instead (`_scaled_lp_sq_norm`, computed under a `lax.cond` only when such a row
  exists). Each row's value depends on that row alone. Rows outside `where` (bool, x's shape
  without its last axis) are not checked and their value is unspecified: for rows the caller masks
  (padding, empty slots), which would otherwise send every call down the scaled form.

  Args:
    x: float [..., d] rows.
    p: the norm order p ≥ 1 (a Python float; an integral value is computed by repeated
      multiplication).
    where: optional bool [...] (x's shape without its last axis); rows outside it are not
      checked.

  Returns:
    float [...] the squared L_p norms, in x's dtype (B = 0: x of shape [0, d] gives [0]).

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> x = jnp.array([[3.0, 4.0], [1.0, 1.0]])
    >>> print(mr2_jax.lp_sq_norm(x, 2.0))
    [25.  2.]
    >>> print(np.asarray(mr2_jax.lp_sq_norm(x, 5.0), float).round(4))
    [17.4225  1.3195]
  """
  x = jnp.asarray(x)
  if p == 2.0:
    return jnp.sum(jnp.square(x), axis=-1)
  direct = jnp.sum(abs_pow(x, p), axis=-1)
  fine = jnp.isfinite(direct) & (direct >= _LP_DIRECT_MIN)
  if where is not None:
    fine = fine | ~jnp.asarray(where)
  value = jnp.where(fine, direct, 1.0) ** (2.0 / p)
  return jax.lax.cond(jnp.all(fine), lambda: value,
                      lambda: jnp.where(fine, value, _scaled_lp_sq_norm(x, p)))
