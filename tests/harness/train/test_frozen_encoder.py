"""The linear stage of a two-stage method (config.frozen_encoder_from): after SupCon pre-training
(supcon.ce=False), a 'ce' run loads every parameter but the head and the BatchNorm statistics from
the pre-trained run, leaves them untouched bit for bit (inference mode, zero updates, no decay) and
trains a fresh head; a source with another model or training set is refused."""

import itertools

import chex
import jax
import numpy as np
import pytest

from experiments.common.errors import ConfigError
from experiments.data import batches
from experiments.data import loading
from experiments.data import long_tail
from experiments.methods import registry
from experiments.train import checkpoints
from experiments.train import loop
from experiments.train import runners
from experiments.train import steps
from experiments.train import train_state
from tests.harness.methods.test_jtt import tiny_config  # digits-LT, batch 32, 2 epochs

PRETRAIN_STEPS = 3
LINEAR_STEPS = 4
IMAGE_SHAPE = (8, 8, 1)


def pretrain_config():
  config = tiny_config("supcon")  # with its loss's sub-tree
  config.supcon.ce = False
  return config


def linear_config(source, **overrides):
  return tiny_config("ce", frozen_encoder_from=str(source), **overrides)


def variables_of(workdir, config):
  return checkpoints.read_variables(workdir, train_state.build_model(config, 10), IMAGE_SHAPE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("frozen")
  pretrained = root / "supcon"
  loop.train_and_evaluate(pretrain_config(), pretrained, max_steps=PRETRAIN_STEPS)
  linear = root / "linear"
  summary = loop.train_and_evaluate(linear_config(pretrained), linear, max_steps=LINEAR_STEPS)
  return pretrained, linear, summary


def test_the_pretrained_run_trained_its_encoder(runs):
  """Sanity of the source: SupCon pre-training moved the encoder and BatchNorm statistics away from
  their initial values (so 'equal to the source' below is not 'equal to the init')."""
  pretrained, _, _ = runs
  config = pretrain_config()
  step, variables = variables_of(pretrained, config)
  assert step == PRETRAIN_STEPS
  init = train_state.build_model(config, 10).init(
      jax.random.key(0), np.zeros((1, *IMAGE_SHAPE), np.float32), train=False)
  assert "projection" in variables["params"]
  for key in variables["params"]:
    if key not in ("head", "projection"):
      assert any(not np.array_equal(a, b) for a, b in zip(
          jax.tree.leaves(variables["params"][key]), jax.tree.leaves(init["params"][key]))), key
  assert any(not np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(variables["batch_stats"]), jax.tree.leaves(init["batch_stats"])))


def test_linear_stage_keeps_the_encoder_and_batch_stats_bit_for_bit(runs):
  """Every parameter except params['head'], and every batch_stats leaf, of the linear stage's final
  checkpoint equals the pre-trained run's (the projection head is not part of the linear model)."""
  pretrained, linear, _ = runs
  _, source = variables_of(pretrained, pretrain_config())
  step, final = variables_of(linear, linear_config(pretrained))
  assert step == LINEAR_STEPS
  encoder_keys = set(final["params"]) - {"head"}
  assert encoder_keys and encoder_keys <= set(source["params"])
  for key in sorted(encoder_keys):
    chex.assert_trees_all_equal(final["params"][key], source["params"][key])
  assert jax.tree.leaves(final["batch_stats"])
  chex.assert_trees_all_equal(final["batch_stats"], source["batch_stats"])


def test_linear_stage_trains_a_fresh_head(runs):
  """The head starts from this run's own initialisation (not the source's head) and training moves
  it: the final head differs from the initial one in every leaf."""
  pretrained, linear, _ = runs
  config = linear_config(pretrained)
  model = train_state.build_model(config, 10)
  initial = train_state.create_train_state(config, model, IMAGE_SHAPE, 10, lambda step: 0.0,
                                           jax.random.key(config.seed)).params["head"]
  _, final = variables_of(linear, config)
  _, source = variables_of(pretrained, pretrain_config())
  for name in initial:
    assert not np.array_equal(final["params"]["head"][name], initial[name]), name
    assert np.all(np.isfinite(final["params"]["head"][name]))
  # The source's head (untrained by SupCon alone, only decayed) is not where the linear stage began.
  assert not np.array_equal(source["params"]["head"]["kernel"], initial["kernel"])


