"""Training and evaluation of every method of `mr2_jax` and `reweight_jax` (one trainer, many configs).

Reads top-down like flax's ImageNet example: model and state, learning-rate schedule, losses,
`train_step` (written once; `jax.jit` for one device, `jax.pmap(axis_name='batch')` for data
parallel), `eval_step`, checkpointing, then `train_and_evaluate(config, workdir)`.

Everything the next step depends on lives in `TrainState`: params, optimizer state, BatchNorm
statistics, the MR2 class statistics, the reweighting counters, the rng and the step (which fixes the
data position: epoch = step // steps_per_epoch, batch = step % steps_per_epoch). A run killed at any
point and restarted from its workdir therefore continues exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state

import mr2_jax
import reweight_jax
from experiments import data as data_lib
from experiments import models

LOSSES = (
    "ce", "mr2", "inverse_reweight", "mr2+inverse_reweight", "inv_freq", "class_balanced", "focal",
    "ldam", "ldam_drw", "logit_adjust", "balanced_softmax", "ib",
)
PARALLEL = ("none", "pmap", "shard_map")
AXIS = "batch"


class ConfigError(ValueError):
  """A configuration value the trainer cannot run with (reported as one line)."""


# ------------------------------------------------------------------------------------------------
# State
# ------------------------------------------------------------------------------------------------

class TrainState(train_state.TrainState):
  """Params and optimizer state, plus everything else a resumed run needs to continue exactly."""
  batch_stats: Any
  class_stats: mr2_jax.ClassStats
  reweight_state: reweight_jax.ReweightState
  rng: jax.Array


@dataclasses.dataclass(frozen=True)
class Task:
  """Static facts of a run that the step closes over (hashable: no arrays)."""
  class_counts: tuple[float, ...]
  steps_per_epoch: int


def create_learning_rate_fn(config: ml_collections.ConfigDict, steps_per_epoch: int) -> optax.Schedule:
  """Linear warm-up to `learning_rate`, then cosine decay to 0 or step decay at `step_epochs`."""
  warmup_steps = int(config.warmup_epochs * steps_per_epoch)
  total_steps = int(config.num_epochs * steps_per_epoch)
  warmup = optax.linear_schedule(0.0, config.learning_rate, max(warmup_steps, 1))
  if config.schedule == "cosine":
    decay = optax.cosine_decay_schedule(config.learning_rate, max(total_steps - warmup_steps, 1))
  else:
    boundaries = {int(e * steps_per_epoch) - warmup_steps: config.step_factor
                  for e in config.step_epochs}
    decay = optax.piecewise_constant_schedule(config.learning_rate, boundaries)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def create_train_state(config, model, image_shape, num_classes: int, learning_rate_fn,
                       rng: jax.Array) -> TrainState:
  init_rng, state_rng = jax.random.split(rng)
  variables = model.init(init_rng, jnp.zeros((1, *image_shape), jnp.float32), train=False)
  tx = optax.chain(
      optax.add_decayed_weights(config.weight_decay),
      optax.sgd(learning_rate_fn, momentum=config.momentum, nesterov=False))
  return TrainState.create(
      apply_fn=model.apply, params=variables["params"], tx=tx,
      batch_stats=variables.get("batch_stats", {}),
      class_stats=mr2_jax.init_class_stats(num_classes),
      reweight_state=reweight_jax.init_reweight_state(num_classes), rng=state_rng)


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------

def per_example_weights(class_weights, labels):
  """w_{y_i} [B]; an out-of-range label reads NaN (JAX indexing would clip it to a valid class)."""
  return jnp.take(class_weights, labels, mode="fill", fill_value=jnp.nan)


def weighted_mean_share(values, weights, axis_name):
  """This device's share of Σ w_i ℓ_i / Σ w_i over the global batch (pmean of shares = the value)."""
  total_weight = jnp.sum(weights)
  if axis_name is not None:
    total_weight = jax.lax.psum(total_weight, axis_name)
  return (mr2_jax.class_sums.num_devices(axis_name) * jnp.sum(weights * values)
          / jnp.maximum(total_weight, 1e-12))


