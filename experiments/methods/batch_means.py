"""A loss's share of a global-batch value on one device: the weighted mean whose `lax.pmean` over
devices is the global-batch mean (`mean_share`), the per-row class weights it takes, the rows'
positions in the global batch and the global mean of a metric."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mr2_reweight_core import checks
from mr2_reweight_core import class_sums


def mean_share(per_example: jax.Array, axis_name: str | None,
               weights: jax.Array | None = None) -> jax.Array:
  """This device's share of Σ w_i ℓ_i / Σ w_i over the global batch (pmean of shares = the value)."""
  if weights is None:
    weights = jnp.ones(per_example.shape, jnp.float32)
  total_weight = jnp.sum(weights)
  if axis_name is not None:
    total_weight = jax.lax.psum(total_weight, axis_name)
  return (class_sums.num_devices(axis_name) * jnp.sum(weights * per_example)
          / jnp.maximum(total_weight, 1e-12))


def label_weights(class_weights: jax.Array, labels: jax.Array) -> jax.Array:
  """w_{y_i} [B]; NaN for an out-of-range label (the shared guard, never a clipped class)."""
  in_range = (labels >= 0) & (labels < class_weights.shape[0])
  return checks.take_class_values(class_weights, labels, in_range)


def global_rows(batch: int, axis_name: str | None) -> jax.Array:
  """The positions int [B] of this device's rows in the global batch (devices hold equal blocks)."""
  offset = 0 if axis_name is None else jax.lax.axis_index(axis_name) * batch  # as global_batch
  return offset + jnp.arange(batch)


def global_mean(value: jax.Array, axis_name: str | None) -> jax.Array:
  return value if axis_name is None else jax.lax.pmean(value, axis_name)
