"""LDAM (Cao et al., NeurIPS 2019): CE on logits with the label's margin Δ_y ∝ n_y^(−1/4) taken
off, times a scale s; LDAM-DRW re-weights it class-balanced (β = `ldam.drw_beta`) from
`ldam.drw_epoch` on (deferred re-weighting), LDAM alone before."""

from __future__ import annotations

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.methods.batch_means import label_weights
from experiments.methods.batch_means import mean_share
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import LossApply
from experiments.methods.method import Method
from experiments.methods.method import PerExample

TREE = ConfigTree(lambda: dict(max_margin=0.5, scale=30.0, drw_epoch=160, drw_beta=0.9999),
                  ranges=(("max_margin", *POSITIVE), ("scale", *POSITIVE),
                          ("drw_epoch", *NON_NEGATIVE), ("drw_beta", (0, True), (1, False))))


def _rows(ldam, logits, labels, info):
  return reweight_jax.baselines.ldam_loss(logits, labels, info.class_counts,
                                          max_margin=ldam.max_margin, scale=ldam.scale)


def ldam_loss(drw: bool) -> LossApply:
  """LDAM's mean over the rows; with `drw` class-balanced weighted."""
  def apply(ldam, logits, features, labels, state, info):
    del features
    per_example = _rows(ldam, logits, labels, info)
    weights = (label_weights(reweight_jax.baselines.class_balanced_weights(
        info.class_counts, ldam.drw_beta), labels) if drw else None)
    return mean_share(per_example, info.axis_name, weights), state, {}
  return apply


def per_example_ldam(ldam, logits, features, labels, state, info):
  del features
  return PerExample(_rows(ldam, logits, labels, info), None, state, {})


def check_ldam_head(config):
  if config.head == "cosine" and config.ldam.scale != 1.0:
    # LDAM is CE(s·(cos − Δ_y e_y)): the cosine head already multiplies by its scale, so a second
    # LDAM scale would square it and shrink the margin. Make the head's scale LDAM's s.
    raise ConfigError(
        f"config.ldam.scale: with the cosine head (scale {config.cosine_scale:g}) LDAM needs "
        f"ldam.scale=1 and ldam.max_margin={0.5 * config.cosine_scale:g} (= 0.5 × the head scale)")


METHODS = (
    Method("ldam", ldam_loss(drw=False), trees={"ldam": TREE}, reads=("ldam",),
           check=check_ldam_head, per_example=per_example_ldam),
    Method("ldam_drw", ldam_loss(drw=True), reads=("ldam",), start="ldam.drw_epoch",
           before="ldam", check=check_ldam_head),
)
