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
Adding a loss is one `Loss` entry here (plus its config tree if it has hyper-parameters) and its
tests; the trainer, the linear probe and the benchmarks take it by name. A method that is more than
a batch loss says so on its entry and the trainer provides it: a model wrapper whose extra outputs
reach the loss as `StepInfo.outputs` (SupCon's projection head, LfF's biased twin), several
augmented views per example (SupCon), the dataset positions of the rows (`StepInfo.indices`, LfF),
per-example state from the training labels (LfF's EMAs), a per-epoch sampler of the training set
(JTT's up-sampled error set) and an epoch-end pass over the training set (FairDRO's q).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import mr2_jax
import reweight_jax
from mr2_reweight_core import checks
from mr2_reweight_core import class_sums
from experiments.models import registry as models
from experiments.common.errors import INF
from experiments.common.errors import ConfigError
from experiments.common.errors import check_choice
from experiments.common.errors import check_ranges
from experiments.common.errors import field_value


class StepInfo(NamedTuple):
  """What a loss may read besides the batch (arrays traced in the step, `axis_name` static)."""
  epoch: jax.Array                 # int, the current epoch (step // steps_per_epoch)
  step_in_epoch: jax.Array         # int
  class_counts: jax.Array          # float32 [K], training-set class counts n_c
  axis_name: str | None = None     # data-parallel axis (pmap / shard_map), None on one device
  rng: jax.Array | None = None     # this step's PRNG key (the same on every device), for losses
                                   # that draw (EQL); a pure function of (run seed, step)
  outputs: dict | None = None      # extra model outputs of the entry's `model` wrapper, rows as the
                                   # logits' (SupCon's 'projection', LfF's 'biased_logits')
  indices: jax.Array | None = None  # int [B] the rows' positions in the training set (LfF)
  mix: tuple | None = None         # (labels_b int [B], λ) of a mixup batch x̃ = λx + (1−λ)x_π:
                                   # the mixed-in rows' labels y_π and the step's λ


# ------------------------------------------------------------------------------------------------
# Config sub-trees
# ------------------------------------------------------------------------------------------------

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
                          choices=(("schedule", reweight_jax.FAIRDRO_SCHEDULES),)),
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


# ------------------------------------------------------------------------------------------------
# Entries
# ------------------------------------------------------------------------------------------------

LossApply = Callable[..., tuple[jax.Array, dict, dict]]


@dataclasses.dataclass(frozen=True)
class Loss:
  """One training objective.

  Attributes:
    apply: (config, logits, features, labels, loss_state, step_info) → (loss, loss_state, metrics)
      once started.
    reads: the config sub-trees (`CONFIG_TREES` keys) it reads; their ranges are checked.
    state: the loss-state fields it carries (`STATE_INIT` keys).
    start: config field of the start epoch of a deferred entry (None: active from the first step).
    before: the entry trained before `start`.
    check: extra config checks (raise ConfigError).
    epoch_end: (config, loss_state, EpochPass, epoch, num_epochs) → loss_state, for an entry whose
      state is set from a pass over the training set after each epoch (FairDRO's q); the trainer
      runs that pass (eval mode, no augmentation) only for such an entry.
    model: (config, base model) → the model it trains: a wrapper (`experiments.models.registry`) that keeps
      the base model's parameters where they are and adds outputs the entry reads from
      `StepInfo.outputs` in training mode (SupCon's projection head, LfF's biased twin).
    views: augmented views per example in a training batch (SupCon: 2); the step runs the model on
      the V·B views (view-major) with the labels and indices repeated per view.
    sampler: the name of a sampler in `experiments.train.samplers.SAMPLERS`, for an entry that
      trains on an edited training set (JTT's up-sampled error set).
    mixes: whether it takes mixup batches (`StepInfo.mix`, `config.mixup_alpha` > 0): the loss of
      a mixed row against both of its labels, weighted λ and 1 − λ.
    pair: (config, train split) → draw(rng, global batch rows, H, W) → {'rows', 'lam', 'box'}:
      paired batches (GLMC's re-balanced partner of each row, the step's λ and CutMix box;
      `data.train_batches(pair=...)`, mixed in the step by `steps.paired_mix`). Mixup's partners
      come the same way (`mixup_pair`, for every entry that `mixes`).
  """
  apply: LossApply
  reads: tuple[str, ...] = ()
  state: tuple[str, ...] = ()
  start: str | None = None
  before: str = "ce"
  check: Callable[[Any], None] | None = None
  epoch_end: Callable[..., dict] | None = None
  model: Callable[[Any, Any], Any] | None = None
  views: int = 1
  sampler: str | None = None
  mixes: bool = False
  pair: Callable[..., Callable[..., dict]] | None = None


