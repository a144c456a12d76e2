"""A linear head on frozen features: ERM vs MR2 (ℓ_γ,ce only) vs inverse reweighting, one recipe.

MR2 spec, 'Objective' ("for linear probing on frozen features, only ℓ_γ,ce") and 'Evaluation
protocol'; REWEIGHT spec, 'Two levels'. Every head is trained on cached features
(`experiments.probe.features`); the study that uses it is `experiments.studies.linear_probe`, the
comparison methods' study `experiments.studies.probe_comparison`.

The head: logits = φ W + b (W ~ N(0, 0.01²), b = 0, as MoCo's linear classifier), trained with the
same recipe for every method: SGD momentum 0.9, cosine decay to 0 over all steps, batch 256 (full
batches, the remainder of each epoch's permutation dropped), no weight decay. Learning rate and
number of epochs are chosen once by `python -m experiments.studies.linear_probe select` (ERM, mean
per-class accuracy on a stratified 10 % validation split of the training set) and fixed in
`RECIPE`.

Methods (`METHODS`):
  erm             plain cross-entropy.
  mr2             ℓ_γ,ce with γ from EMA class statistics of the (unnormalised) features:
                  paper form, p = 2, decay 0.9, c̄ = 1 (`mr2_jax.mr2_loss(..., lam=0)`).
  reweight        inverse reweighting, α = 0, uniform prior, macro γ = 1 refreshed once per epoch,
                  clip 10, gradient through the weights (the authors' code), from the first step.
  reweight_sg     the same with `stop_gradient=True` (the weights are constants).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import reweight_jax
from mr2_reweight_core import metrics as perclass_metrics
from experiments.common import overrides as config_overrides
from experiments.data import batches, long_tail
from experiments.methods import registry
from experiments.methods.method import EpochPass
from experiments.methods.method import RecipeInputs
from experiments.methods.method import StepInfo
from experiments.configs import default as default_config
from experiments.configs import schema
from experiments.probe.features import NUM_CLASSES
from experiments.train import recipes


class ProbeSchedule(NamedTuple):
  """The probe's one optimisation schedule for every method (chosen by `select` on ERM's validation
  accuracy)."""
  learning_rate: float
  epochs: int
  batch_size: int = 256
  momentum: float = 0.9
  weight_decay: float = 0.0
  init_std: float = 0.01


# From `python -m experiments.studies.linear_probe select`
# (results/linear_probe/selection.json).
SCHEDULE = ProbeSchedule(learning_rate=0.01, epochs=30)
METHODS = ("erm", "mr2", "reweight", "reweight_sg")
# Setting name → (imbalance factor, methods). Reweighting's stop-gradient ablation only on LT.
SETTINGS = {"balanced": (1.0, ("erm", "mr2", "reweight")),
            "lt100": (100.0, ("erm", "mr2", "reweight", "reweight_sg"))}
# Method → (loss registry entry, config overrides): the trainer's losses, on a linear head.
METHOD_LOSSES = {
    "erm": ("ce", {}),
    "mr2": ("mr2", {"mr2.lam": 0.0, "mr2.c_bar": 1.0, "mr2.decay": 0.9, "mr2.form": "paper"}),
    "reweight": ("inverse_reweight", {"reweight.alpha": 0.0, "reweight.prior": "uniform",
                                      "reweight.gamma": 1.0, "reweight.max_weight": 10.0,
                                      "reweight.macro": True, "reweight.refresh": "epoch",
                                      "reweight.start_epoch": 0}),
}
METHOD_LOSSES["reweight_sg"] = ("inverse_reweight",
                                {**METHOD_LOSSES["reweight"][1], "reweight.stop_gradient": True})


def method_config(method: str):
  """The config (experiments/configs/default.py) whose loss is `method`'s registry entry."""
  if method not in METHOD_LOSSES:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  return loss_config(*METHOD_LOSSES[method])


