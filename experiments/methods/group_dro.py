"""Group DRO over the classes as groups (Sagawa et al., ICLR 2020; COMPARISONS spec, 'Class-level
Group DRO'): the loss Σ_c q_c L_c with q updated every step by exponentiated gradient ascent on the
per-class losses (step size η, adjustment C/√n_c, optionally normalised)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import reweight_jax
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method

TREE = ConfigTree(lambda: dict(eta=0.01, c=0.0, normalize=False),
                  ranges=(("eta", *NON_NEGATIVE), ("c", *NON_NEGATIVE)))


class GroupDROLossState(NamedTuple):
  """Group DRO's loss state: q, the weights of the classes as groups."""
  group_dro_q: jax.Array  # float32 [K]


def group_dro(gd, logits, features, labels, state: GroupDROLossState, info):
  del features
  adjustment = (reweight_jax.baselines.group_dro_adjustment(info.class_counts, gd.c)
                if gd.c > 0 else None)
  loss, q, aux = reweight_jax.baselines.group_dro_loss(
      reweight_jax.cross_entropy_loss(logits, labels), labels, state.group_dro_q, eta=gd.eta,
      adjustment=adjustment, normalize=gd.normalize, axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "group_dro_q": q}
  return loss, GroupDROLossState(q), metrics


def final_q(gd, state: GroupDROLossState):
  del gd
  return {"group_dro_q": np.asarray(state.group_dro_q).tolist()}


METHODS = (Method("group_dro", group_dro, trees={"group_dro": TREE}, reads=("group_dro",),
                  state={"group_dro_q": reweight_jax.baselines.init_group_dro_q},
                  state_type=GroupDROLossState,
                  state_summary=final_q),)