class EpochPass(NamedTuple):
  """Per-class sums of a pass over the training set (float32 [K] each, reduced over devices)."""
  loss_sums: jax.Array     # Σ cross-entropy
  correct: jax.Array       # correct predictions
  counts: jax.Array        # examples


STATE_INIT = {"class_stats": mr2_jax.init_class_stats, "reweight": reweight_jax.init_reweight_state,
              "group_dro_q": reweight_jax.init_group_dro_q, "fairdro_q": reweight_jax.init_fairdro_q}
# Per-example state, from the training labels int [N] (LfF's EMAs and the labels its class maxima
# run over).
EXAMPLE_STATE_INIT = {"lff": lambda labels: reweight_jax.init_lff_state(len(labels)),
                      "lff_labels": lambda labels: jnp.asarray(labels, jnp.int32)}


def mean_share(per_example: jax.Array, axis_name: str | None,
               weights: jax.Array | None = None) -> jax.Array:
  """This device's share of Σ w_i ℓ_i / Σ w_i over the global batch (pmean of shares = the value)."""
  if weights is None:
    weights = jnp.ones(per_example.shape, jnp.float32)
  total_weight = jnp.sum(weights)
  if axis_name is not None:
    total_weight = jax.lax.psum(total_weight, axis_name)
  return (class_sums.num_devices(axis_name) * jnp.sum(weights * per_example)
          / jnp.maximum(total_weight, 1e-12))


def _label_weights(class_weights: jax.Array, labels: jax.Array) -> jax.Array:
  """w_{y_i} [B]; NaN for an out-of-range label (the shared guard, never a clipped class)."""
  in_range = (labels >= 0) & (labels < class_weights.shape[0])
  return checks.take_class_values(class_weights, labels, in_range)


def _ce(config, logits, features, labels, state, info):
  """Mean CE; of a mixup batch λ·CE(z, y) + (1 − λ)·CE(z, y_π)."""
  del config, features
  per_example = reweight_jax.cross_entropy_loss(logits, labels)
  if info.mix is not None:
    labels_b, lam = info.mix
    per_example = lam * per_example + (1 - lam) * reweight_jax.cross_entropy_loss(logits, labels_b)
  return mean_share(per_example, info.axis_name), state, {}


def mr2_kwargs(mr2: ml_collections.ConfigDict) -> dict[str, Any]:
  """`mr2_jax.mr2_loss` keyword arguments of the config's MR2 sub-tree."""
  return dict(lam=mr2.lam, c_bar=mr2.c_bar, decay=mr2.decay, form=mr2.form,
              uniform_margin=mr2.uniform_margin, p=mr2.p, temperature=mr2.temperature,
              stats_reduction=mr2.stats_reduction)


def _mr2(config, logits, features, labels, state, info):
  loss, class_stats, aux = mr2_jax.mr2_loss(logits, features, labels, state["class_stats"],
                                            **mr2_kwargs(config.mr2), axis_name=info.axis_name)
  return loss, {**state, "class_stats": class_stats}, aux


