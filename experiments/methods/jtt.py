"""Just Train Twice (Liu et al., ICML 2021; COMPARISONS spec, 'JTT'): CE on a training set in which
the error set E of a stage-1 ERM run (its latest checkpoint, `jtt.stage1`) appears 1 + λ_up times
per epoch (`jtt.upweight`): the sampler reads the stage-1 run over this run's training set in an
eval-mode pass without augmentation, exactly as stage 1 trained on it."""

from __future__ import annotations

import pathlib

import ml_collections
import numpy as np

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.methods.ce import cross_entropy
from experiments.methods.ce import per_example_cross_entropy
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import Recipe

# The stage-1 run (its workdir; its latest checkpoint is the stage-1 model) and λ_up (each
# error-set example appears 1 + λ_up times per epoch).
TREE = ConfigTree(lambda: dict(stage1=ml_collections.config_dict.placeholder(str), upweight=20),
                  ranges=(("upweight", *NON_NEGATIVE),))


def check_jtt(config):
  if not config.jtt.stage1:
    raise ConfigError("config.jtt.stage1: the 'jtt' loss needs the workdir of its stage-1 ERM run")


def upsampled_sample(errors: np.ndarray, labels: np.ndarray, upweight: int, seed,
                     num_classes: int) -> tuple[np.ndarray, dict]:
  """(each example of the error set E, bool [N], repeated 1 + λ_up times and shuffled with `seed`
  (`reweight_jax.baselines.jtt_upsampled_indices`), the record of E: its size, per class of
  `labels` int [N], and the epoch's length N + λ_up·|E|). The trainer's sampler and the linear
  probe's JTT."""
  sample = reweight_jax.baselines.jtt_upsampled_indices(errors, int(upweight), seed=seed)
  per_class = np.bincount(labels[errors], minlength=num_classes)
  return sample, {"jtt_error_set_size": int(errors.sum()),
                  "jtt_error_set_per_class": per_class.tolist(), "jtt_epoch_length": len(sample)}


def upsampled_epoch(jtt, train, read_run):
  """Each example of the stage-1 model's error set E repeated 1 + λ_up times (COMPARISONS, JTT)."""
  stage1 = read_run(jtt.stage1, "config.jtt.stage1")
  errors = np.asarray(reweight_jax.baselines.jtt_error_set(stage1.logits.astype(np.float32),
                                                           stage1.labels))
  # Each epoch permutes this list again (`data.train_batches`); its order here does not matter.
  sample, record = upsampled_sample(errors, train.labels, jtt.upweight, jtt.seed,
                                    train.num_classes)
  return sample, {"jtt_stage1": str(pathlib.Path(jtt.stage1).resolve()),
                  "jtt_stage1_step": stage1.step, **record}


# The sampler shuffles the up-sampled list with the run's seed.
METHODS = (Method("jtt", cross_entropy, trees={"jtt": TREE}, reads=("jtt",), shared=("seed",),
                  check=check_jtt,
                  reads_mix=True, recipe=Recipe(sampler=upsampled_epoch),
                  per_example=per_example_cross_entropy),)
