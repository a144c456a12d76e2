"""JTT's stage-1 model read back from its run: the error set of the training set (COMPARISONS spec,
'JTT'), from an eval-mode pass without augmentation over the training set exactly as stage 1
trained on it."""

from __future__ import annotations

import pathlib

import numpy as np

import reweight_jax
from experiments.train import checkpoints
from experiments.data.split import Split
from experiments.common.errors import ConfigError
from experiments.common.errors import DiagnoseError
from experiments.train import run_features


def error_set(stage1_workdir: str, config, train: Split) -> tuple[np.ndarray, int]:
  """(bool [N] E_i = 1[argmax_k z_ik ≠ y_i], the checkpoint step) of the stage-1 run's latest
  checkpoint over `train`.

  The stage-1 run must have trained on this training set: the fields that select it
  (`checkpoints.ENCODER_FIELDS` less the model, which may differ) must match, and its rebuilt
  training labels must equal `train.labels` position by position (the error set is indexed by them).
  """
  source = pathlib.Path(stage1_workdir).resolve()
  saved = source / "config.json"
  if not saved.is_file():
    raise ConfigError(f"config.jtt.stage1: {source} holds no config.json of a run")
  before = checkpoints.read_saved_config(saved)
  fields = [f for f in checkpoints.ENCODER_FIELDS if f != "model"]
  changed = [f for f in fields if before.get(f) != config.get(f)]
  if changed:
    raise ConfigError(f"config.jtt.stage1: {source} trained on another training set (fields "
                      f"{', '.join(changed)} differ)")
  try:
    stage1 = run_features.features_from_workdir(source, "train")
  except (FileNotFoundError, DiagnoseError) as error:
    raise ConfigError(f"config.jtt.stage1: {error}") from error
  if not np.array_equal(stage1.labels, train.labels):
    raise ConfigError(f"config.jtt.stage1: {source}'s training labels differ from this run's")
  errors = reweight_jax.jtt_error_set(stage1.logits.astype(np.float32), stage1.labels)
  return np.asarray(errors), stage1.step

def upsampled_epoch(config, train):
  """Each example of the stage-1 model's error set E repeated 1 + λ_up times (COMPARISONS, JTT)."""
  errors, step = error_set(config.jtt.stage1, config, train)
  # Each epoch permutes this list again (`data.train_batches`); its order here does not matter.
  sample = reweight_jax.jtt_upsampled_indices(errors, int(config.jtt.upweight), seed=config.seed)
  per_class = np.bincount(train.labels[errors], minlength=train.num_classes)
  return sample, {"jtt_stage1": str(pathlib.Path(config.jtt.stage1).resolve()),
                  "jtt_stage1_step": step, "jtt_error_set_size": int(errors.sum()),
                  "jtt_error_set_per_class": per_class.tolist(), "jtt_epoch_length": len(sample)}
