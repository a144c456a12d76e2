"""The recipe a run trains on: its method's (`experiments.methods.method.Recipe`, declared in the
method's module and read from the registry), with mixup's paired batches added when
`config.mixup_alpha` > 0 for a method that takes them (`registry.takes_mixup`, checked by
`configs.default.validate`). The trainer (`loop`, `steps`, `train_state`) reads only `Recipe`
fields, so it names no method."""

from __future__ import annotations

import dataclasses

import numpy as np

import reweight_jax
from experiments.methods import registry
from experiments.data.batches import PairDraw
from experiments.methods.method import Mix
from experiments.methods.method import Recipe


def mixup_pair(config, train):
  """Mixup's partners as a paired batch: one λ ~ Beta(α, α) (α = `config.mixup_alpha`) and one
  permutation π of the global batch per step, drawn on the host (the step mixes
  x̃ = λx + (1 − λ)x_π, `mixup_mix`); each process loads its rows' partners, so no image crosses
  between devices, and the pairs are the same whatever the number of processes or devices. A
  partner is its example augmented with its own draws (the batch's key [seed, epoch, b, 1001]), not
  the copy in the other row."""
  del train
  alpha = float(config.mixup_alpha)

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


def of(config) -> Recipe:
  """The recipe a run of `config` trains on: its method's, with mixup's paired batches when
  `config.mixup_alpha` > 0 (a deferred method trains on its own recipe throughout, which is its
  before method's: the recipe cannot change at the start epoch)."""
  recipe = registry.get(config.loss).recipe
  if config.get("mixup_alpha", 0) > 0:
    return dataclasses.replace(recipe, pair=mixup_pair, mix=mixup_mix)
  return recipe
