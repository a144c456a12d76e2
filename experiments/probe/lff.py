"""Learning from Failure (LfF) on frozen features: a biased and a debiased linear head together.

Both heads see the same batches, one backward, one optimiser over both (`reweight_jax.lff_loss`:
GCE on the biased head, the relative-difficulty weight W on the debiased head's CE, per-example
EMAs indexed by dataset position); the debiased head is the one evaluated. The recipe, batches and
head initialisation are the linear probe's (`experiments.probe.linear_head`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import reweight_jax
from experiments.probe.features import NUM_CLASSES
from experiments.probe.linear_head import (Recipe, epoch_batches, init_params, logits_of,
                                           make_optimizer)


class LfFProbeState(NamedTuple):
  params: dict[str, dict[str, jax.Array]]   # {"biased": head, "debiased": head}
  opt_state: Any
  lff: reweight_jax.LfFState


@functools.lru_cache(maxsize=None)
def make_lff_epoch(recipe: Recipe, steps_per_epoch: int, q: float, alpha: float):
  """jit(state, features, labels, batch_indices) → (state, mean loss): one LfF epoch (both heads,
  one backward, one optimiser over both)."""
  optimizer = make_optimizer(recipe, steps_per_epoch)

  @jax.jit
  def train_epoch(state: LfFProbeState, features, labels, batch_indices):
    def step(state: LfFProbeState, indices):
      def objective(params):
        x = features[indices]
        loss, lff_state, _ = reweight_jax.lff_loss(
            logits_of(params["biased"], x), logits_of(params["debiased"], x),
            labels[indices], indices, state.lff, labels, q=q, alpha=alpha)
        return loss, lff_state

      (loss, lff_state), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      return LfFProbeState(optax.apply_updates(state.params, updates), opt_state, lff_state), loss

    state, step_losses = jax.lax.scan(step, state, batch_indices)
    return state, jnp.mean(step_losses)

  return train_epoch


def train_lff(features: np.ndarray, labels: np.ndarray, recipe: Recipe, seed: int, q: float,
              alpha: float):
  """The debiased head's params (initialised as ERM's head of the seed), losses, final state."""
  steps = len(labels) // recipe.batch_size
  optimizer = make_optimizer(recipe, steps)
  key = jax.random.key(seed)
  params = {"debiased": init_params(key, features.shape[1], NUM_CLASSES, recipe.init_std),
            "biased": init_params(jax.random.fold_in(key, 1), features.shape[1], NUM_CLASSES,
                                  recipe.init_std)}
  state = LfFProbeState(params, optimizer.init(params), reweight_jax.init_lff_state(len(labels)))
  train_epoch = make_lff_epoch(recipe, steps, q, alpha)
  x, y = jnp.asarray(features), jnp.asarray(labels, jnp.int32)
  epoch_losses = []
  for epoch in range(recipe.epochs):
    state, loss = train_epoch(state, x, y, epoch_batches(len(labels), recipe.batch_size, seed,
                                                         epoch))
    epoch_losses.append(float(loss))
  return state.params["debiased"], epoch_losses, state
