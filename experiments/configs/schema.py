"""The config check, the one place a config is read against the harness: the shared fields'
ranges and choices (`RANGES`, `CHOICES`), the sub-trees of the methods a run trains (their
defaults, ranges and choices declared by each method's module in `experiments/methods/`), and the
run's config made from the config a run is given (`complete`) and checked (`validate`).

A config file imports `ml_collections` and the config it starts from alone (`default.py`, its
family's data block or the config it varies): the shared fields (`default.get_config`) and, for
the methods its runs train, the fields of their sub-trees it sets
(`config.ldam = ml_collections.ConfigDict(dict(drw_epoch=160))`). The run's config, the one
`config.json` records, is `complete(config)`: the shared fields, and the sub-tree of each method
`config.loss` trains (with the method it trains as before its start), its fields as set and the
others at the method's defaults; the sub-trees of other methods are left out.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import jax
import ml_collections
from absl import flags
# The parser and flag `config_flags.DEFINE_config_file` builds, to read the file's config first.
from ml_collections.config_flags import config_flags as config_flags_lib

from experiments import models
from experiments.common.errors import INF
from experiments.common.errors import ConfigError
from experiments.common.errors import Range
from experiments.common.errors import field_value
from experiments.configs import default
from experiments.data import augmentations
from experiments.data import input_pipeline
from experiments.data import long_tail
from experiments.data import sources
from experiments.methods import registry

PARALLEL = ("none", "jit", "pmap", "shard_map")
SCHEDULES = ("cosine", "step", "milelr")

RANGES = (
    ("num_epochs", (1, True), (INF, False)), ("batch_size", (1, True), (INF, False)),
    ("eval_batch_size", (1, True), (INF, False)), ("log_every_steps", (1, True), (INF, False)),
    ("checkpoint_every_steps", (1, True), (INF, False)),
    ("class_loss_every_epochs", (0, True), (INF, False)),
    ("test_every_epochs", (0, True), (INF, False)),
    ("keep_checkpoints", (1, True), (INF, False)), ("warmup_epochs", (0, True), (INF, False)),
    ("learning_rate", (0, False), (INF, False)), ("momentum", (0, True), (1, False)),
    ("weight_decay", (0, True), (INF, False)), ("cosine_scale", (0, False), (INF, False)),
    ("validation_fraction", (0, True), (1, False)),
    ("max_train_per_class", (0, True), (INF, False)),
    ("imbalance_factor", (1, True), (INF, False)), ("views", (1, True), (INF, False)),
    ("mixup_alpha", (0, True), (INF, False)), ("milelr_switch_epoch", (0, True), (INF, False)),
    ("data_workers", (0, True), (INF, False)), ("image_size", (1, True), (INF, False)),
    ("resize", (1, True), (INF, False)),
)
CHOICES = (("parallel", PARALLEL), ("schedule", SCHEDULES), ("head", models.HEADS),
           ("compute_dtype", models.COMPUTE_DTYPES),
           ("augmentation", augmentations.AUGMENTATIONS),
           ("lt_selection", long_tail.LT_SELECTIONS), ("input_pipeline", input_pipeline.PIPELINES))


# ------------------------------------------------------------------------------------------------
# The run's config
# ------------------------------------------------------------------------------------------------

def complete(config) -> ml_collections.ConfigDict:
  """The run's config (what its config.json records): the shared fields of `config` (those it
  leaves out at their defaults), `config.loss`, and the sub-trees the loss reads
  (`registry.method_trees`), each the method's defaults under the fields `config` sets
  (`registry.method_tree`); the sub-trees of other methods left out.
  `complete(complete(c)) == complete(c)`.

  Raises:
    ConfigError: an unknown loss, a field that is neither shared nor a method's sub-tree, a field
      a sub-tree does not have, or a value of another type, naming it.
  """
  registry.get(config.loss)  # an unknown loss is named first
  shared = default.get_config()
  unknown = [key for key in config if key not in shared and key not in registry.CONFIG_TREES]
  if unknown:
    raise ConfigError(f"config.{unknown[0]}: not a field of the config (the shared fields of "
                      f"experiments/configs/default.py, or a method's sub-tree)")
  out = ml_collections.ConfigDict()
  for key in _SHARED_ORDER:
    if key in config:
      try:
        shared[key] = config[key]
      except TypeError as error:
        raise ConfigError(f"config.{key}: {error}") from None
    out[key] = shared.get_ref(key) if key in _PLACEHOLDERS else shared[key]
    if key == "loss":
      for tree in registry.method_trees(config.loss):
        out[tree] = registry.method_tree(tree, config.get(tree))
  return out


# The shared fields in the order default.py writes them (data, model, loss, optimisation, ...;
# a ConfigDict iterates its keys sorted, its JSON keeps the order), the run's config.json's order.
_SHARED_ORDER = tuple(json.loads(default.get_config().to_json_best_effort()))
# Shared fields declared as placeholders (typed, None by default): kept as such in the run's
# config, so that a later assignment is type-checked as in the file.
_PLACEHOLDERS = tuple(key for key, value in default.get_config().items(
    preserve_field_references=True) if isinstance(value, ml_collections.FieldReference))


def deferred_starts(config) -> dict[str, int]:
  """The start epoch of every deferred method (`reweight.start_epoch`, `ldam.drw_epoch`,
  `ib.start_epoch`) as `config` sets it, or at the method's default where it does not."""
  starts = {}
  for field in sorted(registry.start_fields()):
    key, name = field.split(".")
    given = config.get(key)
    starts[field] = int(given[name] if given is not None and name in given
                        else registry.CONFIG_TREES[key].defaults()[name])
  return starts


