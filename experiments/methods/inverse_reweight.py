"""The inverse reweighting (Wang et al., ICML 2026, arXiv 2605.10047; REWEIGHT spec) of any method's
per-example loss: ŵ_c = (L̄·L_c + α·w⁰_c)/(L_c² + α) times the macro factor β_c, from counters
carried in the loss state (`reweight_jax.inverse_reweighted_loss`); of a mixed batch its
mixed-label form (PIPELINES spec §4: class masses m_c, one counter update per step).

A wrapper, not a method of its own: `inverse_reweight` is it over CE (the paper's method) and
`<method>+inverse_reweight` over every other method with a per-example loss
(`Method.per_example`); deferred to `reweight.start_epoch`, before which the run trains as the
method alone.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

import reweight_jax
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Wrapper

TREE = ConfigTree(
    lambda: dict(alpha=0.0, prior="uniform", gamma=1.0, max_weight=10.0, macro=True,
                 stop_gradient=False,
                 refresh="epoch",  # β refresh cadence: 'epoch' (reference) or 'step'.
                 start_epoch=0),   # deferred (DRW-style) start; the method alone before it.
    ranges=(("alpha", *NON_NEGATIVE), ("gamma", *NON_NEGATIVE), ("max_weight", *POSITIVE),
            ("start_epoch", *NON_NEGATIVE)),
    choices=(("prior", reweight_jax.PRIOR_KINDS), ("refresh", ("epoch", "step"))),
    # Traced arguments of `inverse_reweighted_loss` (and its mixed-label form); `macro` and
    # `stop_gradient` are branches of the program, `start_epoch` its schedule.
    traceable=("alpha", "gamma", "max_weight"))


class ReweightLossState(NamedTuple):
  """The reweighting's loss state: its counters (`reweight_jax.ReweightState`)."""
  reweight: reweight_jax.ReweightState


def reweighted_mean(rw, rows, labels, state: ReweightLossState, info):
  """ŵ-weighted mean of the rows' losses from the reweighting's settings, the counters updated; of
  a mixed batch (the method gave losses against the partner labels) the mixed-label form."""
  kwargs = dict(alpha=rw.alpha, prior=reweight_jax.class_prior(info.class_counts, rw.prior),
                gamma=rw.gamma, max_weight=rw.max_weight, macro=rw.macro,
                stop_gradient=rw.stop_gradient,
                refresh_macro=(info.step_in_epoch == 0) if rw.refresh == "epoch" else True,
                axis_name=info.axis_name)
  if rows.losses_b is None:
    loss, reweight_state, aux = reweight_jax.inverse_reweighted_loss(rows.losses, labels,
                                                                     state.reweight, **kwargs)
  else:
    labels_b, lam = info.recipe.mix
    loss, reweight_state, aux = reweight_jax.mixed_inverse_reweighted_loss(
        rows.losses, rows.losses_b, labels, labels_b, lam, state.reweight, **kwargs)
  # L_c of a class absent from the batch is NaN (not measured), as everywhere in the project.
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "class_weight": aux.class_weights}
  return loss, ReweightLossState(reweight_state), metrics


def batch_counts(rw, state: ReweightLossState):
  """The counters' batch counts B_c at the end."""
  del rw
  return {"reweight_batch_counts": np.asarray(state.reweight.batch_counts).tolist()}


WRAPPER = Wrapper("inverse_reweight", over="ce", loss=reweighted_mean, trees={"reweight": TREE},
                  state={"reweight": reweight_jax.init_reweight_state},
                  state_type=ReweightLossState,
                  start="reweight.start_epoch", state_summary=batch_counts)
