"""MR2 (Zhu et al., ICLR 2026, arXiv 2602.00205): class-wise logit temperatures γ_k from EMA class
statistics and the representation margin ℓ_s̄ (`mr2_jax.mr2_loss`); its per-example form, the paper
form's ℓ_γ,ce + λ·ℓ_s̄ per row, for the inverse reweighting.

`config.mr2.features` picks the features MR2 reads: 'raw' (the model's φ, as the head sees them) or
'l2' (φ/‖φ‖₂, the vector a cosine head classifies: the paper's CLIP setting). On unit vectors
a_k + v_k = 1 for every class at p = 2, so every margin would be equal: 'l2' asks for p ≠ 2 (the
paper uses 3, the released code 5) or `uniform_margin`."""

from __future__ import annotations

from typing import Any, NamedTuple

import ml_collections
import numpy as np

import mr2_jax
from experiments.common.errors import ConfigError
from experiments.common.errors import INF
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import PerExample

TREE = ConfigTree(
    lambda: dict(lam=0.1, c_bar=1.0, decay=0.9, form="paper", uniform_margin=False, features="raw",
                 stats_reduction="exact",  # or 'per_device': 3·K scalars across devices.
                 p=ml_collections.config_dict.placeholder(float),
                 temperature=ml_collections.config_dict.placeholder(float)),
    ranges=(("lam", *NON_NEGATIVE), ("c_bar", *POSITIVE), ("decay", (0, True), (1, False)),
            ("p", (1, True), (INF, False)), ("temperature", *POSITIVE)),
    choices=(("form", mr2_jax.objective.FORMS), ("features", ("raw", "l2")),
             ("stats_reduction", mr2_jax.class_stats.REDUCTIONS)),
    # Read by `mr2_loss` / `mr2_terms` alone, each a traced argument there (the margins' c̄ and the
    # EMA decay through `update_class_stats` and `class_margins`); p and τ pick code paths.
    traceable=("lam", "c_bar", "decay"))


class MR2LossState(NamedTuple):
  """MR2's loss state: the EMA class statistics A_k, V_k of the features."""
  class_stats: mr2_jax.ClassStats


def mr2_kwargs(mr2: ml_collections.FrozenConfigDict) -> dict[str, Any]:
  """`mr2_jax.mr2_loss` keyword arguments of MR2's settings (its sub-tree)."""
  return dict(lam=mr2.lam, c_bar=mr2.c_bar, decay=mr2.decay, form=mr2.form,
              uniform_margin=mr2.uniform_margin, p=mr2.p, temperature=mr2.temperature,
              stats_reduction=mr2.stats_reduction)


def read_features(mr2: ml_collections.FrozenConfigDict, features):
  """The features MR2 reads (`config.mr2.features`): φ ('raw') or φ/‖φ‖₂ ('l2',
  `mr2_jax.l2_normalize`: a zero row stays zero)."""
  return mr2_jax.l2_normalize(features) if mr2.features == "l2" else features


def check_features(config):
  mr2 = config.mr2
  if mr2.features == "l2" and not mr2.uniform_margin:
    p, _ = mr2_jax.objective.form_defaults(mr2.form, 1, p=mr2.p, temperature=mr2.temperature)
    if p == 2:
      raise ConfigError(
          "config.mr2.p: with config.mr2.features='l2' every class has a_k + v_k = 1 at p = 2, so "
          "every margin is equal; set config.mr2.p (the paper uses 3 on L2-normalised features, "
          "the released code 5) or config.mr2.uniform_margin=True")


def mr2_loss(mr2, logits, features, labels, state: MR2LossState, info):
  features = read_features(mr2, features)
  loss, class_stats, aux = mr2_jax.mr2_loss(logits, features, labels, state.class_stats,
                                            **mr2_kwargs(mr2), axis_name=info.axis_name)
  return loss, MR2LossState(class_stats), aux._asdict()


def per_example_mr2(mr2, logits, features, labels, state: MR2LossState, info):
  """The paper form's terms per row, ℓ_γ,ce + λ·ℓ_s̄ (`mr2_jax.mr2_terms`)."""
  features = read_features(mr2, features)
  p, temperature = mr2_jax.objective.form_defaults(mr2.form, features.shape[1], p=mr2.p,
                                                   temperature=mr2.temperature)
  margin_ce, representation, class_stats, aux = mr2_jax.mr2_terms(
      logits, features, labels, state.class_stats, lam=mr2.lam, c_bar=mr2.c_bar,
      decay=mr2.decay, p=p, temperature=temperature, uniform_margin=mr2.uniform_margin,
      stats_reduction=mr2.stats_reduction, axis_name=info.axis_name)
  return PerExample(margin_ce + mr2.lam * representation, None, MR2LossState(class_stats),
                    aux._asdict())


def check_paper_form(config):
  if config.mr2.form != "paper":
    raise ConfigError("config.mr2.form: the MR2 + reweighting combination reweights per-example "
                      "terms, which exist in the paper form only")


def margins(mr2, state: MR2LossState):
  """The margins γ_k of the final class statistics."""
  return {"class_margins": np.asarray(mr2_jax.class_margins(state.class_stats,
                                                            mr2.c_bar)).tolist()}


METHODS = (Method("mr2", mr2_loss, trees={"mr2": TREE}, reads=("mr2",),
                  state={"class_stats": mr2_jax.init_class_stats}, state_type=MR2LossState,
                  check=check_features,
                  per_example=per_example_mr2, per_example_check=check_paper_form,
                  state_summary=margins),)
