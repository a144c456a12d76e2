"""Loss imbalance coefficient ρ (REWEIGHT spec, 'Loss imbalance coefficient ρ')."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mr2_jax.validation import check_floating

Array = Any


def rho(class_losses: Array, present: Array | None = None) -> jax.Array:
  """ρ = std_c(L_c) / mean_c(L_c): the coefficient of variation of the per-class mean losses.

  This is the *project's* definition (the paper reports ρ but its formula was not available): L_c are
  the per-class mean training losses on the whole training set (accumulate them with
  `NCAccumulator.update(..., per_example_loss=...)`), std is the population standard deviation over
  classes (ddof = 0). ρ = 0 exactly when all class losses are equal (also when they are all 0); NaN
  when no class is present.

  Args:
    class_losses: [K] per-class mean losses L_c.
    present: optional bool [K]; classes to include (all when None).

  Returns:
    scalar ρ.
  """
  class_losses = check_floating(class_losses, 1, "class_losses")
  if present is None:
    present = jnp.ones(class_losses.shape, bool)
  present = jnp.asarray(present)
  if present.shape != class_losses.shape:
    raise ValueError(f"present: expected shape {class_losses.shape} matching class_losses, got "
                     f"{present.shape}.")
  num_present = jnp.sum(present).astype(class_losses.dtype)
  safe_losses = jnp.where(present, class_losses, 0)
  mean = jnp.sum(safe_losses) / num_present
  variance = jnp.sum(jnp.where(present, jnp.square(class_losses - mean), 0)) / num_present
  std = jnp.sqrt(variance)
  ratio = std / jnp.where(std == 0, 1, mean)
  return jnp.where(num_present > 0, ratio, jnp.nan)
