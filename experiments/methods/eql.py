"""Equalization loss, softmax form (Tan et al., CVPR 2020; COMPARISONS spec, 'EQL'): the logits of
rare classes (f_k = n_k/N < λ) are dropped from a row's softmax with probability γ, drawn per step."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import global_rows
from experiments.methods.batch_means import mean_share
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import PerExample

# COMPARISONS spec, 'EQL, softmax form': drop probability γ, rare threshold λ on f_k = n_k/N.
TREE = ConfigTree(lambda: dict(gamma=0.9, lam=5e-3),
                  ranges=(("gamma", (0, True), (1, True)), ("lam", *NON_NEGATIVE)))


def _rows(eql, logits, labels, info):
  """(EQL per row, the rare classes)."""
  if info.rng is None:
    raise ValueError("the 'eql' loss draws its dropped logits per step: StepInfo.rng is None")
  rare = reweight_jax.baselines.eql_rare_classes(info.class_counts, eql.lam)
  dropped = reweight_jax.baselines.eql_dropped_at(
      info.rng, global_rows(labels.shape[0], info.axis_name), logits.shape[1], eql.gamma)
  return reweight_jax.baselines.eql_loss(logits, labels, rare, dropped), rare


def equalization(eql, logits, features, labels, state, info):
  del features
  rows, rare = _rows(eql, logits, labels, info)
  return mean_share(rows, info.axis_name), state, {"eql_rare": rare}


def per_example_eql(eql, logits, features, labels, state, info):
  del features
  rows, rare = _rows(eql, logits, labels, info)
  return PerExample(rows, None, state, {"eql_rare": rare})


METHODS = (Method("eql", equalization, trees={"eql": TREE}, reads=("eql",), per_example=per_example_eql),)
