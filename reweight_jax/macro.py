"""Macro-level factor β from the number of batches that contained each class.

Wang et al., ICML 2026, arXiv 2605.10047: the macro level of the two-level reweighting.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.checks import check_hyperparameter
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import nan_where_negative
from reweight_jax.priors import mean_normalize


def macro_factor_unchecked(batch_counts: jax.Array, gamma: ArrayLike) -> jax.Array:
  """β_c = max(B_c, 1)^(−γ) / mean_k max(B_k, 1)^(−γ) without argument checks (traced callers)."""
  beta = mean_normalize(jnp.power(jnp.maximum(batch_counts, 1.0), -jnp.asarray(gamma)))
  if not is_concrete(gamma):  # a traced γ < 0: NaN, never β that favours the head classes
    beta = jnp.where(jnp.asarray(gamma) >= 0, beta, jnp.nan)
  return beta


def macro_factor(batch_counts: ArrayLike, gamma: ArrayLike = 1.0) -> jax.Array:
  r"""Macro factor β: max(B_c, 1)^(−γ), normalised to mean 1 over all K classes.

  .. math::

      \beta_c = \frac{\max(B_c, 1)^{-\gamma}}{\operatorname{mean}_k \max(B_k, 1)^{-\gamma}}

  Wang et al., ICML 2026, arXiv 2605.10047, the macro level: B_c is the number of batches that
  contained class c, counted from when reweighting starts; tail classes, seen in few batches, get a
  larger factor. γ = 1 by default.

  K = 1: (1,) (β is normalised to mean 1).

  Args:
    batch_counts: [K] non-negative batch counts B_c (integer or floating).
    gamma: exponent γ.

  Returns:
    float32 [K] factors with mean 1 (all ones when every B_c ≤ 1 or γ = 0).

  Raises:
    ValueError: counts not rank 1 or (eagerly) negative, γ < 0.
    TypeError: counts neither integer nor floating.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.macro_factor(jnp.array([10.0, 5.0, 1.0]), gamma=1.0), float).round(4))
    [0.2308 0.4615 2.3077]
  """
  batch_counts = check_counts(batch_counts, "batch_counts")
  check_gamma(gamma)
  return nan_where_negative(macro_factor_unchecked(batch_counts, gamma), batch_counts)


def check_gamma(gamma: ArrayLike) -> None:
  """Raises if a concrete γ is negative (β would then favour head classes); a traced one is checked
  by `checkify` inside `traced_checks()` (`check_hyperparameter`), and `macro_factor_unchecked`
  makes β NaN for a negative one."""
  check_hyperparameter(gamma, "gamma", 0.0, what="the macro exponent γ")
