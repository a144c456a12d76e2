"""Balanced softmax (Ren et al., NeurIPS 2020): CE on z + log n, the training class counts."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import mean_share
from experiments.methods.method import Method
from experiments.methods.method import PerExample


def _rows(logits, labels, info):
  return reweight_jax.baselines.balanced_softmax_loss(logits, labels, info.class_counts)


def balanced_softmax(settings, logits, features, labels, state, info):
  del settings, features
  return mean_share(_rows(logits, labels, info), info.axis_name), state, {}


def per_example_balanced_softmax(settings, logits, features, labels, state, info):
  del settings, features
  return PerExample(_rows(logits, labels, info), None, state, {})


METHODS = (Method("balanced_softmax", balanced_softmax,
                  per_example=per_example_balanced_softmax),)
