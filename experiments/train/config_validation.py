"""The trainer's config check: every field is range-checked before anything is written (the loss's
own sub-trees by the loss registry), so a bad value stops with one line naming the field."""

from __future__ import annotations

import json
import pathlib

import jax

from experiments.data import augmentations
from experiments.data import long_tail
from experiments.data import input_pipeline
from experiments.data import sources
from experiments.losses import registry as losses
from experiments.models import registry as models
from experiments.train import recipes
from experiments.train import runners
from experiments.common.errors import INF
from experiments.common.errors import ConfigError
from experiments.common.errors import check_choice
from experiments.common.errors import check_ranges

PARALLEL = runners.PARALLEL

RANGES = (
    ("num_epochs", (1, True), (INF, False)), ("batch_size", (1, True), (INF, False)),
    ("eval_batch_size", (1, True), (INF, False)), ("log_every_steps", (1, True), (INF, False)),
    ("checkpoint_every_steps", (1, True), (INF, False)),
    ("class_loss_every_epochs", (0, True), (INF, False)),
    ("test_every_epochs", (0, True), (INF, False)),
    ("keep_checkpoints", (1, True), (INF, False)), ("warmup_epochs", (0, True), (INF, False)),
    ("learning_rate", (0, False), (INF, False)), ("momentum", (0, True), (1, False)),
    ("weight_decay", (0, True), (INF, False)), ("cosine_scale", (0, False), (INF, False)),
    ("validation_fraction", (0, True), (1, False)), ("max_train_per_class", (0, True), (INF, False)),
    ("imbalance_factor", (1, True), (INF, False)), ("views", (1, True), (INF, False)),
    ("mixup_alpha", (0, True), (INF, False)), ("milelr_switch_epoch", (0, True), (INF, False)),
    ("data_workers", (0, True), (INF, False)), ("image_size", (1, True), (INF, False)),
    ("resize", (1, True), (INF, False)),
)


def validate_config(config) -> None:
  """Raises ConfigError (one line, naming the field) before anything is written."""
  losses.get(config.loss)  # an unknown loss is named first
  check_choice(config, "parallel", PARALLEL)
  check_choice(config, "schedule", ("cosine", "step", "milelr"))
  check_choice(config, "head", models.HEADS)
  check_choice(config, "compute_dtype", models.COMPUTE_DTYPES)
  check_choice(config, "augmentation", augmentations.AUGMENTATIONS)
  check_choice(config, "lt_selection", long_tail.LT_SELECTIONS)
  check_choice(config, "input_pipeline", input_pipeline.PIPELINES)
  if config.model not in models.MODELS:
    raise ConfigError(f"config.model: unknown model {config.model!r}; expected one of "
                      f"{sorted(models.MODELS)}")
  check_ranges(config, RANGES)
  losses.validate(config)
  recipes.validate(config)
  if config.warmup_epochs > config.num_epochs:
    raise ConfigError(f"config.warmup_epochs: {config.warmup_epochs} exceeds config.num_epochs "
                      f"{config.num_epochs}")
  if config.pretrained and config.frozen_encoder_from:
    raise ConfigError("config.pretrained and config.frozen_encoder_from both set: fine-tune from "
                      "the weights (pretrained) or probe them (frozen_encoder_from), not both")
  check_input_on_device(config)
  if config.reference_summary:
    path = pathlib.Path(config.reference_summary)
    if not path.is_file() or "per_class_accuracy" not in json.loads(path.read_text()):
      raise ConfigError(f"config.reference_summary: {path} is not a summary.json of a finished run")
  devices = {"none": 1, "jit": jax.device_count(), "pmap": jax.device_count(),
             "shard_map": jax.device_count()}
  for field in ("batch_size", "eval_batch_size"):
    if config[field] % devices[config.parallel]:
      raise ConfigError(f"config.{field}: {config[field]} is not divisible by the "
                        f"{devices[config.parallel]} devices of config.parallel={config.parallel!r}")
  if config.parallel == "pmap" and jax.process_count() > 1:
    raise ConfigError("config.parallel: use 'shard_map' for multi-process runs ('pmap' spans "
                      "the devices of one process here)")


def check_input_on_device(config) -> None:
  """`input_on_device` (crops cut on the device, `experiments.train.device_input`) takes what it
  reproduces bit for bit: 'crop_flip' or no augmentation, an in-memory split, the 'numpy'
  pipeline (grain's worker processes are for decoding, and the device decodes nothing)."""
  if not config.input_on_device:
    return
  if config.augment and config.augmentation != "crop_flip":
    raise ConfigError(f"config.input_on_device: cuts 'crop_flip' crops only, got "
                      f"augmentation={config.augmentation!r}")
  if config.input_pipeline != "numpy":
    raise ConfigError(f"config.input_on_device: draws the crops in the 'numpy' pipeline, got "
                      f"input_pipeline={config.input_pipeline!r}")
  if sources.is_lazy_source(config.dataset):
    raise ConfigError(f"config.input_on_device: copies the training split to the device, but "
                      f"{config.dataset!r} decodes its images on index (use an in-memory source: "
                      f"digits, mnist, cifar10_jpeg)")