def test_linear_stage_summary_records_its_encoder(runs):
  pretrained, linear, summary = runs
  assert summary["frozen_encoder_from"] == str(pretrained.resolve())
  assert summary["frozen_encoder_step"] == PRETRAIN_STEPS
  assert summary["frozen_encoder_loss"] == "supcon"
  assert summary["steps"] == LINEAR_STEPS
  saved = (linear / "summary.json").read_text()
  assert '"frozen_encoder_step"' in saved and '"frozen_encoder_loss": "supcon"' in saved


def test_linear_stage_steps_do_not_update_encoder_or_batch_stats(runs):
  """Train steps of the linear stage's state (train mode, augmented batches) from the loaded
  encoder: the head is the template's fresh one, the encoder parameters and BatchNorm statistics
  come back unchanged bit for bit, the head moves."""
  pretrained, _, _ = runs
  config = linear_config(pretrained)
  split = loading.load_split("digits", "train")
  split = split.subset(long_tail.long_tail_indices(split.labels, 10, 10.0, 0))
  steps_per_epoch = batches.steps_per_epoch(split, config.batch_size)
  lr_fn = train_state.create_learning_rate_fn(config, steps_per_epoch)
  model = train_state.build_model(config, 10)
  template = train_state.create_train_state(config, model, IMAGE_SHAPE, 10, lr_fn,
                                            jax.random.key(0), train_labels=split.labels)
  state, _ = checkpoints.load_frozen_encoder(config, template, IMAGE_SHAPE)
  chex.assert_trees_all_equal(state.params["head"], template.params["head"])  # fresh head
  task = steps.Task(tuple(float(c) for c in split.class_counts), steps_per_epoch)
  runner = runners.make_runner("none", registry.make_loss_fn(config), task, lr_fn)
  # Two steps: the optimizer's own count sets the learning rate, 0 at the first warm-up step.
  after = runner.place_state(state)
  for batch in itertools.islice(batches.train_batches(split, config.batch_size, seed=0, epoch=0,
                                                      augment=True), 2):
    after, metrics = runner.step(after, runner.place_batch(batch))
  after = runner.to_host(after)
  assert float(runner.to_host(metrics)["learning_rate"]) > 0
  for key in state.params:
    if key != "head":
      chex.assert_trees_all_equal(after.params[key], state.params[key])
  chex.assert_trees_all_equal(after.batch_stats, state.batch_stats)
  assert not np.array_equal(after.params["head"]["kernel"], state.params["head"]["kernel"])


@pytest.mark.parametrize("overrides, field", [
    ({"seed": 1}, "seed"),
    ({"imbalance_factor": 5.0}, "imbalance_factor"),
])
def test_linear_stage_refuses_a_source_on_another_training_set(runs, tmp_path, overrides, field):
  """Through the trainer: refused, naming the field, before any checkpoint is written."""
  pretrained, _, _ = runs
  config = linear_config(pretrained, **overrides)
  with pytest.raises(ConfigError,
                     match=rf"config\.frozen_encoder_from: .* config \(fields {field} \("):
    loop.train_and_evaluate(config, tmp_path / "run")
  checkpoint_dir = tmp_path / "run" / "checkpoints"
  assert not checkpoint_dir.exists() or not any(checkpoint_dir.iterdir())


def test_linear_stage_refuses_a_source_with_another_model(runs):
  """A linear stage on resnet32 from the small_cnn source is refused, naming the model. Called on
  checkpoints.load_frozen_encoder directly (the trainer calls it the same way): building and
  initialising resnet32 eagerly for the trainer's template takes ~12 s on 2 cores; the check reads
  only the config and the head's width from the template."""
  pretrained, _, _ = runs
  source_config = linear_config(pretrained)
  template = train_state.create_train_state(
      source_config, train_state.build_model(source_config, 10), IMAGE_SHAPE, 10,
      lambda step: 0.0, jax.random.key(0))
  config = linear_config(pretrained, model="resnet32", seed=1)
  with pytest.raises(ConfigError,
                     match=r"config\.frozen_encoder_from: .* different config \(fields model "
                           r"\('small_cnn' there, 'resnet32' here\), seed \(0 there, 1 here\)\);"):
    checkpoints.load_frozen_encoder(config, template, IMAGE_SHAPE)
  config = linear_config(pretrained, model="resnet32")
  with pytest.raises(ConfigError, match=r"\(fields model \([^)]*\)\); the encoder's run must"):
    checkpoints.load_frozen_encoder(config, template, IMAGE_SHAPE)


def test_linear_stage_refuses_a_source_without_a_checkpoint(tmp_path):
  with pytest.raises(ConfigError, match=r"config\.frozen_encoder_from: .* holds no config.json"):
    loop.train_and_evaluate(linear_config(tmp_path / "nothing"), tmp_path / "run")
