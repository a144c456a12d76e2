"""What every loss entry is: the `Loss` dataclass (a batch objective: its apply, config sub-trees,
state, deferred start and checks), the `StepInfo` a loss reads besides the batch, the `EpochPass`
of a method with an epoch-end pass, the initial loss state of each state field (`STATE_INIT`, per
class; `EXAMPLE_STATE_INIT`, per training example) and the readers of the recipe's inputs
(`recipe_output`, `recipe_mix`, `recipe_indices`: what a method's recipe, `experiments.train.recipes`,
gives its loss in `StepInfo.recipe`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import mr2_jax
import reweight_jax


class StepInfo(NamedTuple):
  """What a loss may read besides the batch (arrays traced in the step, `axis_name` static)."""
  epoch: jax.Array                 # int, the current epoch (step // steps_per_epoch)
  step_in_epoch: jax.Array         # int
  class_counts: jax.Array          # float32 [K], training-set class counts n_c
  axis_name: str | None = None     # data-parallel axis (pmap / shard_map), None on one device
  rng: jax.Array | None = None     # this step's PRNG key (the same on every device), for losses
                                   # that draw (EQL); a pure function of (run seed, step)
  recipe: dict | None = None       # what the method's recipe gives its loss (None: nothing):
                                   # 'outputs', the model wrapper's extra outputs, rows as the
                                   # logits' (SupCon's 'projection', LfF's 'biased_logits');
                                   # 'indices', int [B] the rows' training-set positions (LfF);
                                   # 'mix', (labels_b int [B], λ) of a mixed batch (mixup's
                                   # x̃ = λx + (1−λ)x_π, GLMC's pairs): partner labels and λ


LossApply = Callable[..., tuple[jax.Array, dict, dict]]


@dataclasses.dataclass(frozen=True)
class Loss:
  """One training objective.

  Attributes:
    apply: (config, logits, features, labels, loss_state, step_info) → (loss, loss_state, metrics)
      once started.
    reads: the config sub-trees (`CONFIG_TREES` keys) it reads; their ranges are checked.
    state: the loss-state fields it carries (`STATE_INIT` keys).
    start: config field of the start epoch of a deferred entry (None: active from the first step).
    before: the entry trained before `start`.
    check: extra config checks (raise ConfigError).
    reads_mix: its apply reads the mix of a mixed batch (`recipe_mix`) and weighs each row's loss
      against both labels, λ and 1 − λ: the one statement of whether the method trains on mixed
      batches (mixup, `experiments.train.recipes.takes_mixup`; GLMC's pairs). It is checked
      against what the apply does every time a step is traced (`make_loss_fn` records the
      reads: an entry that ignores a mix it is given, or reads one it does not declare, is a
      ValueError), so the flag cannot disagree with the loss.

  What a method changes outside the batch loss (a model wrapper, views, sampling, paired or mixed
  batches, an epoch-end pass) is its recipe, `experiments.train.recipes.RECIPES`, which the trainer
  provides; the loss reads the recipe's inputs from `StepInfo.recipe`.
  """
  apply: LossApply
  reads: tuple[str, ...] = ()
  state: tuple[str, ...] = ()
  start: str | None = None
  before: str = "ce"
  check: Callable[[Any], None] | None = None
  reads_mix: bool = False


class EpochPass(NamedTuple):
  """Per-class sums of a pass over the training set (float32 [K] each, reduced over devices)."""
  loss_sums: jax.Array     # Σ cross-entropy
  correct: jax.Array       # correct predictions
  counts: jax.Array        # examples


STATE_INIT = {"class_stats": mr2_jax.init_class_stats, "reweight": reweight_jax.init_reweight_state,
              "group_dro_q": reweight_jax.baselines.init_group_dro_q, "fairdro_q": reweight_jax.baselines.init_fairdro_q}
# Per-example state, from the training labels int [N] (LfF's EMAs and the labels its class maxima
# run over).
EXAMPLE_STATE_INIT = {"lff": lambda labels: reweight_jax.baselines.init_lff_state(len(labels)),
                      "lff_labels": lambda labels: jnp.asarray(labels, jnp.int32)}


def recipe_output(info: StepInfo, key: str, loss: str) -> jax.Array:
  """The model wrapper's output `key` (StepInfo.recipe['outputs']), which the `loss` entry reads."""
  outputs = (info.recipe or {}).get("outputs") or {}
  if key not in outputs:
    raise ValueError(f"the {loss!r} loss reads the model output {key!r} (StepInfo.recipe"
                     f"['outputs']), which its recipe's model wrapper adds: build the model with "
                     f"`train_state.build_model`")
  return outputs[key]


def recipe_mix(info: StepInfo) -> tuple | None:
  """(partner labels int [B], λ) of a mixed batch (StepInfo.recipe['mix']), None for a plain one."""
  return (info.recipe or {}).get("mix")


class RecipeReads(dict):
  """`StepInfo.recipe` that records which of its keys a loss asked for (`make_loss_fn`'s check of
  `Loss.reads_mix`); truthy even when empty, so `info.recipe or {}` keeps the recorder."""

  def __init__(self, given=None):
    super().__init__(given or {})
    self.asked: set[str] = set()

  def __bool__(self):
    return True

  def get(self, key, default=None):
    self.asked.add(key)
    return super().get(key, default)

  def __getitem__(self, key):
    self.asked.add(key)
    return super().__getitem__(key)

  def __contains__(self, key):
    self.asked.add(key)
    return super().__contains__(key)


def recipe_indices(info: StepInfo) -> jax.Array | None:
  """int [B] the rows' training-set positions (StepInfo.recipe['indices']), None when not given."""
  return (info.recipe or {}).get("indices")
