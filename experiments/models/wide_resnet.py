"""Wide ResNet (Zagoruyko & Komodakis 2016), pre-activation blocks; WRN-28-10 for CIFAR."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers


class WideBlock(nn.Module):
  """Pre-activation block BN-ReLU-conv3x3-BN-ReLU-conv3x3 (Zagoruyko & Komodakis 2016).

  Where the shape changes, the shortcut is a strided 1x1 convolution of the pre-activated input, as in
  the authors' code.
  """
  filters: int
  strides: int
  norm: Callable[..., nn.Module]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    conv = functools.partial(layers.conv, self.dtype)
    activated = nn.relu(self.norm()(x))
    y = conv(self.filters, (3, 3), strides=self.strides)(activated)
    y = nn.relu(self.norm()(y))
    y = conv(self.filters, (3, 3))(y)
    if self.strides != 1 or x.shape[-1] != self.filters:
      x = conv(self.filters, (1, 1), strides=self.strides, name="shortcut")(activated)
    return x + y


class WideResNet(nn.Module):
  """WRN-depth-widen (pre-activation); WRN-28-10 has 36.5 M parameters with a 10-class head."""
  num_classes: int
  depth: int = 28
  widen: int = 10
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  dtype: Any = jnp.float32  # compute dtype of the body (parameters float32)

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    if (self.depth - 4) % 6:
      raise ValueError(f"WideResNet depth must be 6n + 4, got {self.depth}")
    blocks_per_stage = (self.depth - 4) // 6
    norm = functools.partial(layers.batch_norm, train, self.axis_name, self.dtype)
    x = layers.conv(self.dtype, 16, (3, 3), name="stem")(x)
    for stage, filters in enumerate((16 * self.widen, 32 * self.widen, 64 * self.widen)):
      for block in range(blocks_per_stage):
        strides = 2 if stage > 0 and block == 0 else 1
        x = WideBlock(filters, strides, norm, self.dtype,
                      name=f"stage{stage + 1}_block{block + 1}")(x)
    x = nn.relu(norm(name="final_norm")(x))
    features = layers.pool(x)
    return layers.classify(features, self.head, self.num_classes, self.cosine_scale, train=train,
                     axis_name=self.axis_name, etf_seed=self.etf_seed)