def compute_loss(config, task: Task, logits, features, labels, state: TrainState, epoch,
                 step_in_epoch, axis_name):
  """Loss of `config.loss` as this device's share; returns (loss, class_stats, reweight_state, aux).

  Reweightings deferred to `config.reweight.start_epoch` (LDAM-DRW: `ldam.drw_epoch`, IB:
  `ib.start_epoch`) train with the unweighted loss before it; the reweighting counters start counting
  at that epoch.
  """
  counts = jnp.asarray(task.class_counts, jnp.float32)
  ones = jnp.ones(labels.shape, jnp.float32)
  class_stats, reweight_state, aux = state.class_stats, state.reweight_state, {}
  name = config.loss
  cross_entropy = reweight_jax.cross_entropy_loss(logits, labels)
  if name == "ce":
    return weighted_mean_share(cross_entropy, ones, axis_name), class_stats, reweight_state, aux
  if name == "mr2":
    mr2 = config.mr2
    loss, class_stats, mr2_aux = mr2_jax.mr2_loss(
        logits, features, labels, class_stats, lam=mr2.lam, c_bar=mr2.c_bar, decay=mr2.decay,
        form=mr2.form, uniform_margin=mr2.uniform_margin, p=mr2.p, temperature=mr2.temperature,
        stats_reduction=mr2.stats_reduction, axis_name=axis_name)
    return loss, class_stats, reweight_state, mr2_aux
  if name in ("inverse_reweight", "mr2+inverse_reweight"):
    if name == "mr2+inverse_reweight":
      mr2 = config.mr2  # paper form only (validate_config rejects 'released' here)
      margin_ce, representation, class_stats, aux = mr2_jax.mr2_terms(
          logits, features, labels, class_stats, lam=mr2.lam, c_bar=mr2.c_bar, decay=mr2.decay,
          p=2.0 if mr2.p is None else mr2.p,
          temperature=1.0 if mr2.temperature is None else mr2.temperature,
          uniform_margin=mr2.uniform_margin, stats_reduction=mr2.stats_reduction,
          axis_name=axis_name)
      per_example = margin_ce + mr2.lam * representation
    else:
      per_example = cross_entropy
    rw = config.reweight
    refresh = (step_in_epoch == 0) if rw.refresh == "epoch" else True
    reweighted, new_reweight_state, rw_aux = reweight_jax.inverse_reweighted_loss(
        per_example, labels, reweight_state, alpha=rw.alpha,
        prior=reweight_jax.class_prior(counts, rw.prior), gamma=rw.gamma,
        max_weight=rw.max_weight, macro=rw.macro, stop_gradient=rw.stop_gradient,
        refresh_macro=refresh, axis_name=axis_name)
    active = epoch >= rw.start_epoch
    loss = jnp.where(active, reweighted, weighted_mean_share(per_example, ones, axis_name))
    reweight_state = jax.tree.map(lambda new, old: jnp.where(active, new, old),
                                  new_reweight_state, reweight_state)
    aux.update(class_loss=rw_aux.class_losses, class_present=rw_aux.present,
               class_weight=jnp.where(active, rw_aux.class_weights, 1.0))
    return loss, class_stats, reweight_state, aux
  if name in ("inv_freq", "class_balanced"):
    weights = (reweight_jax.inverse_frequency_weights(counts) if name == "inv_freq" else
               reweight_jax.class_balanced_weights(counts, config.class_balanced_beta))
    return weighted_mean_share(cross_entropy, per_example_weights(weights, labels), axis_name), \
        class_stats, reweight_state, aux
  if name == "focal":
    return weighted_mean_share(reweight_jax.focal_loss(logits, labels, gamma=config.focal_gamma),
                               ones, axis_name), class_stats, reweight_state, aux
  if name in ("ldam", "ldam_drw"):
    weights = (reweight_jax.ldam_drw_weights(counts, epoch, drw_epoch=config.ldam.drw_epoch,
                                             beta=config.class_balanced_beta)
               if name == "ldam_drw" else jnp.ones_like(counts))
    per_example = reweight_jax.ldam_loss(logits, labels, counts, max_margin=config.ldam.max_margin,
                                         scale=config.ldam.scale)
    return weighted_mean_share(per_example, per_example_weights(weights, labels), axis_name), \
        class_stats, reweight_state, aux
  if name in ("logit_adjust", "balanced_softmax"):
    per_example = (reweight_jax.logit_adjusted_loss(logits, labels, counts,
                                                    tau=config.logit_adjust_tau)
                   if name == "logit_adjust" else
                   reweight_jax.balanced_softmax_loss(logits, labels, counts))
    return weighted_mean_share(per_example, ones, axis_name), class_stats, reweight_state, aux
  if name == "ib":
    ib = reweight_jax.ib_loss(logits, labels, features, alpha=config.ib.alpha,
                              class_weights=reweight_jax.inverse_frequency_weights(counts))
    per_example = jnp.where(epoch >= config.ib.start_epoch, ib, cross_entropy)
    return weighted_mean_share(per_example, ones, axis_name), class_stats, reweight_state, aux
  raise ConfigError(f"config.loss: unknown loss {name!r}; expected one of {LOSSES}")


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------