def _reweighted(config, per_example, labels, state, info, per_example_b=None):
  """The inverse reweighting of per-example losses (REWEIGHT spec), from `config.reweight`; of a
  mixed batch (`StepInfo.mix`, with the losses `per_example_b` against the partner labels) its
  mixed-label form (PIPELINES spec §4: class masses m_c, one counter update per step)."""
  rw = config.reweight
  kwargs = dict(alpha=rw.alpha, prior=reweight_jax.class_prior(info.class_counts, rw.prior),
                gamma=rw.gamma, max_weight=rw.max_weight, macro=rw.macro,
                stop_gradient=rw.stop_gradient,
                refresh_macro=(info.step_in_epoch == 0) if rw.refresh == "epoch" else True,
                axis_name=info.axis_name)
  if info.mix is None:
    loss, reweight_state, aux = reweight_jax.inverse_reweighted_loss(per_example, labels,
                                                                     state["reweight"], **kwargs)
  else:
    labels_b, lam = info.mix
    loss, reweight_state, aux = reweight_jax.mixed_inverse_reweighted_loss(
        per_example, per_example_b, labels, labels_b, lam, state["reweight"], **kwargs)
  # L_c of a class absent from the batch is NaN (not measured), as everywhere in the project.
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "class_weight": aux.class_weights}
  return loss, {**state, "reweight": reweight_state}, metrics


def _inverse_reweight(config, logits, features, labels, state, info):
  del features
  loss_b = (None if info.mix is None
            else reweight_jax.cross_entropy_loss(logits, info.mix[0]))
  return _reweighted(config, reweight_jax.cross_entropy_loss(logits, labels), labels, state, info,
                     loss_b)


def _mr2_inverse_reweight(config, logits, features, labels, state, info):
  mr2 = config.mr2
  p, temperature = mr2_jax.objective.form_defaults(mr2.form, features.shape[1], p=mr2.p,
                                                   temperature=mr2.temperature)
  margin_ce, representation, class_stats, aux = mr2_jax.mr2_terms(
      logits, features, labels, state["class_stats"], lam=mr2.lam, c_bar=mr2.c_bar,
      decay=mr2.decay, p=p, temperature=temperature, uniform_margin=mr2.uniform_margin,
      stats_reduction=mr2.stats_reduction, axis_name=info.axis_name)
  loss, state, metrics = _reweighted(config, margin_ce + mr2.lam * representation, labels,
                                     {**state, "class_stats": class_stats}, info)
  return loss, state, {**aux, **metrics}


def _check_paper_form(config):
  if config.mr2.form != "paper":
    raise ConfigError("config.mr2.form: the MR2 + reweighting combination reweights per-example "
                      "terms, which exist in the paper form only")


def _weighted_ce(weights_of: Callable[[Any, jax.Array], jax.Array]) -> LossApply:
  def apply(config, logits, features, labels, state, info):
    del features
    weights = _label_weights(weights_of(config, info.class_counts), labels)
    return (mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name, weights),
            state, {})
  return apply


def _focal(config, logits, features, labels, state, info):
  del features
  return (mean_share(reweight_jax.focal_loss(logits, labels, gamma=config.focal.gamma),
                     info.axis_name), state, {})


def _ldam(drw: bool) -> LossApply:
  def apply(config, logits, features, labels, state, info):
    del features
    ldam = config.ldam
    per_example = reweight_jax.ldam_loss(logits, labels, info.class_counts,
                                         max_margin=ldam.max_margin, scale=ldam.scale)
    weights = (_label_weights(reweight_jax.class_balanced_weights(info.class_counts, ldam.drw_beta),
                              labels) if drw else None)
    return mean_share(per_example, info.axis_name, weights), state, {}
  return apply


def _check_ldam_head(config):
  if config.head == "cosine" and config.ldam.scale != 1.0:
    # LDAM is CE(s·(cos − Δ_y e_y)): the cosine head already multiplies by its scale, so a second
    # LDAM scale would square it and shrink the margin. Make the head's scale LDAM's s.
    raise ConfigError(
        f"config.ldam.scale: with the cosine head (scale {config.cosine_scale:g}) LDAM needs "
        f"ldam.scale=1 and ldam.max_margin={0.5 * config.cosine_scale:g} (= 0.5 × the head scale)")