class _ConfigFileWithMethodTrees(config_flags_lib.ConfigFileFlagParser):
  """A config file's config with every method's sub-tree (`registry.with_method_trees`), so that
  `--config.<tree>.<field>` overrides any method's field, type-checked against its default; the
  run keeps the sub-trees of its own methods (`complete`)."""

  def parse(self, path):
    config = super().parse(path)
    if not isinstance(config, ml_collections.ConfigDict):  # a file that cannot be read
      return config
    return registry.with_method_trees(config, registry.CONFIG_TREES)


def define_config_flag(name: str, default_file: str, help_string: str,
                       flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """`ml_collections.config_flags.DEFINE_config_file` whose config has every method's sub-tree
  (`_ConfigFileWithMethodTrees`): what the commands (`experiments.main`, `compare`) read."""
  flag = config_flags_lib._ConfigFlag(  # pylint: disable=protected-access
      parser=_ConfigFileWithMethodTrees(name=name), serializer=flags.ArgumentSerializer(),
      name=name, default=default_file, help_string=help_string, flag_values=flag_values)
  return flags.DEFINE_flag(flag, flag_values)


# ------------------------------------------------------------------------------------------------
# The check
# ------------------------------------------------------------------------------------------------

def validate(config) -> None:
  """Raises ConfigError (one line, naming the field) before anything is written: the run's config
  (`complete`), the shared fields' ranges and choices, the methods' sub-trees the config sets and
  the run reads, the method's own checks and its recipe's (`validate_method`)."""
  validate_method(config)
  config = complete(config)
  for field, choices in CHOICES:
    check_choice(config, field, choices)
  if config.model not in models.MODELS:
    raise ConfigError(f"config.model: unknown model {config.model!r}; expected one of "
                      f"{sorted(models.MODELS)}")
  check_ranges(config, RANGES)
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
  check_devices(config)


def validate_method(config) -> None:
  """The method's part of `validate`: the ranges and choices of the sub-trees its run reads and
  of every other one `config` sets (a value out of range is refused though this run does not read
  it, and leaves its config), the checks of the method (and of the one it trains as before its
  start), and mixup batches only for a method that takes them, single-view."""
  run = complete(config)
  for key in registry.CONFIG_TREES:
    if key not in run and key not in config:
      continue
    spec = registry.CONFIG_TREES[key]
    tree = {key: run[key] if key in run else registry.method_tree(key, config[key])}
    check_ranges(tree, [(f"{key}.{field}", low, high) for field, low, high in spec.ranges])
    for field, choices in spec.choices:
      check_choice(tree, f"{key}.{field}", choices)
  config = run
  for entry in registry.phases(config.loss):
    if entry.check is not None:
      entry.check(config)
  if config.mixup_alpha > 0 and not registry.takes_mixup(config.loss):
    raise ConfigError(f"config.mixup_alpha: the {config.loss!r} loss does not take mixup batches "
                      f"(entries that do: "
                      f"{[n for n in registry.REGISTRY if registry.takes_mixup(n)]})")
  if config.mixup_alpha > 0 and max(config.views, registry.get(config.loss).recipe.views) > 1:
    raise ConfigError("config.mixup_alpha: mixup batches are single-view (config.views = 1 and a "
                      "loss with one view)")


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


def check_devices(config) -> None:
  """Batch sizes divisible by the devices of `config.parallel`; 'pmap' within one process."""
  devices = {"none": 1, "jit": jax.device_count(), "pmap": jax.device_count(),
             "shard_map": jax.device_count()}
  for field in ("batch_size", "eval_batch_size"):
    if config[field] % devices[config.parallel]:
      raise ConfigError(f"config.{field}: {config[field]} is not divisible by the "
                        f"{devices[config.parallel]} devices of config.parallel={config.parallel!r}")
  if config.parallel == "pmap" and jax.process_count() > 1:
    raise ConfigError("config.parallel: use 'shard_map' for multi-process runs ('pmap' spans "
                      "the devices of one process here)")


def check_ranges(config, ranges: Sequence[Range]) -> None:
  """Raises ConfigError naming the first field outside its interval (None values are skipped)."""
  for field, low, high in ranges:
    value = field_value(config, field)
    if value is None:
      continue
    if not (low[0] <= value if low[1] else low[0] < value) or not (
        value <= high[0] if high[1] else value < high[0]):
      interval = f"{'[' if low[1] else '('}{low[0]}, {high[0]}{']' if high[1] else ')'}"
      raise ConfigError(f"config.{field}: expected a value in {interval}, got {value}")


def check_choice(config, field: str, choices: Sequence[str]) -> None:
  """Raises ConfigError when a string field is not one of `choices`."""
  value = field_value(config, field)
  if value not in choices:
    raise ConfigError(f"config.{field}: expected one of {tuple(choices)}, got {value!r}")