def train_step(state: TrainState, batch, *, config, task: Task, learning_rate_fn,
               axis_name: str | None = None):
  """One SGD step. Under `axis_name` (pmap), BatchNorm, class statistics, reweighting and gradients
  are reduced across devices, so the update equals one device on the global batch."""
  epoch = state.step // task.steps_per_epoch
  step_in_epoch = state.step % task.steps_per_epoch
  dropout_rng = jax.random.fold_in(state.rng, state.step)

  def loss_fn(params):
    (logits, features), new_model_state = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats}, batch["image"], train=True,
        mutable=["batch_stats"], rngs={"dropout": dropout_rng})
    loss, class_stats, reweight_state, aux = compute_loss(
        config, task, logits, features, batch["label"], state, epoch, step_in_epoch, axis_name)
    return loss, (new_model_state, class_stats, reweight_state, aux, logits)

  (loss, (new_model_state, class_stats, reweight_state, aux, logits)), grads = jax.value_and_grad(
      loss_fn, has_aux=True)(state.params)
  correct = jnp.sum(jnp.argmax(logits, -1) == batch["label"])
  if axis_name is not None:
    grads = jax.lax.pmean(grads, axis_name)
    loss = jax.lax.pmean(loss, axis_name)
    correct = jax.lax.psum(correct, axis_name)
  new_state = state.apply_gradients(
      grads=grads, batch_stats=new_model_state["batch_stats"], class_stats=class_stats,
      reweight_state=reweight_state)
  finite = jnp.isfinite(loss) & jnp.all(jnp.isfinite(class_stats.sq_mean_norm)) & jnp.all(
      jnp.isfinite(class_stats.mean_sq_deviation))
  metrics = {"loss": loss, "train_correct": correct, "learning_rate": learning_rate_fn(state.step),
             "finite": finite}
  metrics.update(aux)
  return new_state, metrics


def eval_step(state: TrainState, batch):
  """Logits and features of a batch in inference mode (running BatchNorm statistics)."""
  logits, features = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats},
                                    batch["image"], train=False)
  return logits, features


@dataclasses.dataclass(frozen=True)
class Runner:
  """One `train_step`, compiled for a way of running, with the matching data placement.

  Attributes:
    step: (state, batch) → (state, metrics), the state donated.
    num_devices: devices the global batch is split over (all processes together).
    place_state: host (unreplicated) state → the layout `step` takes.
    place_batch: this process's batch [B/P, ...] → the layout `step` takes.
    to_host: a state or metrics in `step`'s layout → one host (NumPy) copy.
  """
  step: Any
  num_devices: int
  place_state: Any
  place_batch: Any
  to_host: Any


def make_runner(config, task: Task, learning_rate_fn, devices=None) -> Runner:
  """`train_step` three ways: jit on one device ('none'), `jax.pmap` over this process's devices
  ('pmap'), or `jax.jit` of `jax.shard_map` over a mesh of every device of every process
  ('shard_map'; the multi-host mode). The step body is the same: collectives on axis 'batch'.
  `devices` restricts pmap / shard_map to a subset (tests run 1, 2, 4 and 8 devices)."""
  parallel = config.parallel
  axis_name = None if parallel == "none" else AXIS
  step = functools.partial(train_step, config=config, task=task,
                           learning_rate_fn=learning_rate_fn, axis_name=axis_name)
  if parallel == "none":
    return Runner(jax.jit(step, donate_argnums=(0,)), 1, lambda s: s, lambda b: b, jax.device_get)
  if parallel == "pmap":
    devices = jax.local_devices() if devices is None else list(devices)
    num_devices = len(devices)
    return Runner(jax.pmap(step, axis_name=AXIS, donate_argnums=(0,), devices=devices),
                  num_devices,
                  lambda s: replicate(s, num_devices), lambda b: shard(b, num_devices),
                  lambda t: jax.device_get(unreplicate(t)))
  # An Auto-typed mesh: on an Explicit one (jax.make_mesh's default) per-class sums over the
  # batch-sharded axis are sharding errors. check_vma=False gives pmap semantics: gradients of the
  # replicated parameters are per-device values that the step pmean-s (with the default check they
  # would arrive already summed and the pmean would scale the update by the device count).
  devices = jax.devices() if devices is None else list(devices)
  mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  batch_sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
  sharded_step = jax.shard_map(step, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(),
                                                          jax.sharding.PartitionSpec(AXIS)),
                               out_specs=jax.sharding.PartitionSpec(), check_vma=False)

  def place_batch(batch):
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(batch_sharded, x), batch)

  def to_host(tree):
    return jax.tree.map(lambda x: jax.device_get(x.addressable_data(0)), tree)

  def place_state(state):
    # From host values: a global array spanning other processes' devices cannot be made from a
    # local device buffer. Typed PRNG keys travel as their raw key data.
    def place(leaf):
      leaf = jnp.asarray(leaf)
      if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(place(jax.random.key_data(leaf)),
                                        impl=jax.random.key_impl(leaf))
      return jax.device_put(np.asarray(leaf), replicated)
    return jax.tree.map(place, state)

  return Runner(jax.jit(sharded_step, donate_argnums=(0,)), len(devices), place_state,
                place_batch, to_host)


