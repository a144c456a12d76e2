"""The loss registry: every training objective of the harness is one entry, chosen by name.

Every entry has one signature once built from a config (`make_loss_fn`):

    loss_fn(logits, features, labels, loss_state, step_info) → (loss, new_loss_state, metrics)

`loss` is this device's share of the global-batch loss (`lax.pmean` of the shares, and of their
gradients, is the global value), `loss_state` a dict of the per-class state the entry carries
(`class_stats`: MR2's `ClassStats`; `reweight`: the reweighting counters) and `metrics` a dict of
arrays to log. Each entry reads its own config sub-tree (`CONFIG_TREES`: defaults, ranges, choices)
and has explicit start semantics: a deferred entry (`start` names the config field of its start
epoch) trains as its `before` entry until that epoch — the before entry's state updates only, its
own state untouched — and the two are a `lax.cond`, so a step computes one of them, never both.
Adding a loss is its apply function (in the module of its family: `reweighting_losses`,
`long_tail_losses`, `dro_losses`, `contrastive_losses`, `debiasing_losses`, `pipelines`), one
`Loss` entry here (plus its config tree in `config_trees` if it has hyper-parameters) and its
tests; the trainer, the linear probe and the benchmarks take it by name. An entry is a batch
objective only. A method that is more than a batch loss — a model wrapper whose extra outputs the
loss reads (SupCon's projection head, LfF's biased twin), several augmented views per example, the
rows' dataset positions, a per-epoch sampler of the training set (JTT), paired or mixed batches
(GLMC, mixup), an epoch-end pass (FairDRO) — also has a recipe, declared in
`experiments.train.recipes` under the same name, which the trainer provides; the loss reads what
the recipe gives it from `StepInfo.recipe`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.common.errors import check_choice
from experiments.common.errors import check_ranges
from experiments.common.errors import field_value
from experiments.losses.batch_means import global_rows
from experiments.losses.batch_means import mean_share
from experiments.losses.config_trees import CONFIG_TREES
from experiments.losses.config_trees import ConfigTree
from experiments.losses.config_trees import add_config_trees
from experiments.losses.contrastive_losses import _supcon
from experiments.losses.debiasing_losses import _check_jtt
from experiments.losses.debiasing_losses import _lff
from experiments.losses.dro_losses import _fairdro
from experiments.losses.dro_losses import _group_dro
from experiments.losses.entry import EXAMPLE_STATE_INIT
from experiments.losses.entry import STATE_INIT
from experiments.losses.entry import EpochPass
from experiments.losses.entry import Loss
from experiments.losses.entry import LossApply
from experiments.losses.entry import RecipeReads
from experiments.losses.entry import StepInfo
from experiments.losses.long_tail_losses import _balanced_softmax
from experiments.losses.long_tail_losses import _check_ldam_head
from experiments.losses.long_tail_losses import _eql
from experiments.losses.long_tail_losses import _focal
from experiments.losses.long_tail_losses import _ib
from experiments.losses.long_tail_losses import _ldam
from experiments.losses.long_tail_losses import _logit_adjust
from experiments.losses.long_tail_losses import _weighted_ce
from experiments.losses.pipelines import _check_etf_head
from experiments.losses.pipelines import _etf_dr
from experiments.losses.pipelines import _etf_dr_inverse_reweight
from experiments.losses.pipelines import _glmc
from experiments.losses.pipelines import _glmc_inverse_reweight
from experiments.losses.reweighting_losses import _ce
from experiments.losses.reweighting_losses import _check_paper_form
from experiments.losses.reweighting_losses import _inverse_reweight
from experiments.losses.reweighting_losses import _mr2
from experiments.losses.reweighting_losses import _mr2_inverse_reweight
from experiments.losses.reweighting_losses import mr2_kwargs


# The loss package's names, which callers read from here (`registry.<name>`): the trainer, the
# linear probe, the benchmarks, the tests and the docs extension.
__all__ = ["CONFIG_TREES", "EXAMPLE_STATE_INIT", "LOSSES", "REGISTRY", "STATE_INIT", "ConfigTree",
           "EpochPass", "Loss", "LossApply", "StepInfo", "add_config_trees", "get", "global_rows",
           "init_loss_state", "make_loss_fn", "mean_share", "mr2_kwargs", "start_epoch", "validate"]


REGISTRY: dict[str, Loss] = {
    "ce": Loss(_ce, reads_mix=True),
    "mr2": Loss(_mr2, reads=("mr2",), state=("class_stats",)),
    "inverse_reweight": Loss(_inverse_reweight, reads=("reweight",), state=("reweight",),
                             start="reweight.start_epoch", reads_mix=True),
    "mr2+inverse_reweight": Loss(_mr2_inverse_reweight, reads=("mr2", "reweight"),
                                 state=("class_stats", "reweight"), start="reweight.start_epoch",
                                 before="mr2", check=_check_paper_form),
    "inv_freq": Loss(_weighted_ce(lambda c, counts: reweight_jax.baselines.inverse_frequency_weights(counts))),
    "class_balanced": Loss(_weighted_ce(lambda c, counts: reweight_jax.baselines.class_balanced_weights(
        counts, c.class_balanced.beta)), reads=("class_balanced",)),
    "focal": Loss(_focal, reads=("focal",)),
    "ldam": Loss(_ldam(drw=False), reads=("ldam",), check=_check_ldam_head),
    "ldam_drw": Loss(_ldam(drw=True), reads=("ldam",), start="ldam.drw_epoch", before="ldam",
                     check=_check_ldam_head),
    "logit_adjust": Loss(_logit_adjust, reads=("logit_adjust",)),
    "balanced_softmax": Loss(_balanced_softmax),
    "ib": Loss(_ib, reads=("ib",), start="ib.start_epoch"),
    "group_dro": Loss(_group_dro, reads=("group_dro",), state=("group_dro_q",)),
    "eql": Loss(_eql, reads=("eql",)),
    "fairdro": Loss(_fairdro, reads=("fairdro",), state=("fairdro_q",)),
    "supcon": Loss(_supcon, reads=("supcon",)),
    "jtt": Loss(_ce, reads=("jtt",), check=_check_jtt, reads_mix=True),
    "glmc": Loss(_glmc, reads=("glmc",), reads_mix=True),
    "glmc+inverse_reweight": Loss(_glmc_inverse_reweight, reads=("glmc", "reweight"),
                                  state=("reweight",), start="reweight.start_epoch",
                                  before="glmc", reads_mix=True),
    "etf_dr": Loss(_etf_dr, reads=("etf_dr",), check=_check_etf_head, reads_mix=True),
    "etf_dr+inverse_reweight": Loss(_etf_dr_inverse_reweight, reads=("etf_dr", "reweight"),
                                    state=("reweight",), start="reweight.start_epoch",
                                    before="etf_dr", check=_check_etf_head, reads_mix=True),
    "lff": Loss(_lff, reads=("lff",), state=("lff", "lff_labels")),
}
LOSSES = tuple(REGISTRY)


# ------------------------------------------------------------------------------------------------
# Using an entry
# ------------------------------------------------------------------------------------------------

def get(name: str) -> Loss:
  if name not in REGISTRY:
    raise ConfigError(f"config.loss: unknown loss {name!r}; expected one of {LOSSES}")
  return REGISTRY[name]


def start_epoch(config) -> int:
  """The epoch from which `config.loss` itself trains (0 when it is not deferred)."""
  entry = get(config.loss)
  return 0 if entry.start is None else int(field_value(config, entry.start))


def _entries(config) -> list[Loss]:
  """The entry and, when deferred, the entry it trains as before its start."""
  entry = get(config.loss)
  return [entry] if entry.start is None else [entry, get(entry.before)]


def validate(config) -> None:
  """Raises ConfigError (naming the field) for the loss's name, every loss sub-tree (a config
  records them all, so a bad value is refused even where this loss does not read it) and the
  entry's own checks."""
  entries = _entries(config)
  for key, tree in CONFIG_TREES.items():
    check_ranges(config, [(f"{key}.{field}", low, high) for field, low, high in tree.ranges])
    for field, choices in tree.choices:
      check_choice(config, f"{key}.{field}", choices)
  for entry in entries:
    if entry.check is not None:
      entry.check(config)


