"""The compiled steps, written once for every way of running (`axis_name` None on one device):
`train_step` (one SGD step), `eval_step` (one evaluation batch into per-class sums) and `ncc_step`
(NC4's nearest-class-mean pass over kept features). Under `axis_name` every per-class quantity is
reduced as sums and counts, so the result equals one device on the global batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import reweight_jax
from mr2_reweight_core import metrics as perclass_metrics
from experiments.methods.method import Mix
from experiments.methods.method import RecipeInputs
from experiments.methods.method import StepInfo
from experiments import models
from experiments.data import normalization


@dataclasses.dataclass(frozen=True)
class Task:
  """Static facts of a run that the step closes over (hashable: no arrays)."""
  class_counts: tuple[float, ...]
  steps_per_epoch: int
  loss_views: int = 0  # views (of a multi-view batch) the loss sees, the first ones; 0: all
  # From the method's recipe (`experiments.methods.method.Recipe`): how a paired batch is mixed on
  # the device, and whether the loss reads the rows' dataset positions.
  mix: Callable[[dict], tuple[Any, Mix]] | None = None
  indices: bool = False
  # The channel (mean, std) that uint8 images (the grain pipeline's, input_on_device's crops) are
  # normalised with here.
  normalization: tuple[tuple[float, ...], tuple[float, ...]] = ((0.5,), (0.5,))
  # The rank of one example: 3 for an image [H, W, C], 1 for features [d] (a 'features:' source).
  example_ndim: int = 3


def device_images(images, task: Task):
  """Images as the model takes them: uint8 pixels normalised on the device with the host's
  float32 operations (`data.normalize`), float images (normalised on the host) unchanged."""
  if jnp.issubdtype(images.dtype, jnp.integer):
    return normalization.normalize(images, task.normalization, xp=jnp)
  return images


def all_finite(tree) -> jax.Array:
  """True when every floating leaf of `tree` is finite."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _varying_axes(x: jax.Array) -> frozenset[str]:
  """The manual axes `x` is typed as varying over (empty under pmap and `check_vma=False`, which do
  not track it)."""
  manual = getattr(jax.typeof(x), "manual_axis_type", None)
  return frozenset() if manual is None else manual.varying


def device_mean(tree, *, axis_name: str):
  """The mean over the devices of axis `axis_name` of each device's share in `tree` (the global
  value).

  A share that varies across devices is `lax.pmean`-ed (pmap, and `shard_map` for values that
  depend on the device's rows). Under `shard_map`'s default `check_vma=True` the gradient of a
  replicated (device-invariant) parameter arrives already summed over the devices (the transpose
  of its implicit broadcast is a `psum`): it is the sum of the shares, divided here by the device
  count.
  """
  vma_checked = axis_name in _varying_axes(jax.lax.axis_index(axis_name))

  def mean(x):
    if vma_checked and axis_name not in _varying_axes(x):
      return x / jax.lax.axis_size(axis_name)
    return jax.lax.pmean(x, axis_name)
  return jax.tree.map(mean, tree)


