"""Image classifiers (flax.linen) returning (logits, penultimate features).

Every model: `model.apply(variables, x, train=..., mutable=['batch_stats'] if train else False)`
with x float32 [B, H, W, C] → (logits [B, K], features [B, d]); `features` are the globally pooled
penultimate activations that the MR2 statistics and Neural Collapse metrics are computed on. The head
is 'linear' (Dense) or 'cosine' (`mr2_jax.linen.CosineClassifier`). BatchNorm statistics live in the
'batch_stats' collection; with `axis_name` set (e.g. 'batch' under pmap) they are averaged across
devices.

Precision: `dtype` (float32 default, or bfloat16) is the compute dtype of the convolutions and
BatchNorms of the body; parameters are float32 whatever it is (`param_dtype`), so gradients and
optimizer updates are float32. flax's BatchNorm computes its batch mean and variance, and keeps its
running statistics, in float32 (`force_float32_reductions`), and normalises in float32 before
casting to `dtype`. The global pool accumulates in float32 and the head runs in float32: the model
returns float32 logits and features in either case (`layers.pool`: why).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mr2_jax.linen import SupConProjection
from experiments.models import layers
from experiments.models.resnet50 import ResNet50
from experiments.models.vit import ViTB16

HEADS = layers.HEADS
COMPUTE_DTYPES = ("float32", "bfloat16")  # `config.compute_dtype`: the body's `dtype`

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


MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet32": ResNet32,
    "resnet32_w32": functools.partial(ResNet32, width=32),   # ETF-DR, CIFAR-100 (d = 128)
    "resnet32_w64": functools.partial(ResNet32, width=64),   # GLMC (d = 256)
    "wrn28_10": functools.partial(WideResNet, depth=28, widen=10),
    "small_cnn": SmallCNN,
    "resnet50": ResNet50,  # torchvision's ResNet-50 v1.5 (ImageNet; d = 2048)
    "vit_b16": ViTB16,     # timm's vit_base_patch16_224 layout (224 px; d = 768)
}


def create_model(name: str, num_classes: int, head: str = "linear", **kwargs: Any) -> nn.Module:
  """One of MODELS; `kwargs` go to the module (e.g. cosine_scale, axis_name, dtype)."""
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
  if head not in HEADS:
    raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
  return MODELS[name](num_classes=num_classes, head=head, **kwargs)


# ------------------------------------------------------------------------------------------------
# Wrappers: the base model's parameters stay where they are (`nn.share_scope`), so evaluation,
# checkpoints and NC metrics read them as for the bare model; in training mode a wrapper returns
# (logits, features, extras), extras a dict of the outputs a loss reads (`StepInfo.recipe['outputs']`).
# ------------------------------------------------------------------------------------------------

class WithProjection(nn.Module):
  """The base model plus SupCon's projection head (`mr2_jax.SupConProjection`, under 'projection')
  on its features: extras {'projection': z [B, `features`]} (L2-normalised)."""
  base: nn.Module
  features: int = 128

  def setup(self):
    nn.share_scope(self, self.base)
    self.projection = SupConProjection(self.features)

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not (train or self.is_initializing()):
      return logits, features
    projection = self.projection(features)
    return (logits, features, {"projection": projection}) if train else (logits, features)


class WithBiasedTwin(nn.Module):
  """The base model (LfF's debiased f_D, the one evaluated) and a second copy of it under 'biased'
  (f_B, own parameters and BatchNorm statistics), run on the same batch: extras
  {'biased_logits': [B, K]}."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)
    self.biased = self.base.clone()

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not (train or self.is_initializing()):
      return logits, features
    biased_logits, _ = self.biased(x, train=train)
    return (logits, features, {"biased_logits": biased_logits}) if train else (logits, features)


class GLMCModel(nn.Module):
  """GLMC's network (PIPELINES spec §3): the base model, whose head is fc_cb (the re-balanced head,
  used for inference), plus the instance-balanced head 'fc', the projector 'projector'
  (Linear d → 128) and the predictor 'predictor' (Linear 128 → 128) on its features. In training the
  input is the two mixtures [x_g; x_l] (2B rows, `train.recipes.glmc_mix`) and runs as two passes, each
  with its own BatchNorm batch statistics (the running averages updated by both, in order): extras
  {'logits_fc', 'projection', 'prediction'}, rows as the logits."""
  base: nn.Module
  num_classes: int
  projection_dim: int = 128

  def setup(self):
    nn.share_scope(self, self.base)
    self.fc = nn.Dense(self.num_classes)
    self.projector = nn.Dense(self.projection_dim)
    self.predictor = nn.Dense(self.projection_dim)

  def __call__(self, x: jax.Array, train: bool):
    if not (train or self.is_initializing()):
      return self.base(x, train=False)
    passes = [self.base(half, train=train) for half in (jnp.split(x, 2) if train else [x])]
    logits = jnp.concatenate([p[0] for p in passes])
    features = jnp.concatenate([p[1] for p in passes])
    projection = self.projector(features)
    extras = {"logits_fc": self.fc(features), "projection": projection,
              "prediction": self.predictor(projection)}
    return (logits, features, extras) if train else (logits, features)


class FrozenEncoder(nn.Module):
  """The base model always in inference mode (BatchNorm uses its running statistics and does not
  update them): the linear stage of a two-stage method, whose optimiser trains the head only
  (`train_state.create_train_state` with `config.frozen_encoder_from`)."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)

  def __call__(self, x: jax.Array, train: bool):
    del train
    return self.base(x, train=False)


class WithETFClassifier(nn.Module):
  """The base model (head 'etf') with its fixed ETF M as an output the DR loss reads: extras
  {'etf_classifier': M [d, K]}."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not train:
      return logits, features
    return logits, features, {"etf_classifier": self.variables["params"]["head"]["etf"]}


# Extras with a row per example (cut to the loss's views with the logits); the others (the ETF M)
# are per model.
ROW_OUTPUTS = ("projection", "biased_logits", "logits_fc", "prediction")


def split_outputs(outputs) -> tuple[jax.Array, jax.Array, dict]:
  """(logits, features, extras) of a model's output, extras {} for a bare model."""
  if len(outputs) == 2:
    return outputs[0], outputs[1], {}
  logits, features, extras = outputs
  return logits, features, extras


def count_params(params: Any) -> int:
  """Total number of scalars in a parameter pytree."""
  return sum(int(leaf.size) for leaf in jax.tree.leaves(params))
