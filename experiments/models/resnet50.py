"""ResNet-50 for ImageNet (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016), as
torchvision builds it (`torchvision.models.resnet50`), in flax.linen.

torchvision's ResNet-50 is "v1.5": in a down-sampling bottleneck the stride sits on the 3x3
convolution, not on the first 1x1 as in the paper (about +0.5 % top-1 on ImageNet). Layout:
7x7/2 stem (64) → BN → ReLU → 3x3/2 max-pool → four stages of [3, 4, 6, 3] bottlenecks of widths
64/128/256/512 (output 4x the width) → global mean pool → head. Where a block changes the shape,
the shortcut is a strided 1x1 convolution with BatchNorm. 25,557,032 parameters with a 1000-way
linear head, like torchvision's.

The model contract of `experiments.models`: `apply(variables, x, train=...)`, x float32 [B, H, W, 3]
(NHWC; any H, W ≥ 32 — the global pool makes the size free) → (logits [B, K], features [B, 2048]);
BatchNorm as `layers.batch_norm` (PyTorch's momentum and ε, statistics in 'batch_stats', averaged
over `axis_name`); the head is `layers.classify`'s ('linear', 'cosine' or 'etf', named 'head');
`dtype` is the compute dtype of the body (float32 parameters; float32 features from `layers.pool`
and a float32 head whatever it is).
`experiments.models.pretrained.torch_state_dict.resnet50_params_from_torch` converts a torchvision state
dict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers

FEATURE_DIM = 2048
STAGE_SIZES = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)
EXPANSION = 4

# torchvision's initialisation: He normal with fan-out for every convolution.
conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


def _conv(dtype: Any, features: int, kernel: int, strides: int = 1,
          name: str | None = None) -> nn.Conv:
  # PyTorch's symmetric padding k // 2: lax's 'SAME' pads (0, 1) instead of (1, 1) for a 3x3/2 on an
  # even size, which would shift every strided output by one pixel against torchvision.
  pad = kernel // 2
  return nn.Conv(features, (kernel, kernel), strides=strides, padding=((pad, pad), (pad, pad)),
                 use_bias=False, kernel_init=conv_init, dtype=dtype, param_dtype=jnp.float32,
                 name=name)


class Bottleneck(nn.Module):
  """1x1 (width) → BN → ReLU → 3x3/stride (width) → BN → ReLU → 1x1 (4·width) → BN, + shortcut,
  ReLU.

  The shortcut is the identity, or `downsample_conv` (1x1/stride) → `downsample_bn` where the stride
  or the width changes (torchvision's `downsample`).
  """
  width: int
  strides: int
  norm: Callable[..., nn.Module]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    conv = functools.partial(_conv, self.dtype)
    out_features = self.width * EXPANSION
    y = nn.relu(self.norm(name="bn1")(conv(self.width, 1, name="conv1")(x)))
    y = nn.relu(self.norm(name="bn2")(conv(self.width, 3, self.strides, name="conv2")(y)))
    y = self.norm(name="bn3")(conv(out_features, 1, name="conv3")(y))
    shortcut = x
    if self.strides != 1 or x.shape[-1] != out_features:
      shortcut = conv(out_features, 1, self.strides, name="downsample_conv")(x)
      shortcut = self.norm(name="downsample_bn")(shortcut)
    return nn.relu(y + shortcut)


class ResNet50(nn.Module):
  """torchvision's ResNet-50 (v1.5); features are the globally pooled last stage (d = 2048).

  Module names: `stem_conv`, `stem_bn`, `stage{s}_block{b}` (s = 1..4, b from 1, like
  `models.ResNet32`; torchvision's `layer{s}.{b-1}`) with `conv1..3`, `bn1..3` and, in each stage's
  first block, `downsample_conv`/`downsample_bn`; the head `head`.
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
    x = _conv(self.dtype, 64, 7, 2, name="stem_conv")(x)
    x = nn.relu(norm(name="stem_bn")(x))
    # Padding with −∞ (flax's max_pool pads with the reduction's identity), as torch's MaxPool2d.
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    for stage, (num_blocks, width) in enumerate(zip(STAGE_SIZES, STAGE_WIDTHS)):
      for block in range(num_blocks):
        strides = 2 if stage > 0 and block == 0 else 1
        x = Bottleneck(width, strides, norm, self.dtype,
                       name=f"stage{stage + 1}_block{block + 1}")(x)
    features = layers.pool(x)
    return layers.classify(
        features, self.head, self.num_classes, self.cosine_scale, train=train,
        axis_name=self.axis_name, etf_seed=self.etf_seed)
