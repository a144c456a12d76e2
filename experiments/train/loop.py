"""`train_and_evaluate(config, workdir)`: the training loop of every method (one trainer, many
configs), reading top-down like flax's ImageNet example: what the run is (`plan`: data, recipe,
schedule, model and its initial state, all read and checked before the workdir is touched), where
it starts (`start`: the workdir, its checkpoints, a run it starts from), the steps (`train`), and
what it reports (`summarize`).

The pieces live in files named after what they hold: the train state and learning-rate schedule
(`train_state`), the compiled steps (`steps`), their parallel runners (`runners`), the recipe a
run trains on (`recipes`), evaluation (`evaluation`), checkpoints (`checkpoints`), metric writing
(`metric_writer`) and what the loop does at the end of a logging window or an epoch
(`loop_events`). Everything the next step depends on lives in the `TrainState`, and the step fixes
the data position, so a run killed at any point and restarted from its workdir continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
from typing import Any

import jax
import ml_collections

from experiments.methods import registry
from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.configs import schema
from experiments.data import batches as batches_lib
from experiments.data import input_pipeline
from experiments.data import loading
from experiments.data import normalization
from experiments.data.split import Split
from experiments.models.pretrained import weights
from experiments.train import checkpoints
from experiments.train import device_input
from experiments.train import evaluation
from experiments.train import loop_events
from experiments.train import metric_writer
from experiments.train import recipes
from experiments.train import run_features
from experiments.train import runners
from experiments.train import steps
from experiments.train import train_state


def runtime_info() -> dict[str, Any]:
  """What executed the run: JAX version, backend, devices and the XLA flags in effect."""
  return {"jax": jax.__version__, "backend": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind, "local_devices": jax.local_device_count(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}



@dataclasses.dataclass
class Plan:
  """What a run is, read and checked before its workdir is touched."""
  config: ml_collections.ConfigDict
  workdir: pathlib.Path
  train: Split
  validation: Split | None
  test: Split
  process_batch: int
  recipe: recipes.RunRecipe
  sample: Any                 # the dataset positions an epoch draws from (a sampler's), or None
  sample_record: dict         # the sampler's record (sampler.json, the summary)
  pair: Any                   # the paired batches' draw (GLMC's, mixup's partners), or None
  steps_per_epoch: int
  total_steps: int
  views: int                  # views in the forward pass
  task: steps.Task
  learning_rate_fn: Any
  model: Any
  state: train_state.TrainState
  encoder_state: Any = None   # the state with a frozen encoder loaded (`frozen_encoder_from`)
  pretrained_variables: Any = None
  encoder_record: dict = dataclasses.field(default_factory=dict)
  # The epochs whose end the run checkpoints and keeps: the deferred methods' starts of the config
  # it was given (`checkpoints.start_epochs`), though its own config holds only its method's.
  keep_epochs: tuple[int, ...] = ()


def plan(config, workdir, max_steps: int | None) -> Plan:
  """The run of `config` in `workdir`: its config (`schema.complete`: the shared fields and its
  methods' sub-trees, what config.json records), data, recipe, epochs, step, model and initial
  state; the encoder or weights it starts from are read here too, so that anything that fails,
  fails before the workdir is written."""
  schema.validate(config)
  keep_epochs = checkpoints.start_epochs(config)
  config = schema.complete(config)
  train, validation, test = loading.load_data(config)
  process_count = jax.process_count()
  if config.batch_size % process_count:
    raise ConfigError(f"config.batch_size: {config.batch_size} is not divisible by the "
                      f"{process_count} processes")
  process_batch = config.batch_size // process_count
  recipe = recipes.of(config)  # what the method trains on besides its loss
  # A method that trains on an edited training set (JTT): the positions one epoch draws from.
  sample, sample_record = ((None, {}) if recipe.sampler is None else recipe.sampler(
      train, run_features.read_run(config, train)))
  pair = None if recipe.pair is None else recipe.pair(train)  # GLMC's, mixup's partners
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
                    normalization=normalization.normalization(train.name),
                    example_ndim=train.images.ndim - 1)
  try:
    learning_rate_fn = train_state.create_learning_rate_fn(config, steps_per_epoch,
                                                           train.class_counts)
  except ValueError as error:  # MiLeLR on balanced counts with a switch: Γ(1 − a) at its pole
    raise ConfigError(f"config.schedule={config.schedule!r}: {error}") from error
  model = train_state.build_model(config, train.num_classes,
                                  axis_name=runners.axis_name(config.parallel))
  state = train_state.create_train_state(config, model, train.images.shape[1:], train.num_classes,
                                         learning_rate_fn, jax.random.key(config.seed),
                                         train_labels=train.labels)
  run = Plan(config, pathlib.Path(workdir).resolve(),  # orbax needs absolute paths
             train, validation, test, process_batch, recipe, sample, sample_record, pair,
             steps_per_epoch, total_steps, views, task, learning_rate_fn, model, state,
             keep_epochs=keep_epochs)
  read_encoder(run)
  return run


def read_encoder(run: Plan) -> None:
  """The frozen encoder (`frozen_encoder_from`) or pretrained weights (`pretrained`) the run starts
  from, read and checked."""
  config, image_shape = run.config, run.train.images.shape[1:]
  if config.frozen_encoder_from:
    run.encoder_state, run.encoder_record = checkpoints.load_frozen_encoder(config, run.state,
                                                                            image_shape)
  if config.pretrained:
    run.pretrained_variables = weights.encoder_variables(
        config.pretrained, config.model,
        train_state.base_model(config, run.train.num_classes), "pretrained")
    run.encoder_record["pretrained"] = str(pathlib.Path(config.pretrained).expanduser().resolve())


def start(run: Plan, resume_from_previous: bool):
  """(checkpoint manager, state, input state) where the run starts: its workdir checked and opened
  (config.json), then its latest checkpoint, or else the run it starts from (`init_from`), its
  frozen encoder or pretrained weights."""
  config, workdir = run.config, run.workdir
  checkpoints.check_resumable(workdir, config)
  checkpoints.check_same_record(workdir, "sampler.json", run.sample_record)
  workdir.mkdir(parents=True, exist_ok=True)
  if jax.process_index() == 0:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2) + "\n")
  manager = checkpoints.manager(workdir, config, run.steps_per_epoch, run.keep_epochs)
  # Checkpoints hold one host copy of the state, so any device count can resume them.
  state = run.state
  if manager.latest_step() is None:
    if config.init_from:
      state = checkpoints.init_from(config, state, run.steps_per_epoch, run.train.num_classes)
      if jax.process_index() == 0:  # its logs start with the other run's, up to its start step
        metric_writer.copy_history(checkpoints.init_from_source(config)[0], workdir,
                                   int(state.step))
    if config.frozen_encoder_from:
      state = run.encoder_state
    if config.pretrained and not config.init_from:
      state = weights.with_encoder(state, run.pretrained_variables)
  state, input_state = checkpoints.restore_latest(manager, state, input_state=True,
                                                  resume_from_previous=resume_from_previous)
  if not input_pipeline.REGISTRY[config.input_pipeline].saves_state:
    input_state = None
  return manager, state, input_state


def train_input(run: Plan, input_state):
  """The run's training batches from its input pipeline (restored to `input_state`)."""
  config = run.config
  pipeline = input_pipeline.REGISTRY[config.input_pipeline]
  sample = None if run.sample is None else batches_lib.check_sample(run.train, run.sample)
  return input_pipeline.make(
      config.input_pipeline, input_pipeline.BatchAt(
          run.train, run.process_batch, run.steps_per_epoch, seed=config.seed,
          augment=config.augment, process_index=jax.process_index(),
          process_count=jax.process_count(), views=run.views,
          augmentation=config.augmentation, sample=sample, pair=run.pair,
          normalized=not pipeline.uint8_to_device, crops_on_device=config.input_on_device),
      int(config.num_epochs * run.steps_per_epoch), workers=config.data_workers,
      restored_state=input_state)


def train(run: Plan, manager, state, input_state):
  """The steps from the state's step to `run.total_steps`, with the loop's events after each
  (`loop_events.Events`); returns (runner, state, step)."""
  config = run.config
  runner = runners.make_runner(config.parallel, registry.make_loss_fn(config), run.task,
                               run.learning_rate_fn)
  step = int(state.step)  # before placing: under pmap the placed state has a device axis
  state = runner.place_state(state)
  # With the split in device memory the images are cut on the devices (same pixels).
  place_batch = (device_input.DeviceCrops(config.parallel, run.train.images, runner.place_batch)
                 if config.input_on_device else runner.place_batch)
  events = loop_events.Events(run, runner, manager, step)
  with contextlib.closing(train_input(run, input_state).batches(step, place_batch)) as batches:
    state, step = run_steps(batches, state, step, run.total_steps, runner.step, events.after_step)
  manager.wait_until_finished()
  events.close()
  return runner, state, step


def run_steps(batches, state, step: int, total_steps: int, train_step, after_step):
  """(state, step) after training `batches` — (step, batch, input state) in step order — from
  `step` until `total_steps`: each batch checked to be its step's, trained by `train_step(state,
  batch) → (state, metrics)`, and followed by `after_step(step, state, metrics, input state) →
  state` (the loop's events; the seed axis's, over all seeds)."""
  for batch_step, batch, input_state in batches:
    if batch_step != step:
      raise DataError(f"the input pipeline gave the batch of step {batch_step} at "
                      f"step {step} (its saved state does not match the checkpoint)")
    state, metrics = train_step(state, batch)
    step += 1
    state = after_step(step, state, metrics, input_state)
    if step >= total_steps:
      break
  return state, step


def summarize(run: Plan, runner, state, step: int, record: dict | None = None) -> dict[str, Any]:
  """The final evaluation with what made the run (summary.json), and `record` (how it ran)."""
  config = run.config
  summary = evaluation.final_evaluation(config, runner, state, run.train, run.validation, run.test,
                                        run.train.num_classes, process_index=jax.process_index(),
                                        process_count=jax.process_count())
  summary.update(steps=step, epochs=step / run.steps_per_epoch, loss=config.loss,
                 dataset=config.dataset, imbalance_factor=config.imbalance_factor,
                 seed=config.seed, parallel=config.parallel, num_devices=runner.num_devices,
                 num_processes=jax.process_count(), runtime=runtime_info(), **run.sample_record,
                 **run.encoder_record, **(record or {}))
  if jax.process_index() == 0:
    (run.workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
  return summary


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       *, max_steps: int | None = None,
                       resume_from_previous: bool = False) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming from its latest checkpoint) and writes summary.json.

  Args:
    config: see experiments/configs/default.py (the shared fields) and schema.py (the check);
      the run records its config (`schema.complete`) in config.json.
    workdir: output folder: config.json, metrics.jsonl, class_history.jsonl, tensorboard/,
      checkpoints/, summary.json.
    max_steps: stop after this global step (for tests and the resume check); the schedule still
      follows `num_epochs`.
    resume_from_previous: when the latest checkpoint cannot be read or fails its digest, set it
      aside and resume from the newest one that reads (default: stop with an error naming it).

  Returns:
    The summary dict (also written to workdir/summary.json).
  """
  run = plan(config, workdir, max_steps)
  manager, state, input_state = start(run, resume_from_previous)
  runner, state, step = train(run, manager, state, input_state)
  return summarize(run, runner, state, step)