def _logit_adjust(config, logits, features, labels, state, info):
  del features
  per_example = reweight_jax.logit_adjusted_loss(logits, labels, info.class_counts,
                                                 tau=config.logit_adjust.tau)
  return mean_share(per_example, info.axis_name), state, {}


def _balanced_softmax(config, logits, features, labels, state, info):
  del config, features
  per_example = reweight_jax.balanced_softmax_loss(logits, labels, info.class_counts)
  return mean_share(per_example, info.axis_name), state, {}


def _ib(config, logits, features, labels, state, info):
  per_example = reweight_jax.ib_loss(
      logits, labels, features, alpha=config.ib.alpha,
      class_weights=reweight_jax.inverse_frequency_weights(info.class_counts))
  return mean_share(per_example, info.axis_name), state, {}


def _group_dro(config, logits, features, labels, state, info):
  del features
  gd = config.group_dro
  adjustment = (reweight_jax.group_dro_adjustment(info.class_counts, gd.c) if gd.c > 0 else None)
  loss, q, aux = reweight_jax.group_dro_loss(
      reweight_jax.cross_entropy_loss(logits, labels), labels, state["group_dro_q"], eta=gd.eta,
      adjustment=adjustment, normalize=gd.normalize, axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present, "group_dro_q": q}
  return loss, {**state, "group_dro_q": q}, metrics


def global_rows(batch: int, axis_name: str | None) -> jax.Array:
  """The positions int [B] of this device's rows in the global batch (devices hold equal blocks)."""
  offset = 0 if axis_name is None else jax.lax.axis_index(axis_name) * batch  # as global_batch
  return offset + jnp.arange(batch)


def _eql(config, logits, features, labels, state, info):
  del features
  if info.rng is None:
    raise ValueError("the 'eql' loss draws its dropped logits per step: StepInfo.rng is None")
  rare = reweight_jax.eql_rare_classes(info.class_counts, config.eql.lam)
  dropped = reweight_jax.eql_dropped_at(info.rng, global_rows(labels.shape[0], info.axis_name),
                                        logits.shape[1], config.eql.gamma)
  return (mean_share(reweight_jax.eql_loss(logits, labels, rare, dropped), info.axis_name), state,
          {"eql_rare": rare})


def _fairdro(config, logits, features, labels, state, info):
  del config, features
  loss, aux = reweight_jax.fairdro_loss(reweight_jax.cross_entropy_loss(logits, labels), labels,
                                        state["fairdro_q"], axis_name=info.axis_name)
  metrics = {"class_loss": jnp.where(aux.present, aux.class_losses, jnp.nan),
             "class_present": aux.present}
  return loss, state, metrics


def _fairdro_epoch_end(config, state, epoch_pass: EpochPass, epoch, num_epochs):
  """q ← q + s_e (q* − q): q* from the per-class mean training loss L_c of the pass (classes
  without training examples left out), s_e the smoothing step after epoch `epoch` (0-based)."""
  fd = config.fairdro
  present = epoch_pass.counts > 0
  class_losses = reweight_jax.class_mean(epoch_pass.loss_sums, epoch_pass.counts)
  q_star = reweight_jax.fairdro_best_response(class_losses, fd.rho, clip=fd.clip, present=present)
  q = reweight_jax.fairdro_update(state["fairdro_q"], q_star, epoch, num_epochs, fd.schedule)
  return {**state, "fairdro_q": q}


def _output(info: StepInfo, key: str, loss: str) -> jax.Array:
  if not info.outputs or key not in info.outputs:
    raise ValueError(f"the {loss!r} loss reads the model output {key!r} (StepInfo.outputs), which "
                     f"its model wrapper adds: build the model with `train_state.build_model`")
  return info.outputs[key]


def _global_mean(value: jax.Array, axis_name: str | None) -> jax.Array:
  return value if axis_name is None else jax.lax.pmean(value, axis_name)