def loss_config(loss: str, overrides: dict[str, Any] | tuple = ()):
  """The default config with `config.loss = loss` and `overrides` {"tree.field": value} applied
(`experiments.common.overrides.apply_overrides`: an unknown field or a value of the wrong type is
a ConfigError naming it), validated by the registry."""
  config = default_config.get_config()
  config.loss = loss
  config = registry.with_method_trees(config)  # the loss's sub-trees, to set their fields
  config_overrides.apply_overrides(config, dict(overrides), context=f"loss {loss!r}")
  schema.validate_method(config)
  return config


def method_key(method: str) -> tuple[str, tuple]:
  """(loss, sorted overrides): the hashable key of a method's loss config."""
  loss, overrides = METHOD_LOSSES[method]
  return loss, tuple(sorted(overrides.items()))


class ProbeState(NamedTuple):
  """Everything a step changes: head parameters, optimiser, and the loss's state (per class; LfF's
  per example)."""
  params: Any
  opt_state: Any
  loss_state: dict[str, Any]


def make_optimizer(schedule: ProbeSchedule, steps_per_epoch: int) -> optax.GradientTransformation:
  learning_rate = optax.cosine_decay_schedule(schedule.learning_rate,
                                              schedule.epochs * steps_per_epoch)
  return optax.chain(optax.add_decayed_weights(schedule.weight_decay),
                     optax.sgd(learning_rate, momentum=schedule.momentum))


def init_params(key: jax.Array, feature_dim: int, num_classes: int, init_std: float
                ) -> dict[str, jax.Array]:
  return {"kernel": init_std * jax.random.normal(key, (feature_dim, num_classes)),
          "bias": jnp.zeros((num_classes,))}


def init_state(key: jax.Array, feature_dim: int, num_classes: int,
               optimizer: optax.GradientTransformation, init_std: float,
               method: str | tuple = "erm", *, head: Head | None = None,
               train_labels: np.ndarray | None = None) -> ProbeState:
  """`method`: a name of METHODS or a `method_key` (loss, overrides); `head`: what is trained (the
  linear head by default); `train_labels` int [N]: for a loss with per-example state (LfF's)."""
  params = (head or LINEAR_HEAD).init(key, feature_dim, num_classes, init_std)
  config = loss_config(*(method_key(method) if isinstance(method, str) else method))
  return ProbeState(params=params, opt_state=optimizer.init(params),
                    loss_state=registry.init_loss_state(config, num_classes, train_labels))


def logits_of(params: dict[str, jax.Array], features: jax.Array) -> jax.Array:
  return features @ params["kernel"] + params["bias"]


def linear_outputs(params: dict[str, jax.Array], features: jax.Array) -> tuple:
  """The linear head's (logits, features, no extra outputs)."""
  return logits_of(params, features), features, {}


class Head(NamedTuple):
  """What the probe trains on the frozen features: the analogue of a method recipe's model (the
  wrapper that adds the outputs its loss reads, `experiments.methods.method.Recipe.model`).

  Attributes:
    init: (key, feature_dim, num_classes, init_std) → params.
    apply: (params, features [R, d]) → (logits [R, K], the features the loss sees [R, ·], extra
      outputs {name: [R, ·]}, which reach the loss as `StepInfo.recipe.outputs`), the order of
      `experiments.models.Outputs`.
  """
  init: Callable[..., Any]
  apply: Callable[..., tuple]


LINEAR_HEAD = Head(init_params, linear_outputs)


