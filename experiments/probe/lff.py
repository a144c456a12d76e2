"""Learning from Failure (LfF) on frozen features: a biased and a debiased linear head together.

The registry's 'lff' entry (`experiments.methods.lff`: GCE on the biased head, the relative-
difficulty weight W on the debiased head's CE, per-example EMAs indexed by dataset position) trained
by the linear probe's step (`experiments.probe.linear_head.train_probe`, which gives the loss the
rows' positions as LfF's recipe says) on `TWIN_HEADS`, the probe's analogue of the recipe's model
wrapper (`experiments.methods.lff.WithBiasedTwin`): both heads see the same batches, one backward,
one optimiser over both; the debiased head is the one evaluated.
"""

from __future__ import annotations

import jax
import numpy as np

from experiments.probe.linear_head import (Head, ProbeSchedule, init_params, logits_of,
                                           make_train_epoch, train_probe)


def init_twin(key: jax.Array, feature_dim: int, num_classes: int, init_std: float) -> dict:
  """{"debiased": ERM's head of the seed, "biased": a head drawn from fold_in(key, 1)}."""
  return {"debiased": init_params(key, feature_dim, num_classes, init_std),
          "biased": init_params(jax.random.fold_in(key, 1), feature_dim, num_classes, init_std)}


def twin_outputs(params: dict, features: jax.Array) -> tuple:
  """The debiased head's logits, and the biased head's as the output 'biased_logits' the loss
  reads."""
  return (logits_of(params["debiased"], features), features,
          {"biased_logits": logits_of(params["biased"], features)})


TWIN_HEADS = Head(init_twin, twin_outputs)


def lff_key(q: float, alpha: float) -> tuple[str, tuple]:
  """The `method_key` of the registry's 'lff' entry with GCE exponent q and EMA decay α."""
  return "lff", (("lff.alpha", alpha), ("lff.q", q))


def make_lff_epoch(schedule: ProbeSchedule, steps_per_epoch: int, q: float, alpha: float):
  """jit(state, features, labels, batch_indices, epoch, rng) → (state, mean loss): one LfF epoch
  (`linear_head.make_train_epoch` of the 'lff' entry on both heads)."""
  return make_train_epoch(lff_key(q, alpha), schedule, steps_per_epoch, TWIN_HEADS)


def train_lff(features: np.ndarray, labels: np.ndarray, schedule: ProbeSchedule, seed: int, q: float,
              alpha: float):
  """The debiased head's params (initialised as ERM's head of the seed), losses, final state
  (`ProbeState`; its loss state the entry's: {'lff': `reweight_jax.baselines.LfFState`, 'lff_labels'})."""
  state, epoch_losses = train_probe(lff_key(q, alpha), features, labels, schedule, seed,
                                    head=TWIN_HEADS)
  return state.params["debiased"], epoch_losses, state
