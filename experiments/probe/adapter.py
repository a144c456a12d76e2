"""A trainable MLP adapter under the linear head on frozen features, for SupCon on two views.

SupCon's loss acts on the encoder, which a linear probe does not train, so it gets an adapter:
features → h = ReLU(Dense(256)) → (logits = Dense(K)(h), SupCon's projection of h
(`mr2_jax.SupConProjection`)), trained on two views per image (the image and its horizontal flip,
both through the frozen backbone: `experiments.probe.features`, split 'train-flip') by
cross-entropy on both views + λ·SupCon over the 2B views (`reweight_jax.supcon_loss`); λ = 0 is
ERM on the same adapter and views. The recipe and batches are the linear probe's
(`experiments.probe.linear_head`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

import mr2_jax
import reweight_jax
from experiments.probe.features import NUM_CLASSES
from experiments.probe.linear_head import Recipe, epoch_batches, make_optimizer

ADAPTER_WIDTH = 256


class Adapter(nn.Module):
  """features → h = ReLU(Dense(width)) → (logits = Dense(K)(h), SupCon projection of h)."""
  width: int = ADAPTER_WIDTH
  num_classes: int = NUM_CLASSES

  @nn.compact
  def __call__(self, x):
    hidden = nn.relu(nn.Dense(self.width, name="adapter")(x))
    return nn.Dense(self.num_classes, name="head")(hidden), mr2_jax.SupConProjection(
        name="projection")(hidden)


class AdapterState(NamedTuple):
  params: Any
  opt_state: Any


@functools.lru_cache(maxsize=None)
def make_adapter_epoch(recipe: Recipe, steps_per_epoch: int, lam: float, temperature: float):
  """jit(state, features, flipped, labels, batch_indices) → (state, mean loss): one epoch of
  CE on both views + λ·SupCon over the 2B views (λ = 0: ERM on the same adapter and views)."""
  optimizer = make_optimizer(recipe, steps_per_epoch)
  model = Adapter()

  @jax.jit
  def train_epoch(state: AdapterState, features, flipped, labels, batch_indices):
    def step(state: AdapterState, indices):
      def objective(params):
        x = jnp.concatenate([features[indices], flipped[indices]])  # view-major, 2B rows
        y = jnp.concatenate([labels[indices], labels[indices]])
        logits, projections = model.apply({"params": params}, x)
        loss = jnp.mean(reweight_jax.cross_entropy_loss(logits, y))
        if lam:
          loss = loss + lam * reweight_jax.supcon_loss(projections, y, temperature=temperature,
                                                       num_classes=NUM_CLASSES)[0]
        return loss

      loss, grads = jax.value_and_grad(objective)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      return AdapterState(optax.apply_updates(state.params, updates), opt_state), loss

    state, step_losses = jax.lax.scan(step, state, batch_indices)
    return state, jnp.mean(step_losses)

  return train_epoch


@jax.jit
def predict(params, features):
  return jnp.argmax(Adapter().apply({"params": params}, features)[0], axis=-1)


def class_accuracy(params, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
  predictions = predict(params, jnp.asarray(features))
  return mr2_jax.per_class_accuracy(predictions, jnp.asarray(labels, jnp.int32), NUM_CLASSES)


def train_adapter(features: np.ndarray, flipped: np.ndarray, labels: np.ndarray, recipe: Recipe,
                  seed: int, lam: float, temperature: float) -> tuple[Any, list[float]]:
  """The adapter's params and the per-epoch mean training loss; `flipped`: the second view's
  features."""
  steps = len(labels) // recipe.batch_size
  model_params = Adapter().init(jax.random.key(seed), jnp.zeros((1, features.shape[1])))["params"]
  optimizer = make_optimizer(recipe, steps)
  state = AdapterState(model_params, optimizer.init(model_params))
  train_epoch = make_adapter_epoch(recipe, steps, lam, temperature)
  x, x2, y = jnp.asarray(features), jnp.asarray(flipped), jnp.asarray(labels, jnp.int32)
  epoch_losses = []
  for epoch in range(recipe.epochs):
    state, loss = train_epoch(state, x, x2, y, epoch_batches(len(labels), recipe.batch_size, seed,
                                                             epoch))
    epoch_losses.append(float(loss))
  return state.params, epoch_losses