def init_loss_state(config, num_classes: int, train_labels=None) -> dict[str, Any]:
  """The loss state of `config.loss` (its own and its before entry's fields) for K classes;
  per-example fields (LfF's) need the training labels int [N]."""
  fields = sorted({field for entry in _entries(config) for field in entry.state})
  state = {}
  for field in fields:
    if field in EXAMPLE_STATE_INIT:
      if train_labels is None:
        raise ValueError(f"loss {config.loss!r} carries per-example state ({field!r}): pass the "
                         f"training labels (train_labels)")
      state[field] = EXAMPLE_STATE_INIT[field](np.asarray(train_labels))
    else:
      state[field] = STATE_INIT[field](num_classes)
  return state


def _with_metrics_of(branch, other_shapes: dict) -> Callable[[], tuple]:
  """`branch` with the metrics only the other branch of a cond has, as NaN (not computed)."""
  def padded():
    loss, state, metrics = branch()
    for key, shape in other_shapes.items():
      if key not in metrics:
        metrics[key] = jnp.full(shape.shape, jnp.nan if jnp.issubdtype(shape.dtype, jnp.floating)
                                else 0, shape.dtype)
    return loss, state, metrics
  return padded


def _applied(name: str, config) -> Callable[..., tuple]:
  """Entry `name`'s apply bound to `config`, its loss at least float32: entries differ in the dtype
  they compute in (MR2 keeps bfloat16 logits' dtype, the reductions of the others are float32), and
  the two branches of a deferred entry's `lax.cond` must agree. Each trace checks `Loss.reads_mix`
  against what the apply read of `StepInfo.recipe` (ValueError naming the entry)."""
  entry = get(name)

  def apply(logits, features, labels, loss_state, info: StepInfo):
    recipe = RecipeReads(info.recipe)
    loss, state, metrics = entry.apply(config, logits, features, labels, loss_state,
                                       info._replace(recipe=recipe))
    reads = "mix" in recipe.asked
    if reads != entry.reads_mix:
      consequence = ("mixed batches would train against their plain labels" if entry.reads_mix
                     else "declare reads_mix=True")
      raise ValueError(f"the {name!r} loss entry says reads_mix={entry.reads_mix}, but its apply "
                       f"{'reads' if reads else 'does not read'} StepInfo.recipe['mix']: "
                       f"{consequence}")
    return loss.astype(jnp.promote_types(loss.dtype, jnp.float32)), state, metrics
  return apply


def make_loss_fn(config) -> Callable[..., tuple[jax.Array, dict, dict]]:
  """loss_fn(logits, features, labels, loss_state, step_info) → (loss, loss_state, metrics) of
  `config.loss` (the loss at least float32); a deferred entry switches from its before entry at
  its start epoch in a `lax.cond` (one branch runs per step) — or not at all when it starts at
  epoch 0."""
  entry = get(config.loss)
  start = start_epoch(config)
  if start == 0:
    return _applied(config.loss, config)

  def loss_fn(logits, features, labels, loss_state, info: StepInfo):
    after_branch, before_branch = (
        functools.partial(_applied(e, config), logits, features, labels, loss_state, info)
        for e in (config.loss, entry.before))
    after_shapes, before_shapes = jax.eval_shape(after_branch), jax.eval_shape(before_branch)
    return jax.lax.cond(info.epoch >= start,
                        _with_metrics_of(after_branch, before_shapes[2]),
                        _with_metrics_of(before_branch, after_shapes[2]))

  return loss_fn