def _supcon(config, logits, features, labels, state, info):
  """CE + λ·SupCon on the V·B views (joint), or λ·SupCon alone (`supcon.ce=False`, pre-training)."""
  del features
  sc = config.supcon
  contrastive, _ = mr2_jax.supcon_loss(
      _output(info, "projection", "supcon"), labels, temperature=sc.temperature,
      base_temperature=sc.base_temperature, axis_name=info.axis_name, num_classes=logits.shape[1])
  loss = sc.lam * contrastive
  if sc.ce:
    loss = loss + mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name)
  return loss, state, {"supcon_loss": _global_mean(contrastive, info.axis_name)}


def _supcon_model(config, base):
  return models.WithProjection(base, features=config.supcon.projection_dim)



def _check_jtt(config):
  if not config.jtt.stage1:
    raise ConfigError("config.jtt.stage1: the 'jtt' loss needs the workdir of its stage-1 ERM run")
  if int(config.jtt.upweight) != config.jtt.upweight:
    raise ConfigError(f"config.jtt.upweight: λ_up must be an integer, got {config.jtt.upweight}")


def _lff(config, logits, features, labels, state, info):
  """f_D's logits are the model's; f_B's come from the twin (`models.WithBiasedTwin`)."""
  del features
  if info.indices is None:
    raise ValueError("the 'lff' loss indexes its EMAs by dataset position: StepInfo.indices is None")
  loss, lff_state, aux = reweight_jax.lff_loss(
      _output(info, "biased_logits", "lff"), logits, labels, info.indices, state["lff"],
      state["lff_labels"], q=config.lff.q, alpha=config.lff.alpha, axis_name=info.axis_name)
  return loss, {**state, "lff": lff_state}, {
      "lff_weight": _global_mean(jnp.mean(aux.weights), info.axis_name)}


def _lff_model(config, base):
  del config
  return models.WithBiasedTwin(base)


def _etf_dr(config, logits, features, labels, state, info):
  """ETF-DR's dot regression on the head's normalised features h (`config.head='etf'`) against the
  fixed ETF M (from the model, `models.WithETFClassifier`), E from GivenEw (of the unmixed labels),
  and of a mixup batch λ·DR(h, y) + (1 − λ)·DR(h, y_π)."""
  del logits
  classifier = _output(info, "etf_classifier", "etf_dr")
  scale = (reweight_jax.given_ew(labels, classifier.shape[1], axis_name=info.axis_name)
           if config.etf_dr.given_ew else None)
  if info.mix is None:
    loss, _ = reweight_jax.dot_regression_loss(features, labels, classifier, class_scale=scale,
                                               axis_name=info.axis_name)
  else:
    labels_b, lam = info.mix
    loss, _ = reweight_jax.mixup_dot_regression_loss(features, labels, labels_b, lam, classifier,
                                                     scale, axis_name=info.axis_name)
  return loss, state, {}


def _etf_dr_inverse_reweight(config, logits, features, labels, state, info):
  """ETF-DR with the inverse reweighting (PIPELINES spec §4): ŵ weights the per-label DR losses
  with E ≡ 1 (GivenEw already balances classes), of a mixup batch against (y, y_π)."""
  del logits
  classifier = _output(info, "etf_classifier", "etf_dr+inverse_reweight")
  per_label = [reweight_jax.dot_regression_loss(features, y, classifier,
                                                axis_name=info.axis_name)[1]
               for y in ([labels] if info.mix is None else [labels, info.mix[0]])]
  return _reweighted(config, per_label[0], labels, state, info, per_label[-1])


def _etf_model(config, base):
  del config
  return models.WithETFClassifier(base)


def _check_etf_head(config):
  if config.head != "etf":
    raise ConfigError(f"config.head: the 'etf_dr' loss regresses onto the fixed ETF classifier: "
                      f"set config.head='etf' (got {config.head!r})")


