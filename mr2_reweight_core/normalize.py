"""L2 normalisation for cosine heads (`mr2_jax.linen`, `mr2_jax.nnx`) and contrastive projections
(`reweight_jax.baselines.supcon`): pure JAX, shared by both libraries."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def l2_normalize(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
  """x / max(‖x‖₂, eps) along `axis` (finite gradient at x = 0).

  The normalisation of cosine heads and of SupCon's projections (Khosla et al., NeurIPS 2020,
  arXiv 2004.11362).

  Args:
    x: float array.
    axis: the axis normalised.
    eps: the floor of the norm.

  Returns:
    x's shape and dtype; a zero row stays zero, and an empty batch (B = 0) stays empty.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> print(mr2_jax.l2_normalize(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
    [[0.6 0.8]
     [0.  0. ]]
  """
  sq_norm = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(sq_norm, eps * eps))
