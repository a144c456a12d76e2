"""A trainable MLP adapter under the linear head on frozen features, for SupCon on two views.

SupCon's loss acts on the encoder, which a linear probe does not train, so it gets an adapter:
features → h = ReLU(Dense(256)) → (logits = Dense(K)(h), SupCon's projection of h
(`mr2_jax.SupConProjection`)), trained on two views per image (the image and its horizontal flip,
both through the frozen backbone: `experiments.probe.features`, split 'train-flip'). The objective
is the registry's 'supcon' entry (`experiments.methods.supcon`: cross-entropy on both
views + λ·SupCon over the 2B views), λ = 0 its CE term alone, the registry's 'ce' on the same
adapter and views (ERM; SupCon's λ is > 0). The step, recipe and batches are the linear probe's
(`experiments.probe.linear_head`), the adapter being the analogue of SupCon's model wrapper
(`experiments.methods.supcon.WithProjection`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

import mr2_jax
from experiments.probe.features import NUM_CLASSES
from experiments.probe.linear_head import Head, ProbeSchedule, make_train_epoch, train_probe

ADAPTER_WIDTH = 256


class Adapter(nn.Module):
  """features → h = ReLU(Dense(width)) → (logits = Dense(K)(h), h, {'projection': SupCon's
  projection of h}), the outputs in the order of `experiments.models.Outputs`."""
  width: int = ADAPTER_WIDTH
  num_classes: int = NUM_CLASSES

  @nn.compact
  def __call__(self, x):
    hidden = nn.relu(nn.Dense(self.width, name="adapter")(x))
    return nn.Dense(self.num_classes, name="head")(hidden), hidden, {
        "projection": mr2_jax.SupConProjection(name="projection")(hidden)}


def init_adapter(key: jax.Array, feature_dim: int, num_classes: int, init_std: float) -> Any:
  """Flax's default initialisation (LeCun normal kernels, zero biases); `init_std` is the linear
  head's, not used here."""
  del init_std
  return Adapter(num_classes=num_classes).init(key, jnp.zeros((1, feature_dim)))["params"]


def adapter_outputs(params, features: jax.Array) -> tuple:
  return Adapter(num_classes=params["head"]["bias"].shape[0]).apply({"params": params}, features)


ADAPTER_HEAD = Head(init_adapter, adapter_outputs)


def adapter_key(lam: float, temperature: float) -> tuple[str, tuple]:
  """The `method_key` of the adapter's objective: the registry's 'supcon' (CE + λ·SupCon), or for
  λ = 0 its CE term alone, 'ce' (on the same views)."""
  if lam == 0:
    return "ce", ()
  return "supcon", (("supcon.ce", True), ("supcon.lam", lam), ("supcon.temperature", temperature))


def make_adapter_epoch(schedule: ProbeSchedule, steps_per_epoch: int, lam: float, temperature: float):
  """jit(state, views [2, N, d], labels, batch_indices, epoch, rng) → (state, mean loss): one
  epoch of CE on both views + λ·SupCon over the 2B views (`linear_head.make_train_epoch` on the
  adapter)."""
  return make_train_epoch(adapter_key(lam, temperature), schedule, steps_per_epoch, ADAPTER_HEAD)


def train_adapter(features: np.ndarray, flipped: np.ndarray, labels: np.ndarray, schedule: ProbeSchedule,
                  seed: int, lam: float, temperature: float) -> tuple[Any, list[float]]:
  """The adapter's params and the per-epoch mean training loss; `flipped`: the second view's
  features."""
  state, epoch_losses = train_probe(adapter_key(lam, temperature), np.stack([features, flipped]),
                                    labels, schedule, seed, head=ADAPTER_HEAD)
  return state.params, epoch_losses
