"""A small CNN for digits and MNIST."""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers


class SmallCNN(nn.Module):
  """Three conv-BN-ReLU layers (32, 64 stride 2, 128 stride 2), global mean pool, for digits / MNIST.

  Global pooling makes it indifferent to the input size (8x8 digits, 28x28 MNIST).
  """
  num_classes: int
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  dtype: Any = jnp.float32  # compute dtype of the body (parameters float32)

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    norm = functools.partial(layers.batch_norm, train, self.axis_name, self.dtype)
    for filters, strides in ((32, 1), (64, 2), (128, 2)):
      x = layers.conv(self.dtype, filters, (3, 3), strides=strides)(x)
      x = nn.relu(norm()(x))
    features = layers.pool(x)
    return layers.classify(features, self.head, self.num_classes, self.cosine_scale, train=train,
                     axis_name=self.axis_name, etf_seed=self.etf_seed)
