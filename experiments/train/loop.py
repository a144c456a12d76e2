"""`train_and_evaluate(config, workdir)`: the training loop of every method (one trainer, many
configs), reading top-down like flax's ImageNet example.

The pieces live in files named after what they hold: the train state and learning-rate schedule
(`train_state`), the loss registry (`losses`), the compiled steps (`steps`), their parallel runners
(`runners`), what a method trains on besides its loss (`recipes`), evaluation (`evaluation`),
checkpoints (`checkpoints`), metric writing (`metric_writer`) and the config check
(`config_validation`). Everything the next step depends on
lives in the `TrainState`, and the step fixes the data position, so a run killed at any point and
restarted from its workdir continues exactly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from experiments.train import checkpoints
from experiments.train import device_input
from experiments.data import batches as batches_lib
from experiments.train import evaluation
from experiments.data import input_pipeline
from experiments.data import loading
from experiments.data import normalization
from experiments.losses import registry as losses
from experiments.train import metric_writer
from experiments.train import recipes
from experiments.train import runners
from experiments.train import samplers
from experiments.train import steps
from experiments.train import train_state
from experiments.models.pretrained import weights as pretrained
from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.train.config_validation import validate_config



def runtime_info() -> dict[str, Any]:
  """What executed the run: JAX version, backend, devices and the XLA flags in effect."""
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind, "local_devices": jax.local_device_count(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def probe_step(config, task, learning_rate_fn, state, model, train, process_batch,
               views: int = 1, pair=None) -> None:
  """Traces one train step abstractly (no compute), so that arguments the library rejects at trace
  time (they name themselves) fail before the workdir is touched."""
  uint8 = (config.input_on_device  # the step takes uint8 images (normalised in it)
           or input_pipeline.REGISTRY[config.input_pipeline].uint8_to_device)
  batch = next(batches_lib.train_batches(train, process_batch, seed=config.seed, epoch=0,
                                         augment=False, views=views, pair=pair,
                                         normalized=not uint8))
  single_device = state.replace(apply_fn=model.clone(axis_name=None).apply)
  step = functools.partial(steps.train_step, loss_fn=losses.make_loss_fn(config), task=task,
                           learning_rate_fn=learning_rate_fn)
  try:
    jax.eval_shape(step, single_device, batch)
  except (ValueError, TypeError) as error:
    raise ConfigError(f"config rejected by the library: {str(error).splitlines()[0]}") from error


def divergence_error(first_step, host_state, manager, loss_name: str) -> FloatingPointError:
  """The error a diverged run stops with: the first non-finite step, the per-class state entries
  that are not finite (field and classes), and the last good checkpoint (nothing later is written)."""
  bad = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(host_state.loss_state)[0]:
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.floating) and not np.all(np.isfinite(leaf)):
      classes = np.flatnonzero(~np.isfinite(leaf.reshape(leaf.shape[0], -1)).any(-1)).tolist()
      name = ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
      bad.append(f"{name} classes {classes}")
  params_finite = all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(host_state.params))
  last = manager.latest_step()
  return FloatingPointError(
      f"non-finite loss or state first at step {first_step} (loss {loss_name}); non-finite class "
      f"statistics: {'; '.join(bad) or 'none'}; parameters finite: {params_finite}; last good "
      f"checkpoint: " + (f"step {last} in {manager.directory}" if last is not None else "none")
      + " (no checkpoint of the diverged state was written)")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       *, max_steps: int | None = None,
                       resume_from_previous: bool = False) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming from its latest checkpoint) and writes summary.json.

  Args:
    config: see experiments/configs/default.py.
    workdir: output folder: config.json, metrics.jsonl, class_history.jsonl, tensorboard/,
      checkpoints/, summary.json.
    max_steps: stop after this global step (for tests and the resume check); the schedule still
      follows `num_epochs`.
    resume_from_previous: when the latest checkpoint cannot be read or fails its digest, set it
      aside and resume from the newest one that reads (default: stop with an error naming it).

  Returns:
    The summary dict (also written to workdir/summary.json).
  """
  validate_config(config)
  train, validation, test = loading.load_data(config)  # fails before anything is written
  workdir = pathlib.Path(workdir).resolve()  # orbax needs absolute paths
  is_main = jax.process_index() == 0
  process_count, process_index = jax.process_count(), jax.process_index()
  if config.batch_size % process_count:
    raise ConfigError(f"config.batch_size: {config.batch_size} is not divisible by the "
                      f"{process_count} processes")
  process_batch = config.batch_size // process_count
  num_classes = train.num_classes
  recipe = recipes.of(config)  # what the method trains on besides its loss
  # A method that trains on an edited training set (JTT): the positions one epoch draws from.
  sample, sample_record = ((None, {}) if recipe.sampler is None
                           else samplers.SAMPLERS[recipe.sampler](config, train))
  pair = None if recipe.pair is None else recipe.pair(config, train)  # GLMC's, mixup's partners
  steps_per_epoch = batches_lib.steps_per_epoch(train, process_batch, process_count, sample)
  total_steps = int(config.num_epochs * steps_per_epoch)
  if max_steps is not None:
    total_steps = min(total_steps, max_steps)
  # Views in the forward pass: the method's own (SupCon: 2) or more (the released recipe: 3, the
  # loss on view 0; the others shape BatchNorm statistics only).
  views = max(recipe.views, config.views)
  task = steps.Task(class_counts=tuple(float(c) for c in train.class_counts),
                    steps_per_epoch=steps_per_epoch,
                    loss_views=recipe.views if views > recipe.views else 0, mix=recipe.mix,
                    indices=recipe.indices,
                    normalization=normalization.normalization(train.name))
  try:
    learning_rate_fn = train_state.create_learning_rate_fn(config, steps_per_epoch,
                                                           train.class_counts)
  except ValueError as error:  # MiLeLR on balanced counts with a switch: Γ(1 − a) at its pole
    raise ConfigError(f"config.schedule={config.schedule!r}: {error}") from error
  model = train_state.build_model(config, num_classes,
                                  axis_name=runners.axis_name(config.parallel))
  state = train_state.create_train_state(config, model, train.images.shape[1:], num_classes,
                                         learning_rate_fn, jax.random.key(config.seed),
                                         train_labels=train.labels)
  encoder_record = {}
  if config.frozen_encoder_from:  # checked (and read) before anything is written
    encoder_state, encoder_record = checkpoints.load_frozen_encoder(config, state,
                                                                    train.images.shape[1:])
  if config.pretrained:  # read (and checked) before anything is written
    pretrained_variables = pretrained.encoder_variables(
        config.pretrained, config.model, train_state.base_model(config, num_classes), "pretrained")
    encoder_record["pretrained"] = str(pathlib.Path(config.pretrained).expanduser().resolve())
  checkpoints.check_resumable(workdir, config)
  checkpoints.check_same_record(workdir, "sampler.json", sample_record)

  workdir.mkdir(parents=True, exist_ok=True)
  if is_main:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2) + "\n")
  manager = checkpoints.manager(workdir, config, steps_per_epoch)
  # Checkpoints hold one host copy of the state, so any device count can resume them.
  if config.init_from and manager.latest_step() is None:
    state = checkpoints.init_from(config, state, steps_per_epoch, num_classes)
    if is_main:  # its logs start with the other run's, up to the step it starts from
      metric_writer.copy_history(checkpoints.init_from_source(config)[0], workdir, int(state.step))
  if config.frozen_encoder_from and manager.latest_step() is None:
    state = encoder_state
  if config.pretrained and manager.latest_step() is None and not config.init_from:
    state = pretrained.with_encoder(state, pretrained_variables)
  pipeline = input_pipeline.REGISTRY[config.input_pipeline]
  state, input_state = checkpoints.restore_latest(manager, state, input_state=True,
                                                  resume_from_previous=resume_from_previous)
  input_state = input_state if pipeline.saves_state else None
  start_step = int(state.step)
  train_input = input_pipeline.make(
      config.input_pipeline, input_pipeline.BatchAt(
          train, process_batch, steps_per_epoch, seed=config.seed, augment=config.augment,
          process_index=process_index, process_count=process_count, views=views,
          augmentation=config.augmentation,
          sample=None if sample is None else batches_lib.check_sample(train, sample), pair=pair,
          normalized=not pipeline.uint8_to_device, crops_on_device=config.input_on_device),
      int(config.num_epochs * steps_per_epoch), workers=config.data_workers,
      restored_state=input_state)

  runner = runners.make_runner(config.parallel, losses.make_loss_fn(config), task,
                               learning_rate_fn)
  state = runner.place_state(state)
  # With the split in device memory the images are cut on the devices (same pixels).
  place_batch = (device_input.DeviceCrops(config.parallel, train.images, runner.place_batch)
                 if config.input_on_device else runner.place_batch)
  writer = metric_writer.MetricWriter(workdir, is_main, start_step)
  progress = None
  if config.progress_bar and is_main:
    # optional: tqdm only for the progress bar (config.progress_bar)
    from tqdm import tqdm  # pylint: disable=g-import-not-at-top
    progress = tqdm(total=total_steps * config.batch_size, initial=start_step * config.batch_size,
                    unit="img", unit_scale=True, dynamic_ncols=True,
                    desc=f"{config.loss} {config.dataset}")
  evaluate_train = functools.partial(
      evaluation.evaluate_split, runner, split=train, batch_size=config.eval_batch_size,
      num_classes=num_classes, process_index=process_index, process_count=process_count)

  def write_metrics(step, scalars, per_class):
    try:
      writer.write(step, scalars, per_class)
    except metric_writer.MetricWriteError as error:
      raise metric_writer.MetricWriteError(
          f"{error}; the checkpoints up to step {manager.latest_step()} in {manager.directory} are "
          f"intact") from error

  epoch_end = recipe.epoch_end
  step = start_step
  window, window_steps, window_start = None, 0, time.perf_counter()
  input_state = None
  with contextlib.closing(train_input.batches(start_step, place_batch)) as batches:
    for batch_step, batch, input_state in batches:
      if batch_step != step:
        raise DataError(f"the input pipeline gave the batch of step {batch_step} at "
                                 f"step {step} (its saved state does not match the checkpoint)")
      state, metrics = runner.step(state, batch)
      window = metric_writer.accumulate(window, metrics)
      step += 1
      window_steps += 1
      if progress is not None:
        progress.update(config.batch_size)
      if step % config.log_every_steps == 0 or step == total_steps:
        first_nonfinite, scalars, per_class = metric_writer.window_means(runner.to_host(window))
        if first_nonfinite is not None:
          raise divergence_error(first_nonfinite, runner.to_host(state), manager, config.loss)
        elapsed = time.perf_counter() - window_start
        scalars["train_accuracy"] = scalars.pop("train_correct") / (
            window_steps * config.batch_size * recipe.views)
        scalars.update(epoch=step / steps_per_epoch,
                       images_per_sec=window_steps * config.batch_size / elapsed)
        write_metrics(step, scalars, per_class)
        if progress is not None:
          progress.set_postfix(loss=f"{scalars['loss']:.3f}", epoch=f"{scalars['epoch']:.1f}")
        window, window_steps, window_start = None, 0, time.perf_counter()
      if epoch_end is not None and step % steps_per_epoch == 0:
        # A state set from the training set (FairDRO's q): one eval-mode pass, no augmentation.
        evaluation_start = time.perf_counter()
        sums = evaluate_train(state)
        host = runner.to_host(state)
        state = runner.place_state(host.replace(loss_state=epoch_end(
            config, host.loss_state, losses.EpochPass(sums.loss_sums, sums.correct, sums.counts),
            step // steps_per_epoch - 1, config.num_epochs)))
        window_start += time.perf_counter() - evaluation_start
      if (config.class_loss_every_epochs and step % steps_per_epoch == 0
          and (step // steps_per_epoch) % config.class_loss_every_epochs == 0):
        evaluation_start = time.perf_counter()
        sums = evaluate_train(state, neural_collapse=config.nc_metrics, head_kind=config.head)
        class_loss, loss_rho = evaluation.training_class_loss(sums)
        scalars = {"epoch": step / steps_per_epoch, "train_rho": loss_rho}
        if config.nc_metrics:  # NC1–NC4 over training (the terminal-phase claims)
          params = runner.to_host(state).params
          nc = evaluation.neural_collapse_metrics(sums, config.head, params)
          scalars.update({f"train_{name}": value for name, value in nc.items() if name != "rho"})
          balanced = evaluation.neural_collapse_metrics(sums, config.head, params,
                                                        centring="class_balanced")
          scalars.update({f"train_{name}_balanced": value for name, value in balanced.items()})
        write_metrics(step, scalars, {"train_class_ce": class_loss})
        window_start += time.perf_counter() - evaluation_start  # images/s: training time only
      if (config.test_every_epochs and step % steps_per_epoch == 0
          and (step // steps_per_epoch) % config.test_every_epochs == 0):
        evaluation_start = time.perf_counter()
        accuracy, class_accuracy = evaluation.test_accuracy(evaluate_train(state, split=test))
        write_metrics(step, {"epoch": step / steps_per_epoch, "test_accuracy": accuracy},
                      {"test_class_accuracy": class_accuracy})
        window_start += time.perf_counter() - evaluation_start
      kept_epoch = (step % steps_per_epoch == 0
                    and step // steps_per_epoch in checkpoints.start_epochs(config))
      if step % config.checkpoint_every_steps == 0 or step == total_steps or kept_epoch:
        if not bool(runner.to_host(metrics["finite"])):  # never checkpoint a diverged state
          first_nonfinite, _, _ = metric_writer.window_means(runner.to_host(window))
          raise divergence_error(first_nonfinite or step, runner.to_host(state), manager,
                                 config.loss)
        try:
          checkpoints.save(manager, step, checkpoints.to_checkpoint(runner.to_host(state)),
                           input_state)
        except OSError as error:
          raise checkpoints.CheckpointError(
              f"cannot write the checkpoint of step {step} in {manager.directory}: "
              f"{error.strerror or error}; the checkpoint of step {manager.latest_step()} is "
              f"intact") from error
      if step >= total_steps:
        break
  manager.wait_until_finished()
  if progress is not None:
    progress.close()

  summary = evaluation.final_evaluation(config, runner, state, train, validation, test,
                                        num_classes, process_index=process_index,
                                        process_count=process_count)
  summary.update(steps=step, epochs=step / steps_per_epoch, loss=config.loss,
                 dataset=config.dataset, imbalance_factor=config.imbalance_factor,
                 seed=config.seed, parallel=config.parallel, num_devices=runner.num_devices,
                 num_processes=process_count, runtime=runtime_info(), **sample_record,
                 **encoder_record)
  if is_main:
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
  writer.close()
  return summary
