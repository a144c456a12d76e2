"""CIFAR ResNet-32 (He et al. 2016, §4.2) and its wider variants: 3 stages × 5 basic blocks with
option-A shortcuts, returning (logits, penultimate features) (`experiments.models`: the contract)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers


class BasicBlock(nn.Module):
  """conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU (He et al. 2016, CIFAR variant).

  Option-A shortcut: where the shape changes, subsample by `strides` and zero-pad the new channels,
  which adds no parameters (ResNet-32 has 0.46 M parameters with it).
  """
  filters: int
  strides: int
  norm: Callable[..., nn.Module]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    conv = functools.partial(layers.conv, self.dtype, kernel_size=(3, 3))
    y = conv(self.filters, strides=self.strides)(x)
    y = nn.relu(self.norm()(y))
    y = conv(self.filters)(y)
    y = self.norm()(y)
    shortcut = x
    if self.strides != 1 or x.shape[-1] != self.filters:
      shortcut = x[:, ::self.strides, ::self.strides, :]
      extra = self.filters - x.shape[-1]
      shortcut = jnp.pad(shortcut, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
    return nn.relu(y + shortcut)


class ResNet32(nn.Module):
  """CIFAR ResNet-32 (He et al. 2016, §4.2): 3 stages × 5 basic blocks, w/2w/4w channels (w = 16;
  ETF-DR's CIFAR-100 network has w = 32, GLMC's w = 64)."""
  num_classes: int
  width: int = 16
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  dtype: Any = jnp.float32  # compute dtype of the body (parameters float32)

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    norm = functools.partial(layers.batch_norm, train, self.axis_name, self.dtype)
    x = layers.conv(self.dtype, self.width, (3, 3), name="stem")(x)
    x = nn.relu(norm()(x))
    for stage, filters in enumerate((self.width, 2 * self.width, 4 * self.width)):
      for block in range(5):
        strides = 2 if stage > 0 and block == 0 else 1
        x = BasicBlock(filters, strides, norm, self.dtype,
                       name=f"stage{stage + 1}_block{block + 1}")(x)
    features = layers.pool(x)
    return layers.classify(features, self.head, self.num_classes, self.cosine_scale, train=train,
                     axis_name=self.axis_name, etf_seed=self.etf_seed)
