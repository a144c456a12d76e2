"""The loss hyper-parameter sub-trees of a config (`CONFIG_TREES`: one per loss family, with its
defaults, numeric ranges and string choices), which `configs/default.py` adds to every config and
the registry's `validate` checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ml_collections

import mr2_jax
import reweight_jax
from experiments.common.errors import INF


@dataclasses.dataclass(frozen=True)
class ConfigTree:
  """A loss hyper-parameter sub-tree: its defaults, numeric ranges and string choices."""
  defaults: Callable[[], dict[str, Any]]
  ranges: tuple = ()
  choices: tuple = ()


_POS, _NONNEG = ((0, False), (INF, False)), ((0, True), (INF, False))
CONFIG_TREES = {
    "mr2": ConfigTree(
        lambda: dict(lam=0.1, c_bar=1.0, decay=0.9, form="paper", uniform_margin=False,
                     stats_reduction="exact",  # or 'per_device': 3·K scalars across devices.
                     p=ml_collections.config_dict.placeholder(float),
                     temperature=ml_collections.config_dict.placeholder(float)),
        ranges=(("lam", *_NONNEG), ("c_bar", *_POS), ("decay", (0, True), (1, False)),
                ("p", (1, True), (INF, False)), ("temperature", *_POS)),
        choices=(("form", mr2_jax.objective.FORMS),
                 ("stats_reduction", mr2_jax.class_stats.REDUCTIONS))),
    "reweight": ConfigTree(
        lambda: dict(alpha=0.0, prior="uniform", gamma=1.0, max_weight=10.0, macro=True,
                     stop_gradient=False,
                     refresh="epoch",  # β refresh cadence: 'epoch' (reference) or 'step'.
                     start_epoch=0),   # deferred (DRW-style) start; CE (or MR2) before it.
        ranges=(("alpha", *_NONNEG), ("gamma", *_NONNEG), ("max_weight", *_POS),
                ("start_epoch", *_NONNEG)),
        choices=(("prior", reweight_jax.PRIOR_KINDS), ("refresh", ("epoch", "step")))),
    "focal": ConfigTree(lambda: dict(gamma=1.0), ranges=(("gamma", *_NONNEG),)),
    "class_balanced": ConfigTree(lambda: dict(beta=0.9999),
                                 ranges=(("beta", (0, True), (1, False)),)),
    "ldam": ConfigTree(lambda: dict(max_margin=0.5, scale=30.0, drw_epoch=160, drw_beta=0.9999),
                       ranges=(("max_margin", *_POS), ("scale", *_POS),
                               ("drw_epoch", *_NONNEG), ("drw_beta", (0, True), (1, False)))),
    "logit_adjust": ConfigTree(lambda: dict(tau=1.0), ranges=(("tau", *_NONNEG),)),
    "ib": ConfigTree(lambda: dict(alpha=1000.0, start_epoch=100),
                     ranges=(("alpha", *_POS), ("start_epoch", *_NONNEG))),
    # COMPARISONS spec, 'Class-level Group DRO': step size η, adjustment C/√n_c, normalisation.
    "group_dro": ConfigTree(lambda: dict(eta=0.01, c=0.0, normalize=False),
                            ranges=(("eta", *_NONNEG), ("c", *_NONNEG))),
    # COMPARISONS spec, 'EQL, softmax form': drop probability γ, rare threshold λ on f_k = n_k/N.
    "eql": ConfigTree(lambda: dict(gamma=0.9, lam=5e-3),
                      ranges=(("gamma", (0, True), (1, True)), ("lam", *_NONNEG))),
    # COMPARISONS spec, 'FairDRO, classes as groups': radius ρ, smoothing schedule, q ≥ 0 option.
    "fairdro": ConfigTree(lambda: dict(rho=0.5, schedule="linear", clip=False),
                          ranges=(("rho", *_POS),),
                          choices=(("schedule", reweight_jax.baselines.FAIRDRO_SCHEDULES),)),
    # COMPARISONS spec, 'SupCon': λ (joint CE + λ·SupCon; ce=False is the pre-training stage of
    # the two-stage recipe, whose linear stage is `config.frozen_encoder_from`), τ, τ_b, head width.
    "supcon": ConfigTree(lambda: dict(lam=1.0, ce=True, temperature=0.1, base_temperature=0.07,
                                      projection_dim=128),
                         ranges=(("lam", *_POS), ("temperature", *_POS),
                                 ("base_temperature", *_POS), ("projection_dim", (1, True),
                                                               (INF, False)))),
    # COMPARISONS spec, 'JTT': the stage-1 run (its workdir; its latest checkpoint is the stage-1
    # model) and λ_up (each error-set example appears 1 + λ_up times per epoch).
    "jtt": ConfigTree(lambda: dict(stage1=ml_collections.config_dict.placeholder(str),
                                   upweight=20),
                      ranges=(("upweight", *_NONNEG),)),
    # COMPARISONS spec, 'LfF': GCE exponent q and EMA decay α.
    # PIPELINES spec §2, ETF-DR: GivenEw class scales (default on). The fixed ETF head is
    # config.head='etf'; mixup (α = 1 in the recipe) is config.mixup_alpha.
    "etf_dr": ConfigTree(lambda: dict(given_ew=True)),
    # PIPELINES spec §3, GLMC: re-balanced sampling exponent r (P(row) ∝ n_y^(−r)), the class-weight
    # exponent ℓw of v_c ∝ n_c^(−ℓw), the consistency weight w_con, the projector width.
    "glmc": ConfigTree(lambda: dict(r=0.0, weight_exponent=1.2, w_con=1.0, projection_dim=128),
                       ranges=(("r", *_NONNEG), ("weight_exponent", *_NONNEG),
                               ("w_con", *_NONNEG),
                               ("projection_dim", (1, True), (INF, False)))),
    "lff": ConfigTree(lambda: dict(q=0.7, alpha=0.7),
                      ranges=(("q", (0, False), (1, True)), ("alpha", (0, True), (1, True)))),
}


def add_config_trees(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds every loss sub-tree with its defaults to `config` (configs/default.py calls this)."""
  for key, tree in CONFIG_TREES.items():
    config[key] = ml_collections.ConfigDict(tree.defaults())
  return config
