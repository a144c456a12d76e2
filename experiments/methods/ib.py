"""Influence-balanced loss (Park et al., ICCV 2021): CE weighted by the inverse of each row's
influence ‖∂ℓ/∂z‖₁·‖h‖₁ and the inverse class frequency, from `ib.start_epoch` on (CE before)."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import mean_share
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method

TREE = ConfigTree(lambda: dict(alpha=1000.0, start_epoch=100),
                  ranges=(("alpha", *POSITIVE), ("start_epoch", *NON_NEGATIVE)))


def influence_balanced(ib, logits, features, labels, state, info):
  per_example = reweight_jax.baselines.ib_loss(
      logits, labels, features, alpha=ib.alpha,
      class_weights=reweight_jax.baselines.inverse_frequency_weights(info.class_counts))
  return mean_share(per_example, info.axis_name), state, {}


METHODS = (Method("ib", influence_balanced, trees={"ib": TREE}, reads=("ib",),
                  start="ib.start_epoch"),)
