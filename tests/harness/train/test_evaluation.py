"""experiments.train.evaluation: the one-pass, compiled evaluation equals a float64 NumPy evaluation of the
same model on the whole split (per-class correct, per-class CE sums, NC1–NC4 and ρ), on one device
and data-parallel over 8 fake devices; the training loop logs means over the logging window."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from experiments.configs import digits_lt
from experiments.data import batches
from experiments.data import loading
from experiments.data import long_tail
from experiments.data import normalization
from experiments.methods import registry
from experiments import models
from experiments.train import evaluation
from experiments.train import loop
from experiments.train import runners
from experiments.train import steps
from experiments.train import train_state
from tests.reference import numpy_reweight as ref_rw


@functools.lru_cache(maxsize=None)
def setup(head):
  config = digits_lt.get_config()
  config.head = head
  train_split = loading.load_split("digits", "train")
  train_split = train_split.subset(long_tail.long_tail_indices(train_split.labels, 10, 10.0, 0))
  model = models.create_model("small_cnn", 10, head=head)
  lr = train_state.create_learning_rate_fn(config, 10)
  state = train_state.create_train_state(config, model, train_split.images.shape[1:], 10, lr,
                                         jax.random.key(3))
  # A few SGD steps, so that BatchNorm statistics and the head are not at their initial values.
  task = steps.Task(tuple(float(c) for c in train_split.class_counts), 10)
  runner = runners.make_runner("none", registry.make_loss_fn(config), task, lr)
  for batch in list(batches.train_batches(train_split, 64, seed=0, epoch=0, augment=False))[:3]:
    state, _ = runner.step(state, batch)
  return config, jax.device_get(state), train_split


def numpy_evaluation(state, split, head):
  """Everything in float64 NumPy from one forward pass over the whole split at once."""
  images = normalization.normalize(split.images, split.name)
  logits, features = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats},
                                    images, train=False)
  logits, features = np.asarray(logits, np.float64), np.asarray(features, np.float64)
  labels = split.labels
  correct = np.bincount(labels, weights=logits.argmax(1) == labels, minlength=10)
  counts = np.bincount(labels, minlength=10).astype(float)
  ce = logsumexp(logits, axis=1) - logits[np.arange(len(labels)), labels]
  loss_sums = np.bincount(labels, weights=ce, minlength=10)
  weights, bias = evaluation.classifier_weights(state.params, head)
  nc = ref_rw.nc_metrics(features, labels, np.asarray(weights, np.float64), 10)
  # NC4 with the bias the decision uses (the reference's classifier has none).
  means = np.stack([features[labels == c].mean(0) for c in range(10)])
  decision = features @ np.asarray(weights, np.float64).T + (0 if bias is None else np.asarray(bias))
  nearest = ((features[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
  nc4 = np.mean(decision.argmax(1) != nearest)
  class_loss = loss_sums / counts
  return correct, counts, loss_sums, nc, nc4, np.std(class_loss) / np.mean(class_loss)


@pytest.mark.parametrize("head, parallel, num_devices", [
    ("linear", "none", 1), ("cosine", "none", 1), ("linear", "pmap", 8), ("cosine", "shard_map", 8),
    ("linear", "jit", 8)])
def test_one_pass_evaluation_equals_numpy(head, parallel, num_devices):
  config, state, split = setup(head)
  model = models.create_model("small_cnn", 10, head=head,
                              axis_name=runners.axis_name(parallel))
  state = state.replace(apply_fn=model.apply)
  task = steps.Task(tuple(float(c) for c in split.class_counts), 10)
  runner = runners.make_runner(parallel, registry.make_loss_fn(config), task, lambda s: 0.0,
                               devices=jax.devices()[:num_devices])
  # 1,000-odd examples in batches of 128: the padded tail is masked.
  sums = evaluation.evaluate_split(runner, runner.place_state(state), split, 128, 10,
                                   neural_collapse=True, head_kind=head)
  correct, counts, loss_sums, nc, nc4, rho = numpy_evaluation(state, split, head)
  np.testing.assert_array_equal(sums.correct, correct)
  np.testing.assert_array_equal(sums.counts, counts)
  np.testing.assert_allclose(sums.loss_sums, loss_sums, rtol=1e-5)
  metrics = evaluation.neural_collapse_metrics(sums, head, state.params)
  for name in ("nc1", "nc2", "nc3"):
    np.testing.assert_allclose(metrics[name], nc[name], rtol=2e-3, err_msg=name)
  np.testing.assert_allclose(metrics["nc4"], nc4, atol=1.5 / len(split))  # ≤ 1 tie flipped
  np.testing.assert_allclose(metrics["rho"], rho, rtol=1e-5)
  class_loss, loss_rho = evaluation.training_class_loss(sums)
  np.testing.assert_allclose(class_loss, loss_sums / counts, rtol=1e-5)
  assert loss_rho == pytest.approx(rho, rel=1e-5)


def test_absent_class_has_nan_loss_and_accuracy_everywhere():
  config, state, split = setup("linear")
  keep = np.flatnonzero(split.labels != 4)
  runner = runners.make_runner("none", registry.make_loss_fn(config),
                               steps.Task((1.0,) * 10, 10), lambda s: 0.0)
  sums = evaluation.evaluate_split(runner, state, split.subset(keep), 128, 10)
  assert np.isnan(sums.class_loss()[4]) and np.isnan(sums.class_accuracy()[4])
  assert np.all(np.isfinite(np.delete(sums.class_loss(), 4)))
  class_loss, rho = evaluation.training_class_loss(sums)
  assert np.isnan(class_loss[4]) and np.isfinite(rho)


def test_shot_accuracy_is_the_group_mean_and_none_for_an_empty_group():
  """Many / Medium / Few of the trainer's summary (and the probes'): the mean accuracy over the
  group's classes with test examples; a group without such a class is None (JSON null)."""
  counts = np.array([500, 300, 150, 60, 30, 25])  # no class under 20: Few is empty
  accuracy = np.array([0.9, 0.8, 0.7, 0.6, np.nan, 0.4])  # class 4: no test example
  shots = evaluation.shot_accuracy(accuracy, long_tail.many_medium_few(counts))
  assert list(shots) == ["many", "medium", "few"]
  assert shots["many"] == pytest.approx(0.8, rel=1e-15)
  assert shots["medium"] == pytest.approx(0.5, rel=1e-15)  # class 4 left out, not a 0
  assert shots["few"] is None
  assert json.loads(json.dumps(shots))["few"] is None
  everything_absent = evaluation.shot_accuracy(np.full(6, np.nan), np.zeros(6, np.int32))
  assert everything_absent == {"many": None, "medium": None, "few": None}


