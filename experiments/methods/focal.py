"""Focal loss (Lin et al., ICCV 2017): −(1 − p_y)^γ log p_y per row."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import mean_share
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import PerExample

TREE = ConfigTree(lambda: dict(gamma=1.0), ranges=(("gamma", *NON_NEGATIVE),))


def _rows(focal, logits, labels):
  return reweight_jax.baselines.focal_loss(logits, labels, gamma=focal.gamma)


def focal_loss(focal, logits, features, labels, state, info):
  del features
  return mean_share(_rows(focal, logits, labels), info.axis_name), state, {}


def per_example_focal(focal, logits, features, labels, state, info):
  del features, info
  return PerExample(_rows(focal, logits, labels), None, state, {})


METHODS = (Method("focal", focal_loss, trees={"focal": TREE}, reads=("focal",),
                  per_example=per_example_focal),)