def shard(batch, num_devices):
  """[B, ...] → [num_devices, B / num_devices, ...] for pmap."""
  return jax.tree.map(lambda x: x.reshape(num_devices, -1, *x.shape[1:]), batch)


def replicate(tree, num_devices):
  """A copy of `tree` per local device, stacked on a leading axis (the pmap input layout)."""
  return jax.tree.map(lambda leaf: jnp.stack([leaf] * num_devices), tree)


def unreplicate(tree):
  """Device 0's copy of a replicated tree (all copies are equal: every update is all-reduced)."""
  return jax.tree.map(lambda leaf: leaf[0], tree)


# ------------------------------------------------------------------------------------------------
# Configuration and data
# ------------------------------------------------------------------------------------------------

INF = float("inf")
# (field, (low, inclusive), (high, inclusive)): numeric fields the trainer or the library would
# otherwise reject only while tracing the first step (or accept silently).
RANGES = (
    ("num_epochs", (1, True), (INF, False)), ("batch_size", (1, True), (INF, False)),
    ("eval_batch_size", (1, True), (INF, False)), ("log_every_steps", (1, True), (INF, False)),
    ("checkpoint_every_steps", (1, True), (INF, False)),
    ("class_loss_every_epochs", (0, True), (INF, False)),
    ("keep_checkpoints", (1, True), (INF, False)), ("warmup_epochs", (0, True), (INF, False)),
    ("learning_rate", (0, False), (INF, False)), ("momentum", (0, True), (1, False)),
    ("weight_decay", (0, True), (INF, False)), ("cosine_scale", (0, False), (INF, False)),
    ("validation_fraction", (0, True), (1, False)), ("max_train_per_class", (0, True), (INF, False)),
    ("mr2.lam", (0, True), (INF, False)), ("mr2.c_bar", (0, False), (INF, False)),
    ("mr2.decay", (0, True), (1, False)), ("mr2.p", (1, True), (INF, False)),
    ("mr2.temperature", (0, False), (INF, False)), ("reweight.alpha", (0, True), (INF, False)),
    ("reweight.gamma", (0, True), (INF, False)), ("reweight.max_weight", (0, False), (INF, False)),
    ("reweight.start_epoch", (0, True), (INF, False)), ("focal_gamma", (0, True), (INF, False)),
    ("class_balanced_beta", (0, True), (1, False)), ("ldam.max_margin", (0, False), (INF, False)),
    ("ldam.scale", (0, False), (INF, False)), ("ldam.drw_epoch", (0, True), (INF, False)),
    ("logit_adjust_tau", (0, True), (INF, False)), ("ib.alpha", (0, False), (INF, False)),
    ("ib.start_epoch", (0, True), (INF, False)),
)


