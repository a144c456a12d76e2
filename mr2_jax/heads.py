"""Classifier heads (flax): the cosine classifier used with L2-normalised features."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def l2_normalize(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
  """x / max(‖x‖₂, eps) along `axis` (finite gradient at x = 0)."""
  sq_norm = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(sq_norm, eps * eps))


class CosineClassifier(nn.Module):
  """Cosine classifier: z_k = s · ⟨φ/‖φ‖₂, w_k/‖w_k‖₂⟩, shapes [B, d] → [B, K].

  Used by the reweighting paper's CIFAR recipe (scale s = 30) and for CLIP-style heads in MR2; with
  this head the MR2 statistics should use p ≠ 2 (MR2 spec, 'Per-class statistics'), because
  ‖μ_k‖² + v_k = 1 for every class of L2-normalised features.
  """
  num_classes: int
  scale: float = 30.0

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (features.shape[-1], self.num_classes), jnp.float32)
    return self.scale * l2_normalize(features) @ l2_normalize(kernel, axis=0).astype(features.dtype)