def _glmc_terms(config, logits, labels, info):
  """(GLMCAux of this device's shares, α_e) of a paired batch's two passes [x_g; x_l]: fc_cb is the
  model's head (logits); fc, the projections and predictions come from `models.GLMCModel`;
  v_c ∝ n_c^(−ℓw) from the training counts, α_e = 1 − (e/E)²."""
  if info.mix is None:
    raise ValueError("the 'glmc' losses need paired batches (StepInfo.mix): train them with the "
                     "trainer, which draws them from the entry's `pair`")
  gl = config.glmc
  labels_b, lam = info.mix
  half = labels.shape[0] // 2
  fc, projection, prediction = (_output(info, key, "glmc")
                                for key in ("logits_fc", "projection", "prediction"))
  alpha = reweight_jax.glmc_alpha(info.epoch, config.num_epochs)
  _, aux = reweight_jax.glmc_loss(
      fc[:half], fc[half:], logits[:half], logits[half:], prediction[:half], projection[:half],
      prediction[half:], projection[half:], labels[:half], labels_b[:half], lam,
      reweight_jax.glmc_class_weights(info.class_counts, gl.weight_exponent), alpha, gl.w_con,
      axis_name=info.axis_name)
  return aux, alpha


def _glmc_metrics(aux, axis_name, terms=("balanced", "rebalanced", "consistency")):
  return {f"glmc_{t}": _global_mean(getattr(aux, t), axis_name) for t in terms}


def _glmc(config, logits, features, labels, state, info):
  """GLMC (PIPELINES spec §3): L = α_e L_bal + (1 − α_e) L_reb + w_con L_con."""
  del features
  aux, alpha = _glmc_terms(config, logits, labels, info)
  loss = (alpha * aux.balanced + (1 - alpha) * aux.rebalanced
          + config.glmc.w_con * aux.consistency)
  return loss, state, _glmc_metrics(aux, info.axis_name)


def _glmc_inverse_reweight(config, logits, features, labels, state, info):
  """GLMC with the inverse reweighting (PIPELINES spec §4): ŵ replaces v in L_reb, from fc_cb's
  unweighted per-label CE pooled over both passes (one counter update per step); L_bal and L_con
  unchanged. L_reb, the sum of the two passes' means, is 2× the mixed-label loss of the 2B rows."""
  del features
  aux, alpha = _glmc_terms(config, logits, labels, info)
  reweighted, state, metrics = _reweighted(
      config, reweight_jax.cross_entropy_loss(logits, labels), labels, state, info,
      reweight_jax.cross_entropy_loss(logits, info.mix[0]))
  loss = (alpha * aux.balanced + (1 - alpha) * 2 * reweighted
          + config.glmc.w_con * aux.consistency)
  return loss, state, {**_glmc_metrics(aux, info.axis_name, ("balanced", "consistency")),
                       **metrics}


def _glmc_model(config, base):
  return models.GLMCModel(base, base.num_classes, projection_dim=config.glmc.projection_dim)


def _glmc_pair(config, train):
  r = config.glmc.r

  def draw(rng, global_rows, height, width):
    rows = reweight_jax.glmc_rebalanced_indices(train.labels, train.class_counts, r,
                                                len(global_rows), rng)
    lam = float(rng.beta(1.0, 1.0))  # the release's --beta is dead: λ ~ Beta(1, 1)
    return {"rows": rows, "lam": lam, "box": reweight_jax.cutmix_box(lam, height, width, rng)}
  return draw


def mixup_pair(alpha: float):
  """Mixup's partners as a paired batch: one λ ~ Beta(α, α) and one permutation π of the global
  batch per step, drawn on the host (the step mixes x̃ = λx + (1 − λ)x_π, `steps.train_step`); each
  process loads its rows' partners, so no image crosses between devices, and the pairs are the
  same whatever the number of processes or devices. A partner is its example augmented with its
  own draws (the batch's key [seed, epoch, b, 1001]), not the copy in the other row."""
  def draw(rng, global_rows, height, width):
    del height, width
    lam = float(rng.beta(alpha, alpha))
    return {"rows": np.asarray(global_rows)[rng.permutation(len(global_rows))], "lam": lam,
            "box": (0, 0, 0, 0)}
  return draw


