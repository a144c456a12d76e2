"""Prior weights w⁰ of the inverse problem (Wang et al., ICML 2026,
arXiv 2605.10047)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.checks import nan_where_negative

PRIOR_KINDS = ("uniform", "inv_freq", "inv_sqrt_freq")


def mean_normalize(values: jax.Array) -> jax.Array:
  """v / mean(v) over the last axis, so that the weights average 1 over the classes."""
  return values / jnp.mean(values, axis=-1, keepdims=True)


def class_prior(counts: ArrayLike, kind: str) -> jax.Array:
  r"""Prior weights w⁰_c, normalised to mean 1 over the K classes.

  .. math::

      \begin{aligned}
        \text{uniform:} &\quad w^0_c = 1, \\
        \text{inv_freq:} &\quad w^0_c \propto 1 / \max(n_c, 1), \\
        \text{inv_sqrt_freq:} &\quad w^0_c \propto 1 / \sqrt{\max(n_c, 1)}.
      \end{aligned}

  Wang et al., ICML 2026, arXiv 2605.10047: the prior w⁰ of the Tikhonov term, uniform by default.

  Convention (the paper is silent): a class with no training example is treated as having one, as
  the macro factor does with B_c, so that every weight stays finite.

  K = 1: (1,) for every kind.

  Args:
    counts: [K] non-negative training-set class counts n_c (integer or floating).
    kind: one of `PRIOR_KINDS`.

  Returns:
    float32 [K] prior weights with mean 1.

  Raises:
    ValueError: an unknown `kind`, counts not rank 1 or (eagerly) negative.
    TypeError: counts neither integer nor floating.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> counts = jnp.array([100, 10, 1])
    >>> print(reweight_jax.class_prior(counts, 'uniform'))
    [1. 1. 1.]
    >>> print(np.asarray(reweight_jax.class_prior(counts, 'inv_freq'), float).round(4))
    [0.027  0.2703 2.7027]
  """
  counts = check_counts(counts, "counts")
  if kind not in PRIOR_KINDS:
    raise ValueError(f"kind: unknown prior kind {kind!r}; expected one of {PRIOR_KINDS}.")
  clamped = jnp.maximum(counts, 1.0)
  if kind == "uniform":
    prior = jnp.ones_like(clamped)
  elif kind == "inv_freq":
    prior = mean_normalize(1.0 / clamped)
  else:
    prior = mean_normalize(jax.lax.rsqrt(clamped))
  return nan_where_negative(prior, counts)
