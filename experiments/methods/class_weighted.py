"""Class-weighted cross-entropy, two long-tail baselines: inverse class frequency (w_c ∝ 1/n_c) and
the class-balanced weights of Cui et al. (CVPR 2019), w_c ∝ (1 − β)/(1 − β^{n_c})."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

import reweight_jax
from experiments.methods.batch_means import label_weights
from experiments.methods.batch_means import mean_share
from experiments.methods.method import ConfigTree
from experiments.methods.method import LossApply
from experiments.methods.method import Method

TREE = ConfigTree(lambda: dict(beta=0.9999), ranges=(("beta", (0, True), (1, False)),))


def weighted_cross_entropy(weights_of: Callable[[Any, jax.Array], jax.Array]) -> LossApply:
  """The mean of w_{y_i}·CE_i over the rows, weights_of(settings, class counts) → w [K]."""
  def apply(settings, logits, features, labels, state, info):
    del features
    weights = label_weights(weights_of(settings, info.class_counts), labels)
    return (mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name, weights),
            state, {})
  return apply


def _inverse_frequency(settings, counts):
  del settings
  return reweight_jax.baselines.inverse_frequency_weights(counts)


def _class_balanced(class_balanced, counts):
  return reweight_jax.baselines.class_balanced_weights(counts, class_balanced.beta)


METHODS = (
    Method("inv_freq", weighted_cross_entropy(_inverse_frequency)),
    Method("class_balanced", weighted_cross_entropy(_class_balanced),
           trees={"class_balanced": TREE}, reads=("class_balanced",)),
)