def pair_draw(config, train):
  """The paired-batch draw a run's batches carry: the entry's own (GLMC), mixup's with
  `config.mixup_alpha` > 0, else None."""
  entry = get(config.loss)
  if entry.pair is not None:
    return entry.pair(config, train)
  return mixup_pair(float(config.mixup_alpha)) if config.get("mixup_alpha", 0) > 0 else None


REGISTRY: dict[str, Loss] = {
    "ce": Loss(_ce, mixes=True),
    "mr2": Loss(_mr2, reads=("mr2",), state=("class_stats",)),
    "inverse_reweight": Loss(_inverse_reweight, reads=("reweight",), state=("reweight",),
                             start="reweight.start_epoch", mixes=True),
    "mr2+inverse_reweight": Loss(_mr2_inverse_reweight, reads=("mr2", "reweight"),
                                 state=("class_stats", "reweight"), start="reweight.start_epoch",
                                 before="mr2", check=_check_paper_form),
    "inv_freq": Loss(_weighted_ce(lambda c, counts: reweight_jax.inverse_frequency_weights(counts))),
    "class_balanced": Loss(_weighted_ce(lambda c, counts: reweight_jax.class_balanced_weights(
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
    "fairdro": Loss(_fairdro, reads=("fairdro",), state=("fairdro_q",),
                    epoch_end=_fairdro_epoch_end),
    "supcon": Loss(_supcon, reads=("supcon",), model=_supcon_model, views=2),
    "jtt": Loss(_ce, reads=("jtt",), sampler="jtt", check=_check_jtt),
    "glmc": Loss(_glmc, reads=("glmc",), views=2, pair=_glmc_pair, model=_glmc_model),
    "glmc+inverse_reweight": Loss(_glmc_inverse_reweight, reads=("glmc", "reweight"),
                                  state=("reweight",), start="reweight.start_epoch",
                                  before="glmc", views=2, pair=_glmc_pair, model=_glmc_model),
    "etf_dr": Loss(_etf_dr, reads=("etf_dr",), model=_etf_model, check=_check_etf_head,
                   mixes=True),
    "etf_dr+inverse_reweight": Loss(_etf_dr_inverse_reweight, reads=("etf_dr", "reweight"),
                                    state=("reweight",), start="reweight.start_epoch",
                                    before="etf_dr", model=_etf_model, check=_check_etf_head,
                                    mixes=True),
    "lff": Loss(_lff, reads=("lff",), state=("lff", "lff_labels"), model=_lff_model),
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
  if config.get("mixup_alpha", 0) > 0 and not all(entry.mixes for entry in entries):
    raise ConfigError(f"config.mixup_alpha: the {config.loss!r} loss does not take mixup batches "
                      f"(entries that do: {[n for n, e in REGISTRY.items() if e.mixes]})")
  if config.get("mixup_alpha", 0) > 0 and max(config.get("views", 1), entries[0].views) > 1:
    raise ConfigError("config.mixup_alpha: mixup batches are single-view (config.views = 1 and a "
                      "loss with one view)")


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


def _applied(entry: Loss, config) -> Callable[..., tuple]:
  """`entry.apply` bound to `config`, its loss at least float32: entries differ in the dtype they
  compute in (MR2 keeps bfloat16 logits' dtype, the reductions of the others are float32), and the
  two branches of a deferred entry's `lax.cond` must agree."""
  def apply(*args):
    loss, state, metrics = entry.apply(config, *args)
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
    return _applied(entry, config)
  before = get(entry.before)

  def loss_fn(logits, features, labels, loss_state, info: StepInfo):
    after_branch, before_branch = (
        functools.partial(_applied(e, config), logits, features, labels, loss_state, info)
        for e in (entry, before))
    after_shapes, before_shapes = jax.eval_shape(after_branch), jax.eval_shape(before_branch)
    return jax.lax.cond(info.epoch >= start,
                        _with_metrics_of(after_branch, before_shapes[2]),
                        _with_metrics_of(before_branch, after_shapes[2]))

  return loss_fn
