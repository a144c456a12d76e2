"""The recipe a run trains on (`RunRecipe`): its method's (`experiments.methods.method.Recipe`,
declared in the method's module and read from the registry) with the hooks bound to the run — the
method's settings (`Method.settings`) and its typed state in the train state's `loss_state` dict —
and mixup's paired batches added when `config.mixup_alpha` > 0 for a method that takes them
(`registry.takes_mixup`, checked by `configs.schema.validate`). The trainer (`loop`, `steps`,
`train_state`) reads only `RunRecipe` fields, so it names no method."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import reweight_jax
from experiments.methods import registry
from experiments.data.batches import PairDraw
from experiments.methods.method import EpochPass
from experiments.methods.method import Mix


def mixup_pair(alpha: float, train):
  """Mixup's partners as a paired batch: one λ ~ Beta(α, α) (α = `config.mixup_alpha`) and one
  permutation π of the global batch per step, drawn on the host (the step mixes
  x̃ = λx + (1 − λ)x_π, `mixup_mix`); each process loads its rows' partners, so no image crosses
  between devices, and the pairs are the same whatever the number of processes or devices. A
  partner is its example augmented with its own draws (the batch's key [seed, epoch, b, 1001]), not
  the copy in the other row."""
  del train
  alpha = float(alpha)

  def draw(rng, global_rows, height, width):
    del height, width
    lam = float(rng.beta(alpha, alpha))
    return PairDraw(np.asarray(global_rows)[rng.permutation(len(global_rows))], lam, (0, 0, 0, 0))
  return draw


def mixup_mix(batch):
  """x̃ = λx + (1 − λ)x_π of a mixup batch: the partner rows x_π come with the batch (`image_b`,
  `mixup_pair`: one λ and one permutation π of the global batch per step, drawn on the host), so
  nothing is gathered across devices. Returns (x̃, Mix(y_π, λ))."""
  lam = batch["lam"][0]
  return (reweight_jax.baselines.mix_images(batch["image"], batch["image_b"], lam),
          Mix(batch["label_b"], lam))


@dataclasses.dataclass(frozen=True)
class RunRecipe:
  """What the trainer provides a run besides the batch loss: `Recipe`'s hooks bound to the run.

  Attributes:
    model: (base model) → the model it trains (the method's wrapper), or None for the base model.
    views: augmented views per example the loss reads.
    sampler: (training split, read_run) → (the dataset positions one epoch draws from, a record),
      or None.
    pair: (training split) → draw(rng, global batch rows, H, W) → `PairDraw`, or None.
    mix: (batch) → (images, `Mix`): how the step mixes a paired batch, or None.
    indices: the loss reads the rows' dataset positions.
    epoch_end: (the train state's loss_state dict, EpochPass, epoch, num_epochs) → loss_state
      dict, or None.
  """
  model: Callable[[Any], Any] | None
  views: int
  sampler: Callable[..., tuple] | None
  pair: Callable[[Any], Callable[..., PairDraw]] | None
  mix: Callable[[dict], tuple[Any, Mix]] | None
  indices: bool
  epoch_end: Callable[..., dict] | None


def _bound(hook, settings):
  return None if hook is None else functools.partial(hook, settings)


def of(config) -> RunRecipe:
  """The recipe a run of `config` trains on: its method's, bound to the run's settings and state,
  with mixup's paired batches when `config.mixup_alpha` > 0 (a deferred method trains on its own
  recipe throughout, which is its before method's: the recipe cannot change at the start epoch)."""
  method = registry.get(config.loss).recipe_method
  recipe, settings = method.recipe, method.settings(registry.with_method_trees(config))
  epoch_end = None
  if recipe.epoch_end is not None:
    def epoch_end(loss_state: dict, epoch_pass: EpochPass, epoch: int, num_epochs: int) -> dict:
      state = recipe.epoch_end(settings, method.state_of(loss_state), epoch_pass, epoch,
                               num_epochs)
      return {**loss_state, **method.state_fields(state)}
  pair, mix = _bound(recipe.pair, settings), recipe.mix
  if config.get("mixup_alpha", 0) > 0:
    pair, mix = functools.partial(mixup_pair, config.mixup_alpha), mixup_mix
  return RunRecipe(model=_bound(recipe.model, settings), views=recipe.views,
                   sampler=_bound(recipe.sampler, settings), pair=pair, mix=mix,
                   indices=recipe.indices, epoch_end=epoch_end)