def validate_config(config) -> None:
  """Raises ConfigError (one line, naming the field) before anything is written."""
  if config.loss not in LOSSES:
    raise ConfigError(f"config.loss: unknown loss {config.loss!r}; expected one of {LOSSES}")
  if config.parallel not in PARALLEL:
    raise ConfigError(f"config.parallel: expected one of {PARALLEL}, got {config.parallel!r}")
  if config.imbalance_factor < 1:
    raise ConfigError(f"config.imbalance_factor: must be >= 1, got {config.imbalance_factor}")
  if config.schedule not in ("cosine", "step"):
    raise ConfigError(f"config.schedule: expected 'cosine' or 'step', got {config.schedule!r}")
  if config.head not in models.HEADS:
    raise ConfigError(f"config.head: expected one of {models.HEADS}, got {config.head!r}")
  if config.model not in models.MODELS:
    raise ConfigError(f"config.model: unknown model {config.model!r}; expected one of "
                      f"{sorted(models.MODELS)}")
  if config.reweight.prior not in reweight_jax.PRIOR_KINDS:
    raise ConfigError(f"config.reweight.prior: expected one of {reweight_jax.PRIOR_KINDS}, got "
                      f"{config.reweight.prior!r}")
  if config.reweight.refresh not in ("epoch", "step"):
    raise ConfigError(f"config.reweight.refresh: expected 'epoch' or 'step', got "
                      f"{config.reweight.refresh!r}")
  if config.mr2.stats_reduction not in mr2_jax.class_stats.REDUCTIONS:
    raise ConfigError(f"config.mr2.stats_reduction: expected one of "
                      f"{mr2_jax.class_stats.REDUCTIONS}, got {config.mr2.stats_reduction!r}")
  if config.mr2.form not in mr2_jax.objective.FORMS:
    raise ConfigError(f"config.mr2.form: expected one of {mr2_jax.objective.FORMS}, got "
                      f"{config.mr2.form!r}")
  if config.loss == "mr2+inverse_reweight" and config.mr2.form != "paper":
    raise ConfigError("config.mr2.form: the MR2 + reweighting combination reweights per-example "
                      "terms, which exist in the paper form only")
  for field, low, high in RANGES:
    value = config
    for part in field.split("."):
      value = value[part]
    if value is None:
      continue
    if not (low[0] <= value if low[1] else low[0] < value) or not (
        value <= high[0] if high[1] else value < high[0]):
      interval = (f"{'[' if low[1] else '('}{low[0]}, {high[0]}{']' if high[1] else ')'}")
      raise ConfigError(f"config.{field}: expected a value in {interval}, got {value}")
  if (config.loss in ("ldam", "ldam_drw") and config.head == "cosine"
      and config.ldam.scale != 1.0):
    # LDAM is CE(s·(cos − Δ_y e_y)): the cosine head already multiplies by its scale, so a second
    # LDAM scale would square it and shrink the margin. Make the head's scale LDAM's s.
    raise ConfigError(
        f"config.ldam.scale: with the cosine head (scale {config.cosine_scale:g}) LDAM needs "
        f"ldam.scale=1 and ldam.max_margin={0.5 * config.cosine_scale:g} (= 0.5 × the head scale)")
  if config.warmup_epochs > config.num_epochs:
    raise ConfigError(f"config.warmup_epochs: {config.warmup_epochs} exceeds config.num_epochs "
                      f"{config.num_epochs}")
  if config.reference_summary:
    path = pathlib.Path(config.reference_summary)
    if not path.is_file() or "per_class_accuracy" not in json.loads(path.read_text()):
      raise ConfigError(f"config.reference_summary: {path} is not a summary.json of a finished run")
  devices = {"none": 1, "pmap": jax.device_count(), "shard_map": jax.device_count()}
  if config.batch_size % devices[config.parallel]:
    raise ConfigError(f"config.batch_size: {config.batch_size} is not divisible by the "
                      f"{devices[config.parallel]} devices of config.parallel={config.parallel!r}")
  if config.parallel == "pmap" and jax.process_count() > 1:
    raise ConfigError("config.parallel: use 'shard_map' for multi-process runs ('pmap' spans "
                      "the devices of one process here)")


def load_data(config):
  """(train, validation or None, test) splits; the training set long-tailed by `imbalance_factor`."""
  train = data_lib.load_split(config.dataset, "train", config.data_dir)
  test = data_lib.load_split(config.dataset, "test", config.data_dir)
  keep = data_lib.long_tail_indices(train.labels, train.num_classes, config.imbalance_factor,
                                    config.seed, max_count=config.max_train_per_class or None)
  train = train.subset(keep)
  validation = None
  if config.validation_fraction > 0:
    train, validation = data_lib.validation_split(train, config.validation_fraction, config.seed)
  return train, validation, test


# ------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------

def classifier_weights(params, head_kind: str) -> tuple[jax.Array, jax.Array | None]:
  """(W [K, d], bias [K] or None) of the classifier the model applies: for the cosine head the
  rows w_c/‖w_c‖ (its scale does not change NC2–NC4), so NC metrics see the decision rule used."""
  head = params["head"]
  kernel = jnp.asarray(head["kernel"])
  if head_kind == "cosine":
    kernel = mr2_jax.l2_normalize(kernel, axis=0)
  return kernel.T, head.get("bias")


def evaluate_split(state, eval_fn, split, batch_size, num_classes):
  """Per-class correct counts and counts, and per-class CE sums, over every example (padded tail)."""
  correct = np.zeros(num_classes)
  counts = np.zeros(num_classes)
  loss_sums = np.zeros(num_classes)
  for batch in data_lib.eval_batches(split, batch_size):
    logits, _ = eval_fn(state, batch)
    mask, labels = batch["mask"], batch["label"]
    batch_correct, batch_counts = mr2_jax.per_class_correct(jnp.argmax(logits, -1), labels,
                                                            num_classes, where=mask)
    correct += np.asarray(batch_correct)
    counts += np.asarray(batch_counts)
    losses = np.asarray(reweight_jax.cross_entropy_loss(logits, labels, where=mask))
    np.add.at(loss_sums, labels[mask], losses[mask])
  return correct, counts, loss_sums


def training_class_loss(state, eval_fn, train, batch_size, num_classes):
  """(L_c [K] as a list, ρ): per-class mean cross-entropy on the whole training set (no
  augmentation), L_c = Σ_{i: y_i = c} CE_i / n_c, and ρ = std_c L_c / mean_c L_c over the classes
  with examples. `state` is one host copy (evaluated on the first device)."""
  _, counts, loss_sums = evaluate_split(state, eval_fn, train, batch_size, num_classes)
  present = counts > 0
  class_loss = np.where(present, loss_sums / np.maximum(counts, 1), np.nan)
  return class_loss.tolist(), float(reweight_jax.rho(np.nan_to_num(class_loss), present))


