"""Distributionally robust losses over the classes as groups: Group DRO (its q updated every step)
and FairDRO (its q set from a pass over the training set after each epoch)."""

from __future__ import annotations

import jax.numpy as jnp

import reweight_jax
from experiments.losses.entry import EpochPass


def _group_dro(config, logits, features, labels, state, info):
  del features
  gd = config.group_dro
  adjustment = (reweight_jax.baselines.group_dro_adjustment(info.class_counts, gd.c) if gd.c > 0 else None)
  loss, q, aux = reweight_jax.baselines.group_dro_loss(
      reweight_jax.cross_entropy_loss(logits, labels), labels, state["group_dro_q"], eta=gd.eta,
      adjustment=adjustment, normalize=gd.normalize, axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "group_dro_q": q}
  return loss, {**state, "group_dro_q": q}, metrics


def _fairdro(config, logits, features, labels, state, info):
  del config, features
  loss, aux = reweight_jax.baselines.fairdro_loss(reweight_jax.cross_entropy_loss(logits, labels), labels,
                                        state["fairdro_q"], axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present}
  return loss, state, metrics


def fairdro_epoch_end(config, state, epoch_pass: EpochPass, epoch, num_epochs):
  """q ← q + s_e (q* − q): q* from the per-class mean training loss L_c of the pass (classes
  without training examples left out), s_e the smoothing step after epoch `epoch` (0-based)."""
  fd = config.fairdro
  present = epoch_pass.counts > 0
  class_losses = reweight_jax.class_mean(epoch_pass.loss_sums, epoch_pass.counts)
  q_star = reweight_jax.baselines.fairdro_best_response(class_losses, fd.rho, clip=fd.clip, present=present)
  q = reweight_jax.baselines.fairdro_update(state["fairdro_q"], q_star, epoch, num_epochs, fd.schedule)
  return {**state, "fairdro_q": q}
