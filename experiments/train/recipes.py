"""Recipes: what a method changes outside its batch loss, provided by the trainer.

A loss entry (`experiments.losses.registry`) is a batch objective only: its apply function, the
config sub-trees it reads, the state it carries, its deferred start and its checks. Some methods
also change how the model, the batch or the epoch is made: SupCon trains a projection head on two
augmented views of each example, LfF a biased twin indexed by dataset position, GLMC re-balanced
paired batches mixed on the device, JTT an up-sampled training set, FairDRO a pass over the
training set after each epoch, and mixup (any entry that takes it, `config.mixup_alpha` > 0) mixed
batches. Each such method's `Recipe` is declared once, in `RECIPES`, under the method's name
(`config.loss`); every other method trains on the plain recipe. The trainer (`loop`, `steps`,
`train_state`) and the linear probe read only `Recipe` fields, so a new method of this kind is a
loss entry plus a recipe here, never a change of the step or the loop.

Where big_vision keeps such choices inside each project's trainer (`trainers/proj/*`, a copy of the
loop per method) and MaxText in the model config, a recipe is data the one trainer reads: the loop
stays one, and the recipe of every method is listed in one place (and on its documentation page).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.losses import dro_losses
from experiments.losses import registry as losses
from experiments.models import registry as models


@dataclasses.dataclass(frozen=True)
class Recipe:
  """What the trainer provides to a method besides the batch loss.

  Attributes:
    model: (config, base model) → the model it trains: a wrapper (`experiments.models.registry`)
      that keeps the base model's parameters where they are and adds outputs the loss reads from
      `StepInfo.recipe['outputs']` in training mode (SupCon's projection head, LfF's biased twin,
      GLMC's projections, ETF-DR's fixed classifier).
    views: augmented views per example in a training batch (SupCon, GLMC: 2); the step runs the
      model on the V·B views (view-major) with the labels (and positions, partners' labels)
      repeated per view.
    sampler: the name of a sampler in `experiments.train.samplers.SAMPLERS` — (config, training
      split) → (the dataset positions one epoch draws from, a record written to the run's
      sampler.json) — for a method that trains on an edited training set (JTT's up-sampled error
      set). A name, not the function: JTT's sampler reads its stage-1 run through the train state,
      which reads the recipes.
    pair: (config, training split) → draw(rng, global batch rows, H, W) → {'rows', 'lam', 'box'}:
      each row's partner in a paired batch, the step's λ and CutMix box, drawn on the host
      (`data.batches.train_batches(pair=...)`).
    mix: (batch) → (images, (partner labels int [B], λ)): how the step mixes a paired batch on the
      device (GLMC's two mixtures, mixup's x̃ = λx + (1 − λ)x_π); the mix reaches the loss as
      `StepInfo.recipe['mix']`.
    indices: the loss reads the rows' dataset positions (`StepInfo.recipe['indices']`, LfF's
      per-example EMAs).
    epoch_end: (config, loss_state, EpochPass, epoch, num_epochs) → loss_state, for a method whose
      state is set from a pass over the training set after each epoch (FairDRO's q); the trainer
      runs that pass (eval mode, no augmentation) only for such a method.

  Whether a method takes mixup batches is not a recipe field: it follows from its loss
  (`takes_mixup`, from `Loss.reads_mix`, which the loss registry checks against what the loss
  reads).
  """
  model: Callable[[Any, Any], Any] | None = None
  views: int = 1
  sampler: str | None = None
  pair: Callable[[Any, Any], Callable[..., dict]] | None = None
  mix: Callable[[dict], tuple[Any, tuple]] | None = None
  indices: bool = False
  epoch_end: Callable[..., dict] | None = None


# ------------------------------------------------------------------------------------------------
# Model wrappers
# ------------------------------------------------------------------------------------------------

def supcon_model(config, base):
  """SupCon's projection head g on the features (`models.WithProjection`)."""
  return models.WithProjection(base, features=config.supcon.projection_dim)


def lff_model(config, base):
  """LfF's biased twin f_B beside the debiased model f_D (`models.WithBiasedTwin`)."""
  del config
  return models.WithBiasedTwin(base)


def glmc_model(config, base):
  """GLMC's fc head, projection and prediction MLPs beside the class-balanced head fc_cb."""
  return models.GLMCModel(base, base.num_classes, projection_dim=config.glmc.projection_dim)


def etf_model(config, base):
  """The fixed ETF classifier M as an output (`models.WithETFClassifier`), for ETF-DR."""
  del config
  return models.WithETFClassifier(base)


# ------------------------------------------------------------------------------------------------
# Paired batches: drawn on the host, mixed on the device
# ------------------------------------------------------------------------------------------------

def glmc_pair(config, train):
  """GLMC's re-balanced partners (PIPELINES spec §3): each row's partner drawn with probability
  ∝ n_c^(−r) per class, λ ~ Beta(1, 1) (the release's --beta is dead) and one CutMix box per step."""
  r = config.glmc.r

  def draw(rng, global_rows, height, width):
    rows = reweight_jax.baselines.glmc_rebalanced_indices(train.labels, train.class_counts, r,
                                                len(global_rows), rng)
    lam = float(rng.beta(1.0, 1.0))
    return {"rows": rows, "lam": lam, "box": reweight_jax.baselines.cutmix_box(lam, height, width, rng)}
  return draw


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
    return {"rows": np.asarray(global_rows)[rng.permutation(len(global_rows))], "lam": lam,
            "box": (0, 0, 0, 0)}
  return draw


def mixup_mix(batch):
  """x̃ = λx + (1 − λ)x_π of a mixup batch: the partner rows x_π come with the batch (`image_b`,
  `mixup_pair`: one λ and one permutation π of the global batch per step, drawn on the host), so
  nothing is gathered across devices. Returns (x̃, (y_π, λ))."""
  lam = batch["lam"][0]
  return reweight_jax.baselines.mix_images(batch["image"], batch["image_b"], lam), (batch["label_b"], lam)


def glmc_mix(batch):
  """GLMC's two mixtures of a paired batch (PIPELINES spec §3): each row i with its re-balanced
  partner, one λ and one CutMix box per step — the global mixture x_g = λx¹ + (1 − λ)x¹_b of the
  first views and the local x_l = CutMix(x², x²_b) of the second. Returns the [B, 2, ...] views
  (x_g, x_l) and the mix (partner labels, λ)."""
  images, partners = batch["image"], batch["image_b"]
  lam, box = batch["lam"][0], batch["box"][0]
  mixed_global = reweight_jax.baselines.mix_images(images[:, 0], partners[:, 0], lam)
  mixed_local = reweight_jax.baselines.cutmix(images[:, 1], partners[:, 1], box)
  return jnp.stack([mixed_global, mixed_local], axis=1), (batch["label_b"], lam)


# ------------------------------------------------------------------------------------------------
# The recipes
# ------------------------------------------------------------------------------------------------

PLAIN = Recipe()
GLMC = Recipe(model=glmc_model, views=2, pair=glmc_pair, mix=glmc_mix)
ETF_DR = Recipe(model=etf_model)

# Methods that are more than a batch loss, by loss name (a deferred entry trains on its before
# entry's recipe throughout: the recipe cannot change at the start epoch).
RECIPES: dict[str, Recipe] = {
    "supcon": Recipe(model=supcon_model, views=2),
    "lff": Recipe(model=lff_model, indices=True),
    "jtt": Recipe(sampler="jtt"),
    "fairdro": Recipe(epoch_end=dro_losses.fairdro_epoch_end),
    "glmc": GLMC,
    "glmc+inverse_reweight": GLMC,
    "etf_dr": ETF_DR,
    "etf_dr+inverse_reweight": ETF_DR,
}


def method_recipe(name: str) -> Recipe:
  """The recipe of method (loss) `name` as declared, mixup not applied."""
  losses.get(name)  # an unknown loss is named
  return RECIPES.get(name, PLAIN)


def takes_mixup(name: str) -> bool:
  """Whether method `name` trains on mixup batches: its loss reads the mix (`Loss.reads_mix`, in
  both phases of a deferred entry) and its recipe has no paired batches of its own (GLMC's) and one
  view."""
  entry = losses.get(name)
  phases = [entry] if entry.start is None else [entry, losses.get(entry.before)]
  recipe = method_recipe(name)
  return all(e.reads_mix for e in phases) and recipe.pair is None and recipe.views == 1


def of(config) -> Recipe:
  """The recipe a run of `config` trains on: its method's, with mixup's paired batches when
  `config.mixup_alpha` > 0 (checked by `validate`)."""
  recipe = method_recipe(config.loss)
  if config.get("mixup_alpha", 0) > 0:
    return dataclasses.replace(recipe, pair=mixup_pair, mix=mixup_mix)
  return recipe


def validate(config) -> None:
  """Raises ConfigError (naming the field) for mixup with a method that does not take mixed
  batches or with several views."""
  recipe = method_recipe(config.loss)
  if config.get("mixup_alpha", 0) > 0 and not takes_mixup(config.loss):
    raise ConfigError(f"config.mixup_alpha: the {config.loss!r} loss does not take mixup batches "
                      f"(entries that do: {[n for n in losses.LOSSES if takes_mixup(n)]})")
  if config.get("mixup_alpha", 0) > 0 and max(config.get("views", 1), recipe.views) > 1:
    raise ConfigError("config.mixup_alpha: mixup batches are single-view (config.views = 1 and a "
                      "loss with one view)")