def neural_collapse_metrics(state, eval_fn, split, batch_size, num_classes, head_kind):
  """NC1–NC4 and ρ on `split` (no augmentation), streamed with `reweight_jax.NCAccumulator`."""
  weights, bias = classifier_weights(state.params, head_kind)

  def features_and_losses():
    for batch in data_lib.eval_batches(split, batch_size):
      logits, features = eval_fn(state, batch)
      yield (features, batch["label"],
             reweight_jax.cross_entropy_loss(logits, batch["label"], where=batch["mask"]),
             batch["mask"])

  update = jax.jit(lambda acc, h, y, l, m: acc.update(h, y, per_example_loss=l, where=m))
  update_ncc = jax.jit(lambda acc, h, m: acc.update_ncc(h, weights, bias=bias, where=m))
  accumulator = None
  for features, labels, losses, mask in features_and_losses():
    if accumulator is None:
      accumulator = reweight_jax.NCAccumulator.init(num_classes, features.shape[1])
    accumulator = update(accumulator, features, labels, losses, mask)
  for features, _, _, mask in features_and_losses():
    accumulator = update_ncc(accumulator, features, mask)
  metrics = accumulator.finalize(weights)
  return {name: float(value) for name, value in metrics._asdict().items()}


def runtime_info() -> dict[str, Any]:
  """What executed the run: JAX version, backend, devices and the XLA flags in effect."""
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind, "local_devices": jax.local_device_count(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def summarize(config, train, test_correct, test_counts, reference_groups):
  """Overall / per-class / Many-Medium-Few / Easy-Medium-Hard accuracy (fractions)."""
  accuracy = mr2_jax.accuracy_from_counts(test_correct, test_counts)
  summary = {
      "overall_accuracy": float(test_correct.sum() / test_counts.sum()),
      "per_class_accuracy": accuracy.tolist(),
      "worst_class_accuracy": mr2_jax.worst_class_accuracy(accuracy),
      "class_accuracy_std": mr2_jax.class_accuracy_std(accuracy),
      "train_class_counts": train.class_counts.tolist(),
  }
  if config.imbalance_factor > 1:
    split_ids = data_lib.many_medium_few(train.class_counts)
    summary["many_medium_few"] = {
        name: (float(np.nanmean(accuracy[split_ids == i])) if np.any(split_ids == i) else None)
        for i, name in enumerate(("many", "medium", "few"))}
  if reference_groups is not None:
    groups = mr2_jax.group_accuracy(accuracy, reference_groups)
    summary["easy_medium_hard"] = dict(zip(mr2_jax.evaluation.GROUP_NAMES, groups.tolist()))
  return summary


# ------------------------------------------------------------------------------------------------
# Checkpoints, logging
# ------------------------------------------------------------------------------------------------

def to_checkpoint(state: TrainState) -> TrainState:
  """One host (NumPy) copy of the state, the rng as its raw key data.

  Host values are what every way of running can write (in a multi-process job orbax writes NumPy
  leaves from the primary process) and what any device count can restore.
  """
  state = state.replace(rng=jax.random.key_data(state.rng))
  return jax.tree.map(np.asarray, state)


def from_checkpoint(restored: TrainState, template: TrainState) -> TrainState:
  return restored.replace(rng=jax.random.wrap_key_data(restored.rng,
                                                       impl=jax.random.key_impl(template.rng)))


# Fields that may change when a run is resumed: how it runs and reports, not what it computes.
RESUMABLE_FIELDS = ("parallel", "progress_bar", "log_every_steps", "checkpoint_every_steps",
                    "keep_checkpoints", "eval_batch_size", "nc_metrics", "class_loss_every_epochs",
                    "reference_summary", "data_dir")


def check_resumable(workdir: pathlib.Path, config) -> None:
  """Refuses to resume a workdir whose checkpoints were made with a different config."""
  saved = workdir / "config.json"
  checkpoints = workdir / "checkpoints"
  if not (saved.exists() and checkpoints.exists() and any(
      p.name.isdigit() for p in checkpoints.iterdir())):
    return
  before = json.loads(saved.read_text())
  now = json.loads(config.to_json_best_effort())
  changed = sorted(k for k in set(before) | set(now)
                   if k not in RESUMABLE_FIELDS and before.get(k) != now.get(k))
  if changed:
    raise ConfigError(f"{workdir} holds checkpoints of a run with a different config "
                      f"(fields {', '.join(changed)}); use a new --workdir")


def probe_step(config, task, learning_rate_fn, state, model, train, process_batch) -> None:
  """Traces one train step abstractly (no compute), so that arguments the library rejects at trace
  time (they name themselves) fail before the workdir is touched."""
  batch = next(data_lib.train_batches(train, process_batch, seed=config.seed, epoch=0,
                                      augment=False))
  single_device = state.replace(apply_fn=model.clone(axis_name=None).apply)
  step = functools.partial(train_step, config=config, task=task, learning_rate_fn=learning_rate_fn)
  try:
    jax.eval_shape(step, single_device, batch)
  except (ValueError, TypeError) as error:
    raise ConfigError(f"config rejected by the library: {str(error).splitlines()[0]}") from error


def checkpoint_manager(workdir: pathlib.Path, config) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True,
                                         enable_async_checkpointing=False,
                                         cleanup_tmp_directories=True)
  return ocp.CheckpointManager(workdir / "checkpoints", options=options)


