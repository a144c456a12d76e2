"""The long-tail baselines' batch losses: class-weighted CE (inverse frequency, class-balanced),
focal, LDAM (with its deferred re-weighting, DRW), logit adjustment, balanced softmax, IB and EQL
(its dropped logits drawn per step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.losses.batch_means import _label_weights
from experiments.losses.batch_means import global_rows
from experiments.losses.batch_means import mean_share
from experiments.losses.entry import LossApply


def _weighted_ce(weights_of: Callable[[Any, jax.Array], jax.Array]) -> LossApply:
  def apply(config, logits, features, labels, state, info):
    del features
    weights = _label_weights(weights_of(config, info.class_counts), labels)
    return (mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name, weights),
            state, {})
  return apply


def _focal(config, logits, features, labels, state, info):
  del features
  return (mean_share(reweight_jax.baselines.focal_loss(logits, labels, gamma=config.focal.gamma),
                     info.axis_name), state, {})


def _ldam(drw: bool) -> LossApply:
  def apply(config, logits, features, labels, state, info):
    del features
    ldam = config.ldam
    per_example = reweight_jax.baselines.ldam_loss(logits, labels, info.class_counts,
                                         max_margin=ldam.max_margin, scale=ldam.scale)
    weights = (_label_weights(reweight_jax.baselines.class_balanced_weights(info.class_counts, ldam.drw_beta),
                              labels) if drw else None)
    return mean_share(per_example, info.axis_name, weights), state, {}
  return apply


def _check_ldam_head(config):
  if config.head == "cosine" and config.ldam.scale != 1.0:
    # LDAM is CE(s·(cos − Δ_y e_y)): the cosine head already multiplies by its scale, so a second
    # LDAM scale would square it and shrink the margin. Make the head's scale LDAM's s.
    raise ConfigError(
        f"config.ldam.scale: with the cosine head (scale {config.cosine_scale:g}) LDAM needs "
        f"ldam.scale=1 and ldam.max_margin={0.5 * config.cosine_scale:g} (= 0.5 × the head scale)")


def _logit_adjust(config, logits, features, labels, state, info):
  del features
  per_example = reweight_jax.baselines.logit_adjusted_loss(logits, labels, info.class_counts,
                                                 tau=config.logit_adjust.tau)
  return mean_share(per_example, info.axis_name), state, {}


def _balanced_softmax(config, logits, features, labels, state, info):
  del config, features
  per_example = reweight_jax.baselines.balanced_softmax_loss(logits, labels, info.class_counts)
  return mean_share(per_example, info.axis_name), state, {}


def _ib(config, logits, features, labels, state, info):
  per_example = reweight_jax.baselines.ib_loss(
      logits, labels, features, alpha=config.ib.alpha,
      class_weights=reweight_jax.baselines.inverse_frequency_weights(info.class_counts))
  return mean_share(per_example, info.axis_name), state, {}


def _eql(config, logits, features, labels, state, info):
  del features
  if info.rng is None:
    raise ValueError("the 'eql' loss draws its dropped logits per step: StepInfo.rng is None")
  rare = reweight_jax.baselines.eql_rare_classes(info.class_counts, config.eql.lam)
  dropped = reweight_jax.baselines.eql_dropped_at(info.rng, global_rows(labels.shape[0], info.axis_name),
                                        logits.shape[1], config.eql.gamma)
  return (mean_share(reweight_jax.baselines.eql_loss(logits, labels, rare, dropped), info.axis_name), state,
          {"eql_rare": rare})
