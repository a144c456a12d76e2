"""Learning from Failure (Nam et al., NeurIPS 2020; COMPARISONS spec, 'LfF'): a biased twin f_B
trained with the generalised CE (exponent q) beside the debiased model f_D, whose CE is weighted
per example by the relative difficulty W = L_B / (L_B + L_D) of EMAs (decay α) indexed by dataset
position."""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

import reweight_jax
from experiments.methods.batch_means import global_mean
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import Recipe
from experiments.models import Outputs

TREE = ConfigTree(lambda: dict(q=0.7, alpha=0.7),
                  ranges=(("q", (0, False), (1, True)), ("alpha", (0, True), (1, True))))


class WithBiasedTwin(nn.Module):
  """The base model (LfF's debiased f_D, the one evaluated) and a second copy of it under 'biased'
  (f_B, own parameters and BatchNorm statistics), run on the same batch: the per-row output
  'biased_logits' [B, K]."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)
    self.biased = self.base.clone()

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not (train or self.is_initializing()):
      return logits, features
    biased_logits, _ = self.biased(x, train=train)
    return (Outputs(logits, features, {"biased_logits": biased_logits}) if train
            else (logits, features))


def lff_model(lff, base):
  """LfF's biased twin f_B beside the debiased model f_D (`WithBiasedTwin`)."""
  del lff
  return WithBiasedTwin(base)


class LfFLossState(NamedTuple):
  """LfF's loss state, per training example: the two models' loss EMAs
  (`reweight_jax.baselines.LfFState`) and the labels int [N] their class maxima run over."""
  lff: reweight_jax.baselines.LfFState
  lff_labels: jax.Array


def learning_from_failure(lff, logits, features, labels, state: LfFLossState, info):
  """f_D's logits are the model's; f_B's come from the twin (`WithBiasedTwin`)."""
  del features
  indices = info.recipe.indices
  if indices is None:
    raise ValueError("the 'lff' loss indexes its EMAs by dataset position: "
                     "StepInfo.recipe.indices is not given")
  loss, lff_state, aux = reweight_jax.baselines.lff_loss(
      info.recipe.output("biased_logits", "lff"), logits, labels, indices, state.lff,
      state.lff_labels, q=lff.q, alpha=lff.alpha, axis_name=info.axis_name)
  return loss, state._replace(lff=lff_state), {
      "lff_weight": global_mean(jnp.mean(aux.weights), info.axis_name)}


METHODS = (Method(
    "lff", learning_from_failure, trees={"lff": TREE}, reads=("lff",),
    # Per-example state from the training labels int [N]: the EMAs, and the labels its class
    # maxima run over.
    example_state={"lff": lambda labels: reweight_jax.baselines.init_lff_state(len(labels)),
                   "lff_labels": lambda labels: jnp.asarray(labels, jnp.int32)},
    state_type=LfFLossState,
    recipe=Recipe(model=lff_model, indices=True)),)