class MetricWriter:
  """JSON lines (metrics.jsonl, class_history.jsonl) and TensorBoard events (tensorboardX, no TF)."""

  def __init__(self, workdir: pathlib.Path, enabled: bool, start_step: int):
    self.enabled = enabled
    if not enabled:
      return
    # A resumed run repeats the steps after its last checkpoint: drop their earlier records.
    for name in ("metrics.jsonl", "class_history.jsonl"):
      path = workdir / name
      if path.exists():
        kept = [line for line in path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= start_step]
        path.write_text("".join(line + "\n" for line in kept))
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self.metrics = open(workdir / "metrics.jsonl", "a", encoding="utf-8")
    self.class_history = open(workdir / "class_history.jsonl", "a", encoding="utf-8")
    self.tensorboard = SummaryWriter(str(workdir / "tensorboard"))

  def write(self, step: int, scalars: dict[str, float], per_class: dict[str, list[float]]):
    if not self.enabled:
      return
    self.metrics.write(json.dumps({"step": step, **scalars}) + "\n")
    self.metrics.flush()
    if per_class:
      self.class_history.write(json.dumps({"step": step, **per_class}) + "\n")
      self.class_history.flush()
    for name, value in scalars.items():
      self.tensorboard.add_scalar(name, value, step)

  def close(self):
    if self.enabled:
      self.metrics.close()
      self.class_history.close()
      self.tensorboard.close()


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       *, max_steps: int | None = None) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming from its latest checkpoint) and writes summary.json.

  Args:
    config: see experiments/configs/default.py.
    workdir: output folder: config.json, metrics.jsonl, class_history.jsonl, tensorboard/,
      checkpoints/, summary.json.
    max_steps: stop after this global step (for tests and the resume check); the schedule still
      follows `num_epochs`.

  Returns:
    The summary dict (also written to workdir/summary.json).
  """
  validate_config(config)
  train, validation, test = load_data(config)  # fails before anything is written
  workdir = pathlib.Path(workdir).resolve()  # orbax needs absolute paths
  is_main = jax.process_index() == 0
  process_count, process_index = jax.process_count(), jax.process_index()
  if config.batch_size % process_count:
    raise ConfigError(f"config.batch_size: {config.batch_size} is not divisible by the "
                      f"{process_count} processes")
  process_batch = config.batch_size // process_count
  num_classes = train.num_classes
  steps_per_epoch = data_lib.steps_per_epoch(train, process_batch, process_count)
  total_steps = int(config.num_epochs * steps_per_epoch)
  if max_steps is not None:
    total_steps = min(total_steps, max_steps)
  task = Task(class_counts=tuple(float(c) for c in train.class_counts),
              steps_per_epoch=steps_per_epoch)
  learning_rate_fn = create_learning_rate_fn(config, steps_per_epoch)
  model = models.create_model(config.model, num_classes, head=config.head,
                              cosine_scale=config.cosine_scale,
                              axis_name=None if config.parallel == "none" else AXIS)
  state = create_train_state(config, model, train.images.shape[1:], num_classes, learning_rate_fn,
                             jax.random.key(config.seed))
  probe_step(config, task, learning_rate_fn, state, model, train, process_batch)
  check_resumable(workdir, config)

  workdir.mkdir(parents=True, exist_ok=True)
  if is_main:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2) + "\n")
  manager = checkpoint_manager(workdir, config)
  if manager.latest_step() is not None:
    # Checkpoints hold one host copy of the state, so any device count can resume them.
    restored = manager.restore(manager.latest_step(),
                               args=ocp.args.StandardRestore(to_checkpoint(state)))
    state = from_checkpoint(restored, state)
  start_step = int(state.step)

  runner = make_runner(config, task, learning_rate_fn)
  state = runner.place_state(state)
  writer = MetricWriter(workdir, is_main, start_step)
  progress = None
  if config.progress_bar and is_main:
    from tqdm import tqdm  # pylint: disable=g-import-not-at-top
    progress = tqdm(total=total_steps * config.batch_size, initial=start_step * config.batch_size,
                    unit="img", unit_scale=True, dynamic_ncols=True,
                    desc=f"{config.loss} {config.dataset}")

  eval_fn = jax.jit(eval_step)
  step = start_step
  window_start, window_images = time.perf_counter(), 0
  while step < total_steps:
    epoch, start_batch = divmod(step, steps_per_epoch)
    batches = data_lib.prefetch(data_lib.train_batches(
        train, process_batch, seed=config.seed, epoch=epoch, augment=config.augment,
        process_index=process_index, process_count=process_count, start_batch=start_batch))
    for batch in batches:
      state, metrics = runner.step(state, runner.place_batch(batch))
      step += 1
      window_images += config.batch_size
      if progress is not None:
        progress.update(config.batch_size)
      if step % config.log_every_steps == 0 or step == total_steps:
        host_metrics = runner.to_host(metrics)
        if not bool(host_metrics.pop("finite")):
          raise FloatingPointError(f"non-finite loss or class statistics at step {step} "
                                   f"(loss {config.loss})")
        elapsed = time.perf_counter() - window_start
        per_class = {k: np.asarray(v).tolist() for k, v in host_metrics.items() if np.ndim(v) == 1}
        scalars = {k: float(v) for k, v in host_metrics.items() if np.ndim(v) == 0}
        scalars["train_accuracy"] = scalars.pop("train_correct") / config.batch_size
        scalars.update(epoch=step / steps_per_epoch, images_per_sec=window_images / elapsed)
        writer.write(step, scalars, per_class)
        if progress is not None:
          progress.set_postfix(loss=f"{scalars['loss']:.3f}", epoch=f"{scalars['epoch']:.1f}")
        window_start, window_images = time.perf_counter(), 0
      if (config.class_loss_every_epochs and step % steps_per_epoch == 0
          and (step // steps_per_epoch) % config.class_loss_every_epochs == 0):
        evaluation_start = time.perf_counter()
        class_loss, loss_rho = training_class_loss(runner.to_host(state), eval_fn, train,
                                                   config.eval_batch_size, num_classes)
        writer.write(step, {"epoch": step / steps_per_epoch, "train_rho": loss_rho},
                     {"train_class_ce": class_loss})
        window_start += time.perf_counter() - evaluation_start  # images/s: training time only
      if step % config.checkpoint_every_steps == 0 or step == total_steps:
        if not bool(runner.to_host(metrics["finite"])):  # never checkpoint a diverged state
          raise FloatingPointError(f"non-finite loss or class statistics at step {step}")
        manager.save(step, args=ocp.args.StandardSave(to_checkpoint(runner.to_host(state))))
      if step >= total_steps:
        break
  manager.wait_until_finished()
  if progress is not None:
    progress.close()

  host_state = runner.to_host(state)
  summary = final_evaluation(config, host_state, train, validation, test, num_classes)
  summary.update(steps=step, epochs=step / steps_per_epoch, loss=config.loss,
                 dataset=config.dataset, imbalance_factor=config.imbalance_factor,
                 seed=config.seed, parallel=config.parallel, num_devices=runner.num_devices,
                 num_processes=process_count, runtime=runtime_info())
  if is_main:
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
  writer.close()
  return summary


def final_evaluation(config, state, train, validation, test, num_classes):
  """Test accuracy summary, validation accuracy, final statistics, NC metrics on the training set.

  `state` is one host copy; every process evaluates it on its own first device (evaluation is a
  small part of a run), so the numbers do not depend on how training was parallelised.
  """
  eval_fn = jax.jit(eval_step)
  reference_groups = None
  if config.reference_summary:
    reference = json.loads(pathlib.Path(config.reference_summary).read_text())
    reference_groups = mr2_jax.difficulty_tertiles(reference["per_class_accuracy"])
  correct, counts, _ = evaluate_split(state, eval_fn, test, config.eval_batch_size, num_classes)
  summary = summarize(config, train, correct, counts, reference_groups)
  if validation is not None:
    v_correct, v_counts, _ = evaluate_split(state, eval_fn, validation, config.eval_batch_size,
                                            num_classes)
    summary["validation_accuracy"] = float(v_correct.sum() / v_counts.sum())
  t_correct, t_counts, t_losses = evaluate_split(state, eval_fn, train, config.eval_batch_size,
                                                 num_classes)
  summary["train_accuracy"] = float(t_correct.sum() / t_counts.sum())
  summary["train_class_loss"] = (t_losses / np.maximum(t_counts, 1)).tolist()
  summary["class_margins"] = np.asarray(
      mr2_jax.class_margins(state.class_stats, config.mr2.c_bar)).tolist()
  summary["reweight_batch_counts"] = np.asarray(state.reweight_state.batch_counts).tolist()
  if config.nc_metrics:
    summary["neural_collapse"] = neural_collapse_metrics(
        state, eval_fn, train, config.eval_batch_size, num_classes, config.head)
  return summary
