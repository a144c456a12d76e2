"""The networks by name (`create_model`): image classifiers (flax.linen) returning (logits, penultimate
features).

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

from experiments.models import layers
from experiments.models.feature_heads import LinearHead, MLPAdapter
from experiments.models.resnet32 import ResNet32
from experiments.models.resnet50 import ResNet50
from experiments.models.small_cnn import SmallCNN
from experiments.models.vit import ViTB16
from experiments.models.wide_resnet import WideResNet

HEADS = layers.HEADS
COMPUTE_DTYPES = ("float32", "bfloat16")  # `config.compute_dtype`: the body's `dtype`

MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet32": ResNet32,
    "resnet32_w32": functools.partial(ResNet32, width=32),   # ETF-DR, CIFAR-100 (d = 128)
    "resnet32_w64": functools.partial(ResNet32, width=64),   # GLMC (d = 256)
    "wrn28_10": functools.partial(WideResNet, depth=28, widen=10),
    "small_cnn": SmallCNN,
    "resnet50": ResNet50,  # torchvision's ResNet-50 v1.5 (ImageNet; d = 2048)
    "vit_b16": ViTB16,     # timm's vit_base_patch16_224 layout (224 px; d = 768)
    # On cached features (a 'features:' dataset): the frozen-feature studies' models.
    "linear_head": LinearHead,
    "mlp_adapter": MLPAdapter,  # 256 wide
}


def create_model(name: str, num_classes: int, head: str = "linear", **kwargs: Any) -> nn.Module:
  """One of MODELS; `kwargs` go to the module (e.g. cosine_scale, axis_name, dtype)."""
  if name not in MODELS:
    raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
  if head not in HEADS:
    raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
  return MODELS[name](num_classes=num_classes, head=head, **kwargs)