def test_logged_training_metrics_are_window_means(tmp_path):
  """The record at step 6 with log_every_steps=3 is the mean of the per-step records 4–6 of the same
  run logged every step (the runs are deterministic)."""
  records = {}
  for every in (1, 3):
    config = digits_lt.get_config()
    config.loss = "inverse_reweight"
    config.reweight.start_epoch = 0
    config.batch_size = 32
    config.log_every_steps = every
    config.progress_bar = False
    config.nc_metrics = False
    workdir = tmp_path / f"every{every}"
    loop.train_and_evaluate(config, workdir, max_steps=6)
    records[every] = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    records[every, "class"] = [json.loads(line) for line in
                               (workdir / "class_history.jsonl").read_text().splitlines()]
  per_step, window = records[1], records[3]
  assert [r["step"] for r in window] == [3, 6]
  for key in ("loss", "train_accuracy", "learning_rate"):
    expected = np.mean([r[key] for r in per_step[3:6]])
    assert window[1][key] == pytest.approx(expected, rel=1e-5), key
  # Per class: the mean over the steps where the class was in the batch (NaN-free entries).
  steps_losses = np.array([r["class_loss"] for r in records[1, "class"][3:6]], np.float64)
  present = np.array([r["class_present"] for r in records[1, "class"][3:6]], bool)
  expected = np.array([steps_losses[present[:, k], k].mean() if present[:, k].any() else np.nan
                       for k in range(10)])
  np.testing.assert_allclose(records[3, "class"][1]["class_loss"], expected, rtol=1e-5)
