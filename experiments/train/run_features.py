"""A run read back: restore a training workdir's latest checkpoint and run its model over a split
(inference mode, no augmentation), for the diagnosis and for a method whose sampler reads another
run over this run's training set (`read_run`: JTT's stage-1 model)."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from experiments.common.errors import ConfigError
from experiments.common.errors import DiagnoseError
from experiments.common.errors import DataError
from experiments.data import batches
from experiments.data import loading
from experiments.train import checkpoints as checkpoints_lib
from experiments.train import lineage
from experiments.train import train_state
from experiments.train.evaluation import classifier_weights


@dataclasses.dataclass
class SplitFeatures:
  """A split run through a model: features [N, d], labels [N], logits [N, K], the classifier."""
  features: np.ndarray
  labels: np.ndarray
  logits: np.ndarray
  classifier: np.ndarray
  bias: np.ndarray | None
  class_names: tuple[str, ...]
  num_classes: int
  step: int
  config: Any


def features_from_workdir(workdir: str | pathlib.Path, split: str | Sequence[str] = "train"):
  """Restores the latest checkpoint of a training workdir and runs its model over `split`.

  Every use of the trainer's code is in this function (its helpers are moving to new modules):
  `load_data` rebuilds the splits exactly as trained on (long tail, validation hold-out),
  `models.create_model` the model, `classifier_weights` the decision's W and b. The checkpoint is
  restored without a state template — only its `params` and `batch_stats` are used, and they are
  checked against the model's shapes — so the layout of the rest of the train state (optimizer,
  per-class loss state) does not matter; both the trainer's composite steps ('state' + digest) and
  older single-item steps are read. The digest is not checked (the trainer checks it on resume). The
  manager is read-only: it creates nothing and leaves a still-running job's files alone.

  Args:
    workdir: a run's folder (config.json and checkpoints/; summary.json not needed).
    split: 'train' (the long-tailed training set, as trained on), 'validation' or 'test'; or a
      sequence of them (one restore).

  Returns:
    A `SplitFeatures` (a dict name → `SplitFeatures` for a sequence), in inference mode.

  Raises:
    FileNotFoundError: no workdir, config.json or checkpoint.
    DiagnoseError: an unknown split, data that cannot be loaded, a checkpoint that does not fit.
  """

  workdir = pathlib.Path(workdir).resolve()  # orbax needs absolute paths
  splits = [split] if isinstance(split, str) else list(split)
  for name in splits:
    if name not in ("train", "validation", "test"):
      raise DiagnoseError(f"split: expected 'train', 'validation' or 'test', got {name!r}")
  if not workdir.is_dir():
    raise FileNotFoundError(f"--workdir {workdir}: no such directory")
  config_path = workdir / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(f"{config_path}: not found (not a training workdir?)")
  config = ml_collections.ConfigDict(lineage.read_saved_config(config_path))

  try:
    train, validation, test = loading.load_data(config)
  except DataError as error:
    raise DiagnoseError(f"the run's data set cannot be loaded: {error}") from error
  if "validation" in splits and validation is None:
    raise DiagnoseError("split: this run has no validation split (config.validation_fraction = 0)")
  num_classes = train.num_classes
  model = train_state.build_model(config, num_classes)
  try:
    step, variables = checkpoints_lib.read_variables(workdir, model, train.images.shape[1:])
  except checkpoints_lib.CheckpointError as error:
    raise DiagnoseError(str(error)) from error
  classifier, bias = classifier_weights(variables["params"], config.head)
  classifier = np.asarray(classifier, np.float64)
  bias = None if bias is None else np.asarray(bias, np.float64)

  # (logits, features) in inference mode (running BatchNorm statistics); the variables are an
  # argument, not constants folded into the compiled program.
  forward = jax.jit(functools.partial(model.apply, train=False))

  results = {}
  for name in splits:
    data = {"train": train, "validation": validation, "test": test}[name]
    features, logits, labels = [], [], []
    for batch in batches.eval_batches(data, config.eval_batch_size):
      batch_logits, batch_features = forward(variables, batch["image"])
      mask = batch["mask"]
      features.append(np.asarray(batch_features)[mask])
      logits.append(np.asarray(batch_logits)[mask])
      labels.append(np.asarray(batch["label"])[mask])
    results[name] = SplitFeatures(
        features=np.concatenate(features).astype(np.float64),
        labels=np.concatenate(labels).astype(np.int64),
        logits=np.concatenate(logits).astype(np.float64), classifier=classifier, bias=bias,
        class_names=tuple(train.class_names), num_classes=num_classes, step=int(step),
        config=config)
  return results[split] if isinstance(split, str) else results


def read_run(config, train):
  """read(workdir, field) → the `SplitFeatures` of the run in `workdir` over this run's training
  set `train`, the reader a method's sampler gets (`Recipe.sampler`). The other run must have
  trained on this training set: the fields that select it (`lineage.TRAINING_SET_FIELDS`; the
  model may differ) must match, and its rebuilt training labels must equal `train.labels`
  position by position; otherwise a ConfigError names `field`."""
  def read(workdir, field):
    source = pathlib.Path(workdir).resolve()
    lineage.check_same_config(source, config, label=field, fields=lineage.TRAINING_SET_FIELDS,
                              why=f"the run of {field} must have trained on this training set")
    try:
      features = features_from_workdir(source, "train")
    except (FileNotFoundError, DiagnoseError) as error:
      raise ConfigError(f"{field}: {error}") from error
    if not np.array_equal(features.labels, train.labels):
      raise ConfigError(f"{field}: {source}'s training labels differ from this run's")
    return features
  return read
