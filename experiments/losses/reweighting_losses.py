"""Cross-entropy, MR2 and the inverse reweighting (REWEIGHT spec) of per-example losses: CE's or
MR2's paper-form terms, of a mixup batch in its mixed-label form (`_reweighted`, which the
pipelines' reweighted entries share)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import ml_collections

import mr2_jax
import reweight_jax
from experiments.common.errors import ConfigError
from experiments.losses.batch_means import mean_share
from experiments.losses.entry import recipe_mix


def _ce(config, logits, features, labels, state, info):
  """Mean CE; of a mixup batch λ·CE(z, y) + (1 − λ)·CE(z, y_π)."""
  del config, features
  per_example = reweight_jax.cross_entropy_loss(logits, labels)
  if recipe_mix(info) is not None:
    labels_b, lam = recipe_mix(info)
    per_example = lam * per_example + (1 - lam) * reweight_jax.cross_entropy_loss(logits, labels_b)
  return mean_share(per_example, info.axis_name), state, {}


def mr2_kwargs(mr2: ml_collections.ConfigDict) -> dict[str, Any]:
  """`mr2_jax.mr2_loss` keyword arguments of the config's MR2 sub-tree."""
  return dict(lam=mr2.lam, c_bar=mr2.c_bar, decay=mr2.decay, form=mr2.form,
              uniform_margin=mr2.uniform_margin, p=mr2.p, temperature=mr2.temperature,
              stats_reduction=mr2.stats_reduction)


def _mr2(config, logits, features, labels, state, info):
  loss, class_stats, aux = mr2_jax.mr2_loss(logits, features, labels, state["class_stats"],
                                            **mr2_kwargs(config.mr2), axis_name=info.axis_name)
  return loss, {**state, "class_stats": class_stats}, aux._asdict()


def _reweighted(config, per_example, labels, state, info, mix=None, per_example_b=None):
  """The inverse reweighting of per-example losses (REWEIGHT spec), from `config.reweight`; of a
  mixed batch (`mix`, the (partner labels, λ) its caller read from `StepInfo.recipe['mix']`, with
  the losses `per_example_b` against the partner labels) its mixed-label form (PIPELINES spec §4:
  class masses m_c, one counter update per step). The caller reads the mix, so that a loss reads it
  only where it uses it (`Loss.reads_mix`)."""
  rw = config.reweight
  kwargs = dict(alpha=rw.alpha, prior=reweight_jax.class_prior(info.class_counts, rw.prior),
                gamma=rw.gamma, max_weight=rw.max_weight, macro=rw.macro,
                stop_gradient=rw.stop_gradient,
                refresh_macro=(info.step_in_epoch == 0) if rw.refresh == "epoch" else True,
                axis_name=info.axis_name)
  if mix is None:
    loss, reweight_state, aux = reweight_jax.inverse_reweighted_loss(per_example, labels,
                                                                     state["reweight"], **kwargs)
  else:
    labels_b, lam = mix
    loss, reweight_state, aux = reweight_jax.mixed_inverse_reweighted_loss(
        per_example, per_example_b, labels, labels_b, lam, state["reweight"], **kwargs)
  # L_c of a class absent from the batch is NaN (not measured), as everywhere in the project.
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "class_weight": aux.class_weights}
  return loss, {**state, "reweight": reweight_state}, metrics


def _inverse_reweight(config, logits, features, labels, state, info):
  del features
  mix = recipe_mix(info)
  loss_b = None if mix is None else reweight_jax.cross_entropy_loss(logits, mix[0])
  return _reweighted(config, reweight_jax.cross_entropy_loss(logits, labels), labels, state, info,
                     mix, loss_b)


def _mr2_inverse_reweight(config, logits, features, labels, state, info):
  mr2 = config.mr2
  p, temperature = mr2_jax.objective.form_defaults(mr2.form, features.shape[1], p=mr2.p,
                                                   temperature=mr2.temperature)
  margin_ce, representation, class_stats, aux = mr2_jax.mr2_terms(
      logits, features, labels, state["class_stats"], lam=mr2.lam, c_bar=mr2.c_bar,
      decay=mr2.decay, p=p, temperature=temperature, uniform_margin=mr2.uniform_margin,
      stats_reduction=mr2.stats_reduction, axis_name=info.axis_name)
  loss, state, metrics = _reweighted(config, margin_ce + mr2.lam * representation, labels,
                                     {**state, "class_stats": class_stats}, info)
  return loss, state, {**aux._asdict(), **metrics}


def _check_paper_form(config):
  if config.mr2.form != "paper":
    raise ConfigError("config.mr2.form: the MR2 + reweighting combination reweights per-example "
                      "terms, which exist in the paper form only")
