"""The train state (everything a resumed run needs) and the learning-rate schedule."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax

import reweight_jax
from flax.training import train_state

from experiments.methods import registry
from experiments import models
from experiments.train import recipes


class TrainState(train_state.TrainState):
  """Params and optimizer state, plus everything else a resumed run needs to continue exactly.

  `loss_state` is the per-class state of the configured loss (`registry.init_loss_state`): MR2's class
  statistics under 'class_stats', the reweighting counters under 'reweight', nothing for CE. It is
  reduced across devices inside the step and checkpointed like the parameters. `step` fixes the data
  position: epoch = step // steps_per_epoch, batch = step % steps_per_epoch.
  """
  batch_stats: Any
  loss_state: dict[str, Any]
  rng: jax.Array


def create_learning_rate_fn(config: ml_collections.ConfigDict, steps_per_epoch: int,
                            class_counts=None) -> optax.Schedule:
  """Linear warm-up to `learning_rate`, then cosine decay to 0 or step decay at `step_epochs`; or
  the reweighting recipe's MiLeLR (`reweight_jax.milelr_schedule`: warm-up (k+1)/U, Mittag-Leffler
  decay with its order from the training `class_counts`, switch at `milelr_switch_epoch`), laid on
  this trainer's epochs of `steps_per_epoch` updates."""
  warmup_steps = int(config.warmup_epochs * steps_per_epoch)
  total_steps = int(config.num_epochs * steps_per_epoch)
  if config.schedule == "milelr":
    if class_counts is None:
      raise ValueError("the 'milelr' schedule needs the training class counts (class_counts)")
    switch = config.milelr_switch_epoch
    return reweight_jax.milelr_schedule(
        config.learning_rate, class_counts, config.batch_size, num_epochs=config.num_epochs,
        warmup_epochs=config.warmup_epochs, switch_epoch=None if switch in (None, 0) else switch,
        steps_per_epoch=steps_per_epoch)
  warmup = optax.linear_schedule(0.0, config.learning_rate, max(warmup_steps, 1))
  if config.schedule == "cosine":
    decay = optax.cosine_decay_schedule(config.learning_rate, max(total_steps - warmup_steps, 1))
  else:
    boundaries = {int(e * steps_per_epoch) - warmup_steps: config.step_factor
                  for e in config.step_epochs}
    decay = optax.piecewise_constant_schedule(config.learning_rate, boundaries)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def base_model(config, num_classes: int, axis_name: str | None = None):
  """`config.model` with its head, unwrapped (the network a weight file or checkpoint fills)."""
  return models.create_model(config.model, num_classes, head=config.head,
                             cosine_scale=config.cosine_scale, axis_name=axis_name,
                             etf_seed=config.seed,
                             dtype=jnp.dtype(config.get("compute_dtype", "float32")))


def build_model(config, num_classes: int, axis_name: str | None = None):
  """The model `config` trains: `config.model` with its head, wrapped by the method's recipe's
  `model` (outputs the loss reads, `experiments.methods.method.Recipe`) and, for the linear stage of a two-stage run
  (`config.frozen_encoder_from`), by `models.FrozenEncoder`. The body computes in
  `config.compute_dtype` (float32 for the config.json of a run made before the field existed)."""
  model = base_model(config, num_classes, axis_name)
  wrap = recipes.of(config).model
  if wrap is not None:
    model = wrap(model)
  if config.get("frozen_encoder_from"):
    model = models.FrozenEncoder(model)
  return model


def param_labels(params, frozen_encoder: bool) -> Any:
  """'frozen' for the parameters the optimiser never changes — the ETF head's fixed M
  (params['head']['etf']) and, in a linear stage (`frozen_encoder`), every parameter outside the
  head — and 'train' for the rest."""
  def label(path, _):
    keys = [getattr(k, "key", None) for k in path]
    if keys[:2] == ["head", "etf"] or (frozen_encoder and keys[0] != "head"):
      return "frozen"
    return "train"
  return jax.tree_util.tree_map_with_path(label, params)


def create_train_state(config, model, image_shape, num_classes: int, learning_rate_fn,
                       rng: jax.Array, train_labels=None) -> TrainState:
  """Initial parameters, SGD + momentum with coupled L2 weight decay (wd·θ added to the gradient
  before the momentum, as PyTorch's `SGD(weight_decay=...)`), and the loss's initial state
  (per-example fields from `train_labels`). Parameters labelled 'frozen' (`param_labels`: the ETF
  head's M; everything but the head with `config.frozen_encoder_from`) get a zero update: no
  gradient step, no decay."""
  init_rng, state_rng = jax.random.split(rng)
  variables = model.init(init_rng, jnp.zeros((1, *image_shape), jnp.float32), train=False)
  tx = optax.chain(
      optax.add_decayed_weights(config.weight_decay),
      optax.sgd(learning_rate_fn, momentum=config.momentum, nesterov=False))
  labels = param_labels(variables["params"], bool(config.get("frozen_encoder_from")))
  if "frozen" in jax.tree.leaves(labels):
    tx = optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)
  return TrainState.create(
      apply_fn=model.apply, params=variables["params"], tx=tx,
      batch_stats=variables.get("batch_stats", {}),
      loss_state=registry.init_loss_state(config, num_classes, train_labels), rng=state_rng)
