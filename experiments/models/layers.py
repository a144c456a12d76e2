"""The building blocks every model of `experiments.models` (and the ResNet-50 / ViT ports) shares:
BatchNorm with PyTorch's constants, He-initialised convolutions, the float32 global pool and the head
('linear', 'cosine' or 'etf'), so a model's head, pool and precision rules are written once.

Precision: `dtype` is the compute dtype of a layer (float32 or bfloat16); parameters are float32
whatever it is. The pool accumulates in float32 and the head runs in float32 (`pool`: why).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mr2_jax.linen import CosineClassifier
from reweight_jax.baselines import etf_dr

HEADS = ("linear", "cosine", "etf")

# He et al. (2015) normal initialisation (fan-in), as in the PyTorch CIFAR ResNet / WRN references.
conv_init = nn.initializers.variance_scaling(2.0, "fan_in", "normal")


def batch_norm(train: bool, axis_name: str | None, dtype: Any = jnp.float32,
                **kwargs) -> nn.BatchNorm:
  # momentum 0.9 / epsilon 1e-5 are PyTorch's BatchNorm defaults (its momentum 0.1 = 1 − 0.9 here).
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                      axis_name=axis_name, dtype=dtype, param_dtype=jnp.float32, **kwargs)


def conv(dtype: Any, *args, **kwargs) -> nn.Conv:
  """A bias-free He-initialised convolution computing in `dtype` with float32 weights."""
  return nn.Conv(*args, use_bias=False, kernel_init=conv_init, dtype=dtype,
                 param_dtype=jnp.float32, **kwargs)


def pool(x: jax.Array) -> jax.Array:
  """Global mean pool [B, H, W, C] → float32 [B, C], accumulated in float32.

  The features (and hence the head) are float32 even when the body computes in bfloat16: they are
  what the MR2 statistics, the representation margin, every loss, the Neural Collapse metrics and
  the model wrappers' heads read, and the libraries would upcast bf16 features anyway. Rounding
  them, or the logits (which the cross-entropies' log-softmax reads in their own dtype), to bf16
  would add an error of up to 2⁻⁸ relative (0.12 on a cosine logit of 30) for no saving: the head
  is 0.2% of SmallCNN's multiply-adds on 8×8 digits, less in the ResNets.
  """
  return jnp.mean(x, axis=(1, 2), dtype=jnp.float32)


def classify(features: jax.Array, head: str, num_classes: int, cosine_scale: float, *,
              train: bool = False, axis_name: str | None = None,
              etf_seed: int = 0) -> tuple[jax.Array, jax.Array]:
  """Builds the head as a submodule of the calling (compact) module, named 'head'; returns
  (logits, the features it classifies): the pooled features for 'linear' and 'cosine', ETF-DR's
  normalised h for 'etf'. It computes in the features' dtype, float32 (`pool`: why)."""
  if head == "linear":
    return nn.Dense(num_classes, name="head")(features), features
  if head == "cosine":
    return CosineClassifier(num_classes, scale=cosine_scale, name="head")(features), features
  if head == "etf":
    return ETFHead(num_classes, seed=etf_seed, axis_name=axis_name, name="head")(features, train)
  raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")


class ETFHead(nn.Module):
  """ETF-DR's head (PIPELINES spec §2): h = BatchNorm1d(f) (affine, trained), h ← h / max(‖h‖, 1e-8),
  logits = hᵀM with M the fixed simplex ETF (`reweight_jax.baselines.etf_classifier(K, d, seed)`), kept as the
  parameter 'etf' so that it is checkpointed; the optimiser never changes it
  (`train_state.param_labels`: no gradient step, no weight decay). Returns (logits, h)."""
  num_classes: int
  seed: int = 0
  axis_name: str | None = None

  @nn.compact
  def __call__(self, features: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
    h = batch_norm(train, self.axis_name, name="norm")(features)
    h = etf_dr.etf_normalize(h)
    etf = self.param("etf", lambda _: jnp.asarray(
        etf_dr.etf_classifier(self.num_classes, features.shape[-1], self.seed)))
    return h @ etf.astype(h.dtype), h