@functools.lru_cache(maxsize=None)
def make_train_epoch(method: str | tuple, schedule: ProbeSchedule, steps_per_epoch: int,
                     head: Head = LINEAR_HEAD):
  """jit(state, features, labels [N], batch_indices [S, B], epoch, rng) → (state, mean loss): one
  epoch of the registry's loss for `method` (a METHODS name or a `method_key`) on `head`, the steps
  under `lax.scan`; β of the reweighting is refreshed at the first step of each epoch; step s draws
  from fold_in(rng, s) (EQL). Cached, so the seeds of one (method, recipe, data size) share one
  compilation.

  The step gives the loss what the method's recipe says (`experiments.train.recipes`), as the
  trainer's `train_step` does: `features` [N, d] are one view, [V, N, d] V views (at least the
  recipe's own, SupCon's 2), run as the view-major [V·B, d] batch with the labels (and positions)
  repeated per view — every view reaches the loss (no BatchNorm here for further views to shape);
  the head's extra outputs (the recipe model's analogue: LfF's biased head, SupCon's projection)
  and, for a recipe with `indices`, the rows' dataset positions reach the loss in
  `StepInfo.recipe`."""
  optimizer = make_optimizer(schedule, steps_per_epoch)
  config = loss_config(*(method_key(method) if isinstance(method, str) else method))
  loss_fn = registry.make_loss_fn(config)
  method_recipe = registry.get(config.loss).recipe

  @jax.jit
  def train_epoch(state, features, labels, batch_indices, epoch, rng):
    views = features.shape[0] if features.ndim == 3 else 1
    if views < method_recipe.views:
      raise ValueError(f"features: the {config.loss!r} loss trains on {method_recipe.views} views, "
                       f"[{method_recipe.views}, N, d]; got shape {features.shape}")
    logits_shape = jax.eval_shape(head.apply, state.params, features[..., :1, :])[0]
    class_counts = jnp.zeros(logits_shape.shape[-1:], jnp.float32).at[labels].add(1.0)

    def step(state: ProbeState, inputs):
      step_in_epoch, indices = inputs
      info = StepInfo(epoch=epoch, step_in_epoch=step_in_epoch, class_counts=class_counts,
                      rng=jax.random.fold_in(rng, step_in_epoch))
      # [V, B, d] → the view-major [V·B, d] batch (one view: [B, d]).
      batch_features = features[..., indices, :].reshape(-1, features.shape[-1])
      batch_labels = jnp.tile(labels[indices], views)
      batch_indices = jnp.tile(indices, views) if method_recipe.indices else None

      def objective(params):
        logits, loss_features, outputs = head.apply(params, batch_features)
        given = RecipeInputs(outputs=outputs, indices=batch_indices)
        loss, loss_state, _ = loss_fn(logits, loss_features, batch_labels, state.loss_state,
                                      info._replace(recipe=given))
        return loss, loss_state

      (loss, loss_state), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      params = optax.apply_updates(state.params, updates)
      return ProbeState(params, opt_state, loss_state), loss

    state, step_losses = jax.lax.scan(step, state,
                                      (jnp.arange(batch_indices.shape[0]), batch_indices))
    return state, jnp.mean(step_losses)

  return train_epoch


def epoch_batches(num_examples: int, batch_size: int, seed: int, epoch: int,
                  order: np.ndarray | None = None) -> np.ndarray:
  """int32 [steps, batch]: the epoch's positions cut into full batches — `order` (JTT's up-sampled
  list), or by default the trainer's epoch order (`experiments.data.batches.epoch_order`: global
  batch b of one process is row b here)."""
  size = num_examples if order is None else len(order)
  steps = size // batch_size
  if steps == 0:
    raise ValueError(f"{size} examples do not fill one batch of {batch_size}")
  if order is None:
    order = batches.epoch_order(num_examples, steps * batch_size, seed=seed, epoch=epoch)
  return np.asarray(order[:steps * batch_size]).reshape(steps, batch_size).astype(np.int32)


@functools.partial(jax.jit, static_argnames="num_classes")
def class_loss_sums(params, features, labels, num_classes: int) -> EpochPass:
  """Per-class Σ CE, correct and counts of a full pass (FairDRO's epoch-end pass), by the per-class
  core's sums (`per_class_loss_sums`, `per_class_correct`) as the trainer's `eval_step`."""
  logits = logits_of(params, features)
  ce = reweight_jax.cross_entropy_loss(logits, labels)
  loss_sums, _ = perclass_metrics.per_class_loss_sums(ce, labels, num_classes)
  correct, counts = perclass_metrics.per_class_correct(jnp.argmax(logits, -1), labels, num_classes)
  return EpochPass(loss_sums=loss_sums, correct=correct, counts=counts)


