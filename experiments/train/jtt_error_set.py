"""JTT's stage-1 model read back from its run: the error set of the training set (COMPARISONS spec,
'JTT'), from an eval-mode pass without augmentation over the training set exactly as stage 1
trained on it."""

from __future__ import annotations

import pathlib

import numpy as np

import reweight_jax
from experiments.data.split import Split
from experiments.common.errors import ConfigError
from experiments.common.errors import DiagnoseError
from experiments.train import lineage
from experiments.train import run_features


def error_set(stage1_workdir: str, config, train: Split) -> tuple[np.ndarray, int]:
  """(bool [N] E_i = 1[argmax_k z_ik ≠ y_i], the checkpoint step) of the stage-1 run's latest
  checkpoint over `train`.

  The stage-1 run must have trained on this training set: the fields that select it
  (`lineage.TRAINING_SET_FIELDS`; the model may differ) must match, and its rebuilt
  training labels must equal `train.labels` position by position (the error set is indexed by them).
  """
  source = pathlib.Path(stage1_workdir).resolve()
  lineage.check_same_config(source, config, label="config.jtt.stage1",
                            fields=lineage.TRAINING_SET_FIELDS,
                            why="the stage-1 run must have trained on this training set")
  try:
    stage1 = run_features.features_from_workdir(source, "train")
  except (FileNotFoundError, DiagnoseError) as error:
    raise ConfigError(f"config.jtt.stage1: {error}") from error
  if not np.array_equal(stage1.labels, train.labels):
    raise ConfigError(f"config.jtt.stage1: {source}'s training labels differ from this run's")
  errors = reweight_jax.baselines.jtt_error_set(stage1.logits.astype(np.float32), stage1.labels)
  return np.asarray(errors), stage1.step


def upsampled_sample(errors: np.ndarray, labels: np.ndarray, upweight: int, seed,
                     num_classes: int) -> tuple[np.ndarray, dict]:
  """(each example of the error set E, bool [N], repeated 1 + λ_up times and shuffled with `seed`
  (`reweight_jax.baselines.jtt_upsampled_indices`), the record of E: its size, per class of `labels` int [N],
  and the epoch's length N + λ_up·|E|). The trainer's sampler and the linear probe's JTT."""
  sample = reweight_jax.baselines.jtt_upsampled_indices(errors, int(upweight), seed=seed)
  per_class = np.bincount(labels[errors], minlength=num_classes)
  return sample, {"jtt_error_set_size": int(errors.sum()),
                  "jtt_error_set_per_class": per_class.tolist(), "jtt_epoch_length": len(sample)}


def upsampled_epoch(config, train):
  """Each example of the stage-1 model's error set E repeated 1 + λ_up times (COMPARISONS, JTT)."""
  errors, step = error_set(config.jtt.stage1, config, train)
  # Each epoch permutes this list again (`data.train_batches`); its order here does not matter.
  sample, record = upsampled_sample(errors, train.labels, config.jtt.upweight, config.seed,
                                    train.num_classes)
  return sample, {"jtt_stage1": str(pathlib.Path(config.jtt.stage1).resolve()),
                  "jtt_stage1_step": step, **record}
