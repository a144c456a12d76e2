"""JTT end to end (experiments/methods/jtt.py, the 'jtt' method): the error set of a finished stage-1 ERM run,
recomputed here from its logits with NumPy, is what the 'jtt' run up-samples (summary counts, the
sampler's per-position counts, the longer epoch); and the configs JTT refuses."""

import json

import ml_collections
import numpy as np
import pytest

from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from experiments.data import batches
from experiments.data import loading
from experiments.data import long_tail
from experiments.configs import schema
from experiments.methods import registry
from experiments.train import loop
from experiments.train import recipes
from experiments.train import run_features

UPWEIGHT = 3
BATCH = 32
JTT_STEPS = 4


def tiny_config(loss, **overrides):
  config = digits_lt.get_config()
  config.loss = loss
  config = registry.with_method_trees(config)  # the loss's sub-trees, to set their fields
  config.batch_size = BATCH
  config.num_epochs = 2  # warmup_epochs is 2
  config.progress_bar = False
  config.nc_metrics = False
  config.log_every_steps = 100
  for field, value in overrides.items():
    config[field] = value
  return config


def digits_train():
  """The digits-LT training set as the configs above select it, rebuilt here (IF 10, seed 0)."""
  split = loading.load_split("digits", "train")
  return split.subset(long_tail.long_tail_indices(split.labels, 10, 10.0, 0))


def jtt_config(stage1, **overrides):
  config = tiny_config("jtt", **overrides)
  config.jtt.stage1 = str(stage1)
  config.jtt.upweight = UPWEIGHT
  return config


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
  """A finished 2-epoch CE run and its error set, computed here: argmax of its eval-mode training
  logits (read with diagnose) against the labels of the training set rebuilt in this file."""
  workdir = tmp_path_factory.mktemp("jtt") / "stage1"
  loop.train_and_evaluate(tiny_config("ce"), workdir)
  train_split = digits_train()
  features = run_features.features_from_workdir(workdir, "train")
  np.testing.assert_array_equal(features.labels, train_split.labels)
  logits = np.asarray(features.logits)
  assert logits.shape == (len(train_split), 10)
  errors = np.argmax(logits, axis=1) != train_split.labels
  return workdir, train_split, errors


def test_jtt_upsamples_the_stage1_error_set(stage1, tmp_path):
  """The 'jtt' run's summary records this error set (size, per class, epoch length N + λ_up·|E|),
  its epochs are (N + λ_up·|E|) // B steps long, and the sampler returns each position exactly
  1 + λ_up·1[i ∈ E] times."""
  workdir, train_split, errors = stage1
  n, size = len(train_split), int(errors.sum())
  assert 0 < size < n  # a useful check: neither no error nor every example
  config = jtt_config(workdir)
  summary = loop.train_and_evaluate(config, tmp_path / "jtt", max_steps=JTT_STEPS)
  assert summary["jtt_stage1"] == str(workdir)
  assert summary["jtt_error_set_size"] == size
  assert summary["jtt_error_set_per_class"] == np.bincount(train_split.labels[errors],
                                                           minlength=10).tolist()
  assert summary["jtt_epoch_length"] == n + UPWEIGHT * size
  steps_per_epoch = (n + UPWEIGHT * size) // BATCH
  assert steps_per_epoch > n // BATCH
  assert summary["steps"] == JTT_STEPS
  assert summary["epochs"] == pytest.approx(JTT_STEPS / steps_per_epoch)
  saved = json.loads((tmp_path / "jtt" / "summary.json").read_text())
  assert saved["jtt_error_set_size"] == size and saved["jtt_epoch_length"] == n + UPWEIGHT * size

  sample, record = recipes.of(config).sampler(train_split, run_features.read_run(config, train_split))
  assert record["jtt_error_set_size"] == size
  np.testing.assert_array_equal(np.bincount(sample, minlength=n), 1 + UPWEIGHT * errors)
  assert len(sample) == n + UPWEIGHT * size
  assert batches.steps_per_epoch(train_split, BATCH, sample=sample) == steps_per_epoch

  # The derivation is kept in the workdir; a resume after the stage-1 run changed is refused (its
  # error set, hence the training set, would change mid-run). Here: the recorded step differs.
  record_path = tmp_path / "jtt" / "sampler.json"
  recorded = json.loads(record_path.read_text())
  assert recorded["jtt_stage1_step"] == summary["jtt_stage1_step"] > 0
  assert recorded["jtt_error_set_size"] == size
  record_path.write_text(json.dumps({**recorded, "jtt_stage1_step": 1}))
  with pytest.raises(ConfigError,
                     match=r"from a different run \(.*: fields jtt_stage1_step \(1 there, "):
    loop.train_and_evaluate(config, tmp_path / "jtt", max_steps=JTT_STEPS + 1)


def test_jtt_with_upweight_0_is_one_permutation_of_the_training_set(stage1):
  """λ_up = 0: every position once (the epoch is the ERM epoch)."""
  workdir, train_split, errors = stage1
  config = jtt_config(workdir)
  config.jtt.upweight = 0
  sample, record = recipes.of(config).sampler(train_split, run_features.read_run(config, train_split))
  np.testing.assert_array_equal(np.sort(sample), np.arange(len(train_split)))
  assert record["jtt_error_set_size"] == int(errors.sum())
  assert record["jtt_epoch_length"] == len(train_split)


def test_jtt_refuses_a_config_without_its_stage1_run(tmp_path):
  config = tiny_config("jtt")
  with pytest.raises(ConfigError, match="needs the workdir of its stage-1 ERM run"):
    loop.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_jtt_refuses_a_non_integer_upweight(stage1, tmp_path):
  """λ_up counts repeats: a sub-tree set whole (as from a JSON config) is typed by the method's
  defaults, so a float for it (2.5, or 3.0) is refused naming the field; an int is taken."""
  workdir, _, _ = stage1
  config = tiny_config("jtt")
  for upweight in (2.5, 3.0):
    config.jtt = ml_collections.ConfigDict({"stage1": str(workdir), "upweight": upweight})
    with pytest.raises(ConfigError, match=r"config\.jtt\.upweight: .*cannot be casted"):
      loop.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()
  config.jtt = ml_collections.ConfigDict({"stage1": str(workdir), "upweight": 3})
  schema.validate_method(config)


@pytest.mark.parametrize("field, value", [
    ("seed", 1), ("imbalance_factor", 5.0), ("max_train_per_class", 100),
    ("validation_fraction", 0.2), ("dataset", "mnist")])
def test_jtt_refuses_a_stage1_run_on_another_training_set(stage1, tmp_path, field, value):
  """A stage-1 run whose training set is selected otherwise is refused, naming the field. (The
  refusal comes from the sampler, so mnist, which needs data_dir, is checked there directly.)"""
  workdir, train_split, _ = stage1
  config = jtt_config(workdir, **{field: value})
  with pytest.raises(ConfigError, match=rf"config\.jtt\.stage1: .* config \(fields {field} \("):
    if field == "dataset":
      recipes.of(config).sampler(train_split, run_features.read_run(config, train_split))
    else:
      loop.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_jtt_refuses_a_stage1_workdir_that_is_not_a_run(tmp_path):
  config = jtt_config(tmp_path / "nothing")
  with pytest.raises(ConfigError, match="holds no config.json of a run"):
    loop.train_and_evaluate(config, tmp_path / "run")
