"""The two debiasing methods (COMPARISONS spec): JTT (CE on a training set with the stage-1 model's
error set up-sampled; its config check here) and LfF (GCE on a biased twin, its per-example EMAs
weighting the debiased model's CE)."""

from __future__ import annotations

import jax.numpy as jnp

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.losses.batch_means import _global_mean
from experiments.losses.entry import recipe_indices
from experiments.losses.entry import recipe_output


def _check_jtt(config):
  if not config.jtt.stage1:
    raise ConfigError("config.jtt.stage1: the 'jtt' loss needs the workdir of its stage-1 ERM run")
  if int(config.jtt.upweight) != config.jtt.upweight:
    raise ConfigError(f"config.jtt.upweight: λ_up must be an integer, got {config.jtt.upweight}")


def _lff(config, logits, features, labels, state, info):
  """f_D's logits are the model's; f_B's come from the twin (`models.WithBiasedTwin`)."""
  del features
  indices = recipe_indices(info)
  if indices is None:
    raise ValueError("the 'lff' loss indexes its EMAs by dataset position: "
                     "StepInfo.recipe['indices'] is not given")
  loss, lff_state, aux = reweight_jax.baselines.lff_loss(
      recipe_output(info, "biased_logits", "lff"), logits, labels, indices, state["lff"],
      state["lff_labels"], q=config.lff.q, alpha=config.lff.alpha, axis_name=info.axis_name)
  return loss, {**state, "lff": lff_state}, {
      "lff_weight": _global_mean(jnp.mean(aux.weights), info.axis_name)}
