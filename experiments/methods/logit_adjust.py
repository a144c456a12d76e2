"""Logit adjustment (Menon et al., ICLR 2021): CE on z + τ·log π, π the training class prior."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import mean_share
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import PerExample

TREE = ConfigTree(lambda: dict(tau=1.0), ranges=(("tau", *NON_NEGATIVE),))


def _rows(logit_adjust, logits, labels, info):
  return reweight_jax.baselines.logit_adjusted_loss(logits, labels, info.class_counts,
                                                    tau=logit_adjust.tau)


def logit_adjusted(logit_adjust, logits, features, labels, state, info):
  del features
  return mean_share(_rows(logit_adjust, logits, labels, info), info.axis_name), state, {}


def per_example_logit_adjust(logit_adjust, logits, features, labels, state, info):
  del features
  return PerExample(_rows(logit_adjust, logits, labels, info), None, state, {})


METHODS = (Method("logit_adjust", logit_adjusted, trees={"logit_adjust": TREE},
                  reads=("logit_adjust",), per_example=per_example_logit_adjust),)
