"""The label's log-probability, shared by the margin cross-entropy and the reweighting baselines."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def label_log_softmax(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """log softmax(z)_y = (z_y − m) − log Σ_k exp(z_k − m), m = max_k z_k, per example [B].

  The same rounding as `jax.nn.log_softmax` (the label's shifted logit is exact, 0 when it is the
  maximum), without materialising the [B, K] log-probabilities. Labels must be in range (callers
  replace invalid ones and mask the result).
  """
  shifted = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  return (jnp.take_along_axis(shifted, labels[:, None], axis=-1)[:, 0]
          - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1)))