def train_step(state, batch, *, loss_fn, task: Task, learning_rate_fn,
               axis_name: str | None = None, swept=None):
  """One SGD step of `loss_fn` (`experiments.methods.registry.make_loss_fn`). Under `axis_name`,
  BatchNorm, the loss's per-class state and gradients are reduced across devices: the update equals
  one device on the global batch. Returns (state, metrics) with the loss's metrics, 'loss',
  'train_correct', 'learning_rate', 'step' and 'finite' (loss, loss state and parameters).

  The batch as the pipeline gives it, made into the model's input as the method's recipe says
  (`experiments.train.recipes.of`, through `task`): a paired batch (GLMC's partners, mixup's) is
  mixed first (`task.mix`); views [B, V, ...] run as one view-major batch of V·B rows, the loss seeing
  the first `task.loss_views` views (all by default; the others shape BatchNorm only). The loss
  reads what the recipe gives it — the model wrapper's extra outputs, the rows' dataset positions,
  the mix — from `StepInfo.recipe` (`RecipeInputs`). `swept`: a sweep member's values of traceable
  fields ({'<tree>.<field>': scalar}, `experiments.train.seed_axis`), read by the registry's loss
  over the config's (`StepInfo.swept`)."""
  dropout_rng = jax.random.fold_in(state.rng, state.step)
  batch = {**batch, "image": device_images(batch["image"], task)}
  if "image_b" in batch:
    batch["image_b"] = device_images(batch["image_b"], task)
  images, labels, indices = batch["image"], batch["label"], batch.get("index")
  mix = None
  if task.mix is not None:
    images, mix = task.mix(batch)
  loss_rows = labels.shape[0]
  if images.ndim == task.example_ndim + 2:  # [B, V, ...] views → the view-major [V·B, ...] batch
    num_views = images.shape[1]
    loss_rows *= task.loss_views or num_views
    images = jnp.swapaxes(images, 0, 1).reshape(-1, *images.shape[2:])
    labels = jnp.tile(labels, num_views)[:loss_rows]
    indices = None if indices is None else jnp.tile(indices, num_views)[:loss_rows]
    if mix is not None:
      mix = Mix(jnp.tile(mix.labels_b, num_views)[:loss_rows], mix.lam)
  info = StepInfo(epoch=state.step // task.steps_per_epoch,
                  step_in_epoch=state.step % task.steps_per_epoch,
                  class_counts=jnp.asarray(task.class_counts, jnp.float32),
                  axis_name=axis_name, rng=jax.random.fold_in(dropout_rng, 1),
                  swept=swept or {})

  def objective(params):
    outputs, new_model_state = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats}, images, train=True,
        mutable=["batch_stats"], rngs={"dropout": dropout_rng})
    # Views past the loss's (the released recipe's v1, v2) shape the BatchNorm statistics only.
    outputs = models.split_outputs(outputs)
    logits, features = outputs.logits[:loss_rows], outputs.features[:loss_rows]
    given = RecipeInputs(
        outputs={**{k: v[:loss_rows] for k, v in outputs.rows.items()}, **outputs.shared},
        mix=mix, indices=indices if task.indices else None)
    loss, loss_state, loss_metrics = loss_fn(logits, features, labels, state.loss_state,
                                             info._replace(recipe=given))
    return loss, (new_model_state, loss_state, loss_metrics, logits)

  (loss, (new_model_state, loss_state, metrics, logits)), grads = jax.value_and_grad(
      objective, has_aux=True)(state.params)
  # Over the loss's views (the trainer divides by batch · loss views).
  correct = jnp.sum(jnp.argmax(logits, -1) == labels)
  if axis_name is not None:
    grads = device_mean(grads, axis_name=axis_name)
    loss = jax.lax.pmean(loss, axis_name)
    correct = jax.lax.psum(correct, axis_name)
  new_state = state.apply_gradients(grads=grads, batch_stats=new_model_state["batch_stats"],
                                    loss_state=loss_state)
  # 'finite' covers what a checkpoint would hold (parameters and the loss state) and the loss;
  # 'step' is the step this update completes (the first non-finite one is reported by number).
  metrics = {**metrics, "loss": loss, "train_correct": correct,
             "learning_rate": learning_rate_fn(state.step), "step": new_state.step,
             "finite": jnp.isfinite(loss) & all_finite(loss_state) & all_finite(new_state.params)}
  return new_state, metrics


class EvalSums(NamedTuple):
  """Per-class sums over an evaluated split (psum-reduced; divide once with `class_mean`).

  Attributes:
    correct: float32 [K], correct predictions per class.
    counts: float32 [K], examples per class.
    loss_sums: float32 [K], Σ cross-entropy per class.
    neural_collapse: `reweight_jax.NCAccumulator` (pass 1 and, after `ncc_step`, NC4), or None.
  """
  correct: jax.Array
  counts: jax.Array
  loss_sums: jax.Array
  neural_collapse: Any = None

  @classmethod
  def init(cls, num_classes: int, feature_dim: int | None = None) -> "EvalSums":
    zeros = jnp.zeros((num_classes,), jnp.float32)
    nc = (None if feature_dim is None
          else reweight_jax.NCAccumulator.init(num_classes, feature_dim))
    return cls(zeros, zeros, zeros, nc)

  def class_accuracy(self):
    return perclass_metrics.class_mean(self.correct, self.counts)

  def class_loss(self):
    """L_c = Σ_{i: y_i = c} CE_i / n_c (NaN for a class without examples)."""
    return perclass_metrics.class_mean(self.loss_sums, self.counts)


def eval_step(state, sums: EvalSums, batch, *, axis_name: str | None = None):
  """One evaluation batch (inference mode, padding masked) added to `sums`; returns (sums, features)
  — the features for NC4's pass (`ncc_step`) when `sums` accumulates NC statistics."""
  logits, features = models.split_outputs(state.apply_fn(
      {"params": state.params, "batch_stats": state.batch_stats}, batch["image"], train=False))[:2]
  labels, mask = batch["label"], batch["mask"]
  num_classes = logits.shape[1]
  correct, counts = perclass_metrics.per_class_correct(jnp.argmax(logits, -1), labels, num_classes,
                                                       where=mask, axis_name=axis_name)
  per_example = reweight_jax.cross_entropy_loss(logits, labels, where=mask)
  loss_sums, _ = perclass_metrics.per_class_loss_sums(per_example, labels, num_classes, where=mask,
                                                      axis_name=axis_name)
  nc = sums.neural_collapse
  if nc is not None:
    nc = nc.update(features, labels, per_example_loss=per_example, where=mask,
                   axis_name=axis_name)
  return EvalSums(sums.correct + correct, sums.counts + counts, sums.loss_sums + loss_sums,
                  nc), features


def ncc_step(sums: EvalSums, features, mask, classifier, bias, *, axis_name: str | None = None):
  """NC4's pass over features kept from `eval_step` (the final class means are known by then)."""
  nc = sums.neural_collapse.update_ncc(features, classifier, bias=bias, where=mask,
                                       axis_name=axis_name)
  return sums._replace(neural_collapse=nc)
