"""Vision Transformer (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021) in
flax.linen, with the layout of timm's `vit_base_patch16_224` so that its weights convert one to one.

Layout: a p x p / p convolution embeds the patches, a learned class token is prepended, learned
position embeddings are added, then `depth` pre-LN encoder blocks
    x ← x + MHSA(LN₁(x)),   x ← x + MLP(LN₂(x)),   MLP = Dense(mlp_dim) → GELU → Dense(width),
a final LayerNorm, and the class token is the feature vector that the head reads (timm's
global_pool='token'). As timm: LayerNorm ε = 1e-6, GELU exact (erf, torch's default), biases on
q/k/v. ViT-B/16: p = 16, width 768, depth 12, 12 heads, MLP 3072, 224 px; 86,567,656 parameters
with a 1000-way linear head, like timm's.

The model contract of `experiments.models`: `apply(variables, x, train=...)`, x float32
[B, image_size, image_size, C] (NHWC) → (logits [B, K], features [B, width]); the head is
`layers.classify`'s ('linear', 'cosine' or 'etf', named 'head'). There is no dropout or stochastic
depth, so `train` changes nothing but an 'etf' head's BatchNorm; the encoder has no 'batch_stats'.
`dtype` is the compute dtype of the blocks (bfloat16 or float32; parameters float32, LayerNorm
statistics and the attention softmax in float32); the final LayerNorm, hence the features, and the
head are float32 whatever it is, as in `experiments.models`.
`experiments.models.pretrained.torch_state_dict.vit_params_from_torch` converts a timm state dict.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments.models import layers

LAYER_NORM_EPSILON = 1e-6

# Initialisation as big_vision's ViT (the JAX reference): Xavier-uniform Dense kernels, zero
# biases, position embeddings N(0, 1/width); the class token starts at zero.
dense_init = nn.initializers.xavier_uniform()


def _layer_norm(dtype: Any, name: str) -> nn.LayerNorm:
  # Two-pass variance, as torch's layer_norm (flax's default E[x²] − E[x]² loses digits when the
  # mean is large against the spread).
  return nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, use_fast_variance=False, dtype=dtype,
                      param_dtype=jnp.float32, name=name)


class MlpBlock(nn.Module):
  """Dense(mlp_dim) → exact GELU → Dense(width): `fc1`, `fc2` (timm's `mlp.fc1`, `mlp.fc2`)."""
  mlp_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    dense = functools.partial(nn.Dense, kernel_init=dense_init, dtype=self.dtype,
                              param_dtype=jnp.float32)
    width = x.shape[-1]
    x = dense(self.mlp_dim, name="fc1")(x)
    x = nn.gelu(x, approximate=False)
    return dense(width, name="fc2")(x)


class EncoderBlock(nn.Module):
  """Pre-LN transformer block: `norm1` → `attn` (+ residual) → `norm2` → `mlp` (+ residual).

  `attn` is flax's `MultiHeadDotProductAttention`: q/k/v kernels [width, heads, head_dim], biases
  [heads, head_dim], the output projection `out` [heads, head_dim, width]; softmax(q·kᵀ/√head_dim),
  as timm's `Attention` with its fused qkv split per head.
  """
  num_heads: int
  mlp_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    width = x.shape[-1]
    y = _layer_norm(self.dtype, "norm1")(x)
    y = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, qkv_features=width,
                                        out_features=width, kernel_init=dense_init,
                                        deterministic=True, dtype=self.dtype,
                                        param_dtype=jnp.float32, force_fp32_for_softmax=True,
                                        name="attn")(y)
    x = x + y
    return x + MlpBlock(self.mlp_dim, self.dtype, name="mlp")(_layer_norm(self.dtype, "norm2")(x))


class ViT(nn.Module):
  """Vision Transformer with a class token; defaults are ViT-B/16 at 224 px.

  Module and parameter names: `patch_embed` (Conv, kernel [p, p, C, width]), `cls_token`
  [1, 1, width], `pos_embed` [1, 1 + (image_size/p)², width] (the class token's first),
  `block1`..`block{depth}` (timm's `blocks.0`..), `norm`, `head`. The position embeddings are for
  `image_size`; another input size raises (no interpolation).
  """
  num_classes: int
  head: str = "linear"
  cosine_scale: float = 30.0
  axis_name: str | None = None
  etf_seed: int = 0
  image_size: int = 224
  patch_size: int = 16
  width: int = 768
  depth: int = 12
  num_heads: int = 12
  mlp_dim: int = 3072
  dtype: Any = jnp.float32  # compute dtype of the blocks (parameters float32)

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    if x.ndim != 4 or x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(f"x: expected [B, {self.image_size}, {self.image_size}, C] (image_size), "
                       f"got shape {x.shape}")
    if self.image_size % self.patch_size:
      raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size "
                       f"{self.patch_size}")
    if self.width % self.num_heads:
      raise ValueError(f"width {self.width} is not a multiple of num_heads {self.num_heads}")
    p = self.patch_size
    x = nn.Conv(self.width, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype,
                param_dtype=jnp.float32, name="patch_embed")(x)
    batch = x.shape[0]
    x = x.reshape(batch, -1, self.width)  # Row-major patches, as torch's flatten(2) of NCHW.
    cls_token = self.param("cls_token", nn.initializers.zeros, (1, 1, self.width))
    x = jnp.concatenate([jnp.broadcast_to(cls_token, (batch, 1, self.width)).astype(x.dtype), x],
                        axis=1)
    pos_embed = self.param("pos_embed", nn.initializers.normal(stddev=self.width ** -0.5),
                           (1, x.shape[1], self.width))
    x = x + pos_embed.astype(x.dtype)
    for i in range(self.depth):
      x = EncoderBlock(self.num_heads, self.mlp_dim, self.dtype, name=f"block{i + 1}")(x)
    # In float32 whatever `dtype` is: the features are what MR2's statistics and the losses read.
    features = _layer_norm(jnp.float32, "norm")(x[:, 0])
    return layers.classify(
        features, self.head, self.num_classes, self.cosine_scale, train=train,
        axis_name=self.axis_name, etf_seed=self.etf_seed)


ViTB16 = functools.partial(ViT, image_size=224, patch_size=16, width=768, depth=12, num_heads=12,
                           mlp_dim=3072)