@functools.partial(jax.jit, static_argnames="head")
def predict(params, features: jax.Array, head: Head = LINEAR_HEAD) -> jax.Array:
  """int [N] the classes `head` (default the linear head) predicts from `features` [N, d]."""
  return jnp.argmax(head.apply(params, features)[0], axis=-1)


def train_probe(method: str | tuple, train_features: np.ndarray, train_labels: np.ndarray,
                schedule: ProbeSchedule, seed: int, num_classes: int = NUM_CLASSES,
                epoch_order=None, *, head: Head = LINEAR_HEAD) -> tuple[ProbeState, list[float]]:
  """Trains one head (the linear head by default) on `method`'s registry loss; returns the final
  state and the per-epoch mean training loss.

  `method`: a METHODS name or a `method_key` (loss, overrides). `train_features`: [N, d], or
  [V, N, d] for V views (`make_train_epoch`). `epoch_order(epoch)`
  gives the dataset positions of an epoch (default: the epoch order of all; JTT's up-sampled list,
  which a recipe with a sampler needs); every epoch must have the same length. An entry with an
  epoch-end hook (FairDRO) gets a pass over the training set after every epoch."""
  key = method_key(method) if isinstance(method, str) else method
  config = loss_config(*key)
  method_recipe = registry.get(config.loss).recipe
  if method_recipe.sampler is not None and epoch_order is None:
    raise ValueError(f"the {config.loss!r} loss trains on its sampler's epochs "
                     f"({method_recipe.sampler.__name__}): pass epoch_order")
  if method_recipe.epoch_end is not None and head is not LINEAR_HEAD:
    raise ValueError(f"the {config.loss!r} loss's epoch-end pass is the linear head's")
  order = epoch_order or (lambda epoch: None)  # None: `epoch_batches`' default, the epoch order
  steps = len(train_labels if epoch_order is None else epoch_order(0)) // schedule.batch_size
  optimizer = make_optimizer(schedule, steps)
  state = init_state(jax.random.key(seed), train_features.shape[-1], num_classes, optimizer,
                     schedule.init_std, key, head=head, train_labels=train_labels)
  train_epoch = make_train_epoch(key, schedule, steps, head)
  epoch_end = recipes.of(config).epoch_end  # bound to the method's settings and state
  features, labels = jnp.asarray(train_features), jnp.asarray(train_labels, jnp.int32)
  epoch_losses = []
  for epoch in range(schedule.epochs):
    state, loss = train_epoch(state, features, labels,
                              epoch_batches(len(train_labels), schedule.batch_size, seed, epoch,
                                            order(epoch)),
                              jnp.asarray(epoch), jax.random.fold_in(jax.random.key(seed), epoch))
    if epoch_end is not None:
      state = state._replace(loss_state=epoch_end(
          state.loss_state, class_loss_sums(state.params, features, labels, num_classes), epoch,
          schedule.epochs))
    epoch_losses.append(float(loss))
  return state, epoch_losses


def setting_train_indices(train_labels: np.ndarray, imbalance_factor: float, seed: int) -> np.ndarray:
  """All training examples (balanced) or the CIFAR-10-LT subset drawn with `seed`."""
  if imbalance_factor == 1.0:
    return np.arange(len(train_labels))
  return long_tail.long_tail_indices(train_labels, NUM_CLASSES, imbalance_factor, seed)


def class_accuracy(params, features: np.ndarray, labels: np.ndarray,
                   head: Head = LINEAR_HEAD) -> np.ndarray:
  """float32 [K] per-class accuracy of `head`'s predictions."""
  predictions = predict(params, jnp.asarray(features), head)
  return perclass_metrics.per_class_accuracy(predictions, jnp.asarray(labels, jnp.int32),
                                            NUM_CLASSES)

