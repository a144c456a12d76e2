"""FairDRO over the classes as groups (Jung et al., ICLR 2023; COMPARISONS spec, 'FairDRO, classes
as groups'): the loss Σ_c q_c L_c with q set after each epoch from a pass over the training set —
the best response q* to the per-class training losses within radius ρ, smoothed by a schedule."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import reweight_jax
from mr2_reweight_core import metrics as perclass_metrics
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import EpochPass
from experiments.methods.method import Method
from experiments.methods.method import Recipe

TREE = ConfigTree(lambda: dict(rho=0.5, schedule="linear", clip=False),
                  ranges=(("rho", *POSITIVE),),
                  choices=(("schedule", reweight_jax.baselines.FAIRDRO_SCHEDULES),))


class FairDROLossState(NamedTuple):
  """FairDRO's loss state: q, the weights of the classes as groups (set after each epoch)."""
  fairdro_q: jax.Array  # float32 [K]


def fairdro(fd, logits, features, labels, state: FairDROLossState, info):
  del fd, features
  loss, aux = reweight_jax.baselines.fairdro_loss(reweight_jax.cross_entropy_loss(logits, labels),
                                                  labels, state.fairdro_q,
                                                  axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present}
  return loss, state, metrics


def fairdro_epoch_end(fd, state: FairDROLossState, epoch_pass: EpochPass, epoch, num_epochs):
  """q ← q + s_e (q* − q): q* from the per-class mean training loss L_c of the pass (classes
  without training examples left out), s_e the smoothing step after epoch `epoch` (0-based)."""
  present = epoch_pass.counts > 0
  class_losses = perclass_metrics.class_mean(epoch_pass.loss_sums, epoch_pass.counts)
  q_star = reweight_jax.baselines.fairdro_best_response(class_losses, fd.rho, clip=fd.clip,
                                                        present=present)
  q = reweight_jax.baselines.fairdro_update(state.fairdro_q, q_star, epoch, num_epochs,
                                            fd.schedule)
  return FairDROLossState(q)


def final_q(fd, state: FairDROLossState):
  del fd
  return {"fairdro_q": np.asarray(state.fairdro_q).tolist()}


METHODS = (Method("fairdro", fairdro, trees={"fairdro": TREE}, reads=("fairdro",),
                  state={"fairdro_q": reweight_jax.baselines.init_fairdro_q},
                  state_type=FairDROLossState,
                  recipe=Recipe(epoch_end=fairdro_epoch_end), state_summary=final_q),)
