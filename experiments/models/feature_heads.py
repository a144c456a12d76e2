"""Models on cached features (`experiments.data.cached_features`) for the frozen-feature studies:
the linear head and the MLP adapter. Like every model (`zoo.create_model`) they return
(logits [B, K], the features the loss reads [B, d]), and a method's wrapper (LfF's biased twin,
SupCon's projection) wraps them as it wraps a network.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers


class LinearHead(nn.Module):
  """logits = φ W + b on the features φ [B, d] as they are: W ~ N(0, init_std²), b = 0 (MoCo's
  linear classifier; init_std 0.01); the features the loss reads are φ. The 'cosine' and 'etf'
  heads are `layers.classify`'s."""
  num_classes: int
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  dtype: Any = jnp.float32  # no body: the head computes in float32 (`layers.pool`: why)
  init_std: float = 0.01

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    if self.head == "linear":
      dense = nn.Dense(self.num_classes, kernel_init=nn.initializers.normal(self.init_std),
                       name="head")
      return dense(x), x
    return layers.classify(x, self.head, self.num_classes, self.cosine_scale, train=train,
                           axis_name=self.axis_name, etf_seed=self.etf_seed)


class MLPAdapter(nn.Module):
  """A trainable adapter under the head: h = ReLU(Dense(width)(φ)) (Flax's default LeCun-normal
  kernel, zero bias), then the head on h (`layers.classify`, Flax's default Dense for 'linear');
  the features the loss reads are h. For a loss that acts on the encoder (SupCon), which a linear
  head on frozen features does not have."""
  num_classes: int
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  dtype: Any = jnp.float32
  width: int = 256

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    hidden = nn.relu(nn.Dense(self.width, name="adapter")(x))
    return layers.classify(hidden, self.head, self.num_classes, self.cosine_scale, train=train,
                           axis_name=self.axis_name, etf_seed=self.etf_seed)
