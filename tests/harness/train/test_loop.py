"""End-to-end tests of the trainer: every loss under jit and pmap, a full run, resume after SIGKILL,
and one-line errors for bad configs or data."""

import copy
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import chex
import jax
import ml_collections
import numpy as np
import pytest

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from experiments.data import batches as batches_lib
from experiments.data import loading
from experiments.data import long_tail
from experiments.methods import registry
from experiments import models
from experiments.train import loop
from experiments.methods import glmc
from experiments.train import recipes
from experiments.train import runners
from experiments.train import steps
from experiments.train import train_state
from tests import checkpoints

REPO = pathlib.Path(__file__).resolve().parents[3]
NUM_DEVICES = 8


def tiny_config(loss):
  config = digits_lt.get_config()
  config.loss = loss
  config = registry.with_method_trees(config)  # the loss's sub-trees, to set their fields
  config.batch_size = 32
  config.num_epochs = 4
  config.reweight.start_epoch = 0
  config.ldam.drw_epoch = 0
  config.ib.start_epoch = 0
  config.progress_bar = False
  if loss.startswith("etf_dr"):
    config.head = "etf"  # the entry's own check (the trainer validates; run_steps does not)
  return config


@functools.lru_cache(maxsize=None)
def digits_train():
  split = loading.load_split("digits", "train")
  return split.subset(long_tail.long_tail_indices(split.labels, 10, 10.0, 0))


def run_steps(config, num_steps, modes):
  """`num_steps` steps for each (parallel, num_devices) in `modes`; returns host states and metrics."""
  train_split = digits_train()
  steps_per_epoch = batches_lib.steps_per_epoch(train_split, config.batch_size)
  recipe = recipes.of(config)
  task = steps.Task(tuple(float(c) for c in train_split.class_counts), steps_per_epoch,
                    mix=recipe.mix, indices=recipe.indices)
  lr_fn = train_state.create_learning_rate_fn(config, steps_per_epoch)
  batches = list(batches_lib.train_batches(
      train_split, config.batch_size, seed=0, epoch=0, augment=False, views=recipe.views,
      pair=None if recipe.pair is None else recipe.pair(train_split)))[:num_steps]
  results = {}
  for parallel, num_devices in modes:
    config = copy.deepcopy(config)
    config.parallel = parallel
    model = train_state.build_model(config, 10,
                                    axis_name=runners.axis_name(parallel))
    state = train_state.create_train_state(config, model, train_split.images.shape[1:], 10, lr_fn,
                                           jax.random.key(0), train_labels=train_split.labels)
    runner = runners.make_runner(parallel, registry.make_loss_fn(config), task, lr_fn,
                                 devices=jax.devices()[:num_devices])
    state = runner.place_state(state)
    for batch in batches:
      state, metrics = runner.step(state, runner.place_batch(batch))
    results[parallel, num_devices] = (runner.to_host(state), runner.to_host(metrics))
  return results


def assert_same_training(result, reference):
  """Equal up to float32 reduction order: sums over 1..8 devices are added in another order, which
  changes the last bits; over 3 SGD steps this stays within rtol 1e-4 (measured max ~1e-6)."""
  (state, metrics), (state_1, metrics_1) = result, reference
  assert int(state.step) == int(state_1.step)
  np.testing.assert_allclose(metrics["loss"], metrics_1["loss"], rtol=1e-5)
  chex.assert_trees_all_close(state.params, state_1.params, rtol=1e-4, atol=1e-5)
  chex.assert_trees_all_close(state.batch_stats, state_1.batch_stats, rtol=1e-4, atol=1e-5)
  if "class_stats" in state.loss_state:
    chex.assert_trees_all_close(state.loss_state["class_stats"], state_1.loss_state["class_stats"],
                                rtol=1e-4, atol=1e-6)
  if "reweight" in state.loss_state:
    chex.assert_trees_all_equal(state.loss_state["reweight"], state_1.loss_state["reweight"])
  if "lff" in state.loss_state:  # LfF's EMAs at the global batch's positions, on every device
    chex.assert_trees_all_equal(state.loss_state["lff"].seen, state_1.loss_state["lff"].seen)
    chex.assert_trees_all_close(state.loss_state["lff"], state_1.loss_state["lff"], rtol=1e-5,
                                atol=1e-6)


# CE and the two methods' combination in the default run; the other registry entries are slow here
# (≈ 15 s each) — their numerics, before and after their start, are in tests/harness/methods/test_registry.py and their
# batch split over 2/4/8 devices in the property tests.
# CE in the default run (mr2+inverse_reweight moved to the slow run by tests/conftest.py's
# MOVED_TO_SLOW); the rest slow.
DEFAULT_LOSSES = ("ce", "mr2+inverse_reweight")


@pytest.mark.parametrize("loss", [
    loss if loss in DEFAULT_LOSSES else pytest.param(loss, marks=pytest.mark.slow)
    for loss in registry.REGISTRY])
def test_every_loss_trains_under_jit_pmap_and_shard_map_with_the_same_result(loss):
  assert jax.local_device_count() == NUM_DEVICES
  modes = [("none", 1), ("jit", NUM_DEVICES), ("pmap", NUM_DEVICES), ("shard_map", NUM_DEVICES)]
  results = run_steps(tiny_config(loss), num_steps=2, modes=modes)
  assert all(np.isfinite(metrics["loss"]) for _, metrics in results.values())
  for mode in modes[1:]:
    assert_same_training(results[mode], results["none", 1])
  state = results["none", 1][0]
  if "mr2" in loss:
    assert bool(np.all(state.loss_state["class_stats"].seen))
  if "inverse_reweight" in loss:
    assert float(np.sum(state.loss_state["reweight"].batch_counts)) > 0


def test_jit_and_shard_map_runners_use_todays_defaults():
  """'shard_map' runs on `jax.make_mesh`'s default axis types (Explicit in JAX 0.10) with its
  default check_vma=True (the runner passes neither); the model and loss see no axis under 'jit'."""
  import inspect
  train_split = digits_train()
  task = steps.Task(tuple(float(c) for c in train_split.class_counts), 1)
  layout = runners._MeshLayout(jax.devices())
  assert layout.mesh.axis_types == jax.make_mesh((NUM_DEVICES,), (runners.AXIS,)).axis_types
  assert "check_vma" not in inspect.getsource(runners.make_runner)
  assert runners.axis_name("jit") is None and runners.axis_name("none") is None
  assert runners.axis_name("shard_map") == runners.axis_name("pmap") == runners.AXIS
  with pytest.raises(ValueError, match="parallel"):
    runners.make_runner("auto", None, task, None)


def test_two_view_entry_over_8_devices_equals_one_device():
  """SupCon's path through the step (two views flattened view-major, the projection head's output
  read from the model wrapper, positives over the global batch) under shard_map on 8 devices equals
  one device: parameters (encoder, head, projection), BatchNorm statistics and the loss. LfF's
  (dataset indices, biased twin) and JTT's run in the slow parametrisation above."""
  config = tiny_config("supcon")
  modes = [("none", 1), ("jit", NUM_DEVICES), ("shard_map", NUM_DEVICES)]
  results = run_steps(config, num_steps=2, modes=modes)
  for mode in modes[1:]:
    assert_same_training(results[mode], results["none", 1])
  state = results["none", 1][0]
  assert "projection" in state.params and "head" in state.params
  assert np.isfinite(results["none", 1][1]["supcon_loss"])


@pytest.mark.parametrize("loss", [
    pytest.param("mr2", marks=pytest.mark.slow),
    pytest.param("inverse_reweight", marks=pytest.mark.slow),
    # both methods at once; ≈ 110 s on 2 cores, so slow too: the default run keeps the 8-device
    # pmap / shard_map = one device check of every loss (test_every_loss_trains_under_...)
    pytest.param("mr2+inverse_reweight", marks=pytest.mark.slow),
])
def test_1_2_4_8_devices_pmap_and_shard_map_equal_one_device(loss):
  modes = [("none", 1)] + [(p, n) for p in ("jit", "pmap", "shard_map") for n in (1, 2, 4, 8)]
  results = run_steps(tiny_config(loss), num_steps=3, modes=modes)
  for mode in modes[1:]:
    assert_same_training(results[mode], results["none", 1])


def _fairdro_one_epoch(tmp_path):
  from tests.reference import numpy_fairdro as ref_fairdro
  config = tiny_config("fairdro")
  config.fairdro.rho = 0.3
  steps_per_epoch = batches_lib.steps_per_epoch(digits_train(), config.batch_size)
  summary = loop.train_and_evaluate(config, tmp_path / "one", max_steps=steps_per_epoch)
  class_loss = np.asarray(summary["train_class_loss"], np.float64)
  q_star = ref_fairdro.best_response(class_loss, 0.3, present=np.isfinite(class_loss))
  np.testing.assert_allclose(summary["fairdro_q"], q_star, rtol=2e-4, atol=2e-5)
  assert np.std(summary["fairdro_q"]) > 1e-3  # not the uniform start
  return config, steps_per_epoch, summary


def test_fairdro_q_is_the_best_response_to_the_training_pass_after_an_epoch(tmp_path):
  """The trainer runs the epoch-end hook: after one epoch (step size 1) q is q* of the per-class
  training loss of an eval-mode pass with the final parameters (the summary's train_class_loss,
  computed from the same parameters), by the float64 loop reference."""
  _fairdro_one_epoch(tmp_path)


@pytest.mark.slow
def test_fairdro_q_after_two_epochs_is_the_smoothed_update(tmp_path):
  """… and after two epochs the smoothed update of it (the hook gets the finished epoch's index)."""
  from tests.reference import numpy_fairdro as ref_fairdro
  config, steps_per_epoch, summary = _fairdro_one_epoch(tmp_path)
  two = loop.train_and_evaluate(config, tmp_path / "two", max_steps=2 * steps_per_epoch)
  class_loss = np.asarray(two["train_class_loss"], np.float64)
  q_star = ref_fairdro.best_response(class_loss, 0.3, present=np.isfinite(class_loss))
  # q after epoch 1 is not in the summary of run two; its own epoch-0 q is run one's (same seed).
  expected = ref_fairdro.update(summary["fairdro_q"], q_star, 1, config.num_epochs, "linear")
  np.testing.assert_allclose(two["fairdro_q"], expected, rtol=2e-4, atol=2e-5)


def test_train_and_evaluate_writes_summary_metrics_and_history(tmp_path):
  config = tiny_config("mr2+inverse_reweight")
  config.log_every_steps = 5
  summary = loop.train_and_evaluate(config, tmp_path, max_steps=10)
  assert summary["steps"] == 10
  saved = json.loads((tmp_path / "summary.json").read_text())
  assert saved["overall_accuracy"] == summary["overall_accuracy"]
  assert len(saved["per_class_accuracy"]) == 10
  assert set(saved["neural_collapse"]) == {"nc1", "nc2", "nc2_classifier", "nc3", "nc4", "rho"}
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line)["step"] for line in lines] == [5, 10]
  history = [json.loads(line) for line in (tmp_path / "class_history.jsonl").read_text().splitlines()]
  assert len(history[0]["gamma"]) == 10 and len(history[0]["class_weight"]) == 10
  assert json.loads((tmp_path / "config.json").read_text())["loss"] == "mr2+inverse_reweight"
  assert any((tmp_path / "tensorboard").iterdir())


def test_class_loss_every_epochs_logs_training_set_class_loss_rho_and_nc(tmp_path):
  config = tiny_config("inverse_reweight")
  config.num_epochs = 2
  config.class_loss_every_epochs = 1
  config.nc_metrics = True
  summary = loop.train_and_evaluate(config, tmp_path)
  records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  rho_records = [r for r in records if "train_rho" in r]
  assert [r["epoch"] for r in rho_records] == [1.0, 2.0]
  history = [json.loads(line) for line in (tmp_path / "class_history.jsonl").read_text().splitlines()]
  class_ce = [r["train_class_ce"] for r in history if "train_class_ce" in r]
  assert len(class_ce) == 2 and len(class_ce[0]) == 10
  assert class_ce[0] != class_ce[1]
  # The last record is the final state's: the summary's per-class training loss, and ρ of it
  # recomputed in float64 NumPy (population std over classes / mean).
  np.testing.assert_allclose(class_ce[-1], summary["train_class_loss"], rtol=1e-6)
  final = np.asarray(class_ce[-1], np.float64)
  assert rho_records[-1]["train_rho"] == pytest.approx(final.std() / final.mean(), rel=1e-5)
  # NC1–NC4 over training: the last pass is the final state's, whose NC the summary holds.
  names = ("nc1", "nc2", "nc2_classifier", "nc3", "nc4")
  assert all(f"train_{n}" in r for r in rho_records for n in names)
  assert rho_records[0]["train_nc1"] != rho_records[1]["train_nc1"]
  for n in names:
    assert rho_records[-1][f"train_{n}"] == pytest.approx(summary["neural_collapse"][n], rel=1e-6)


def test_evaluation_counts_every_test_example_in_a_relative_workdir(tmp_path, monkeypatch):
  config = tiny_config("ce")
  config.eval_batch_size = 64  # 599 test examples: the last batch is padded
  config.nc_metrics = False
  monkeypatch.chdir(tmp_path)
  loop.train_and_evaluate(config, "relative/run", max_steps=2)
  tmp_path = tmp_path / "relative" / "run"
  assert (tmp_path / "checkpoints" / "2").is_dir()
  train_split, _, test_split = loading.load_data(config)
  del train_split
  counts = np.bincount(test_split.labels, minlength=10)
  summary = json.loads((tmp_path / "summary.json").read_text())
  correct = np.asarray(summary["per_class_accuracy"]) * counts
  np.testing.assert_allclose(correct, np.round(correct), atol=1e-9)  # whole examples per class
  np.testing.assert_allclose(correct.sum() / counts.sum(), summary["overall_accuracy"])


# ------------------------------------------------------------------------------------------------
# Command line: resume after SIGKILL, one-line errors
# ------------------------------------------------------------------------------------------------

def cli(workdir, *overrides, env=None):
  return [sys.executable, "-m", "experiments.main", "--config=experiments/configs/digits_lt.py",
          f"--workdir={workdir}", "--config.progress_bar=False", *overrides]


def cli_env(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", MR2_JAX_CACHE=str(tmp_path / "cache"))
  env.pop("XLA_FLAGS", None)
  return env


def finished_steps(checkpoint_dir):
  """Steps of completed checkpoints (orbax writes to a temporary name, then renames)."""
  if not checkpoint_dir.exists():
    return []
  return [int(p.name) for p in checkpoint_dir.iterdir() if p.name.isdigit()]


RESUME_OVERRIDES = ("--config.loss=mr2+inverse_reweight", "--config.num_epochs=40",
                    "--config.reweight.start_epoch=2", "--config.checkpoint_every_steps=7",
                    "--config.nc_metrics=False")


@pytest.mark.slow  # ≈ 100 s on 2 cores: three CLI runs, one killed
@pytest.mark.parametrize("pipeline", [(), ("--config.input_pipeline=grain",
                                           "--config.data_workers=2")], ids=["numpy", "grain"])
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, pipeline):
  """Killed mid-run and restarted: the same final state as the uninterrupted run. With grain (two
  worker processes) the input position comes from its iterator state in the checkpoint."""
  env = cli_env(tmp_path)
  overrides = (*RESUME_OVERRIDES, *pipeline)
  straight = tmp_path / "straight"
  subprocess.run(cli(straight, *overrides), cwd=REPO, env=env, check=True,
                 capture_output=True)

  killed = tmp_path / "killed"
  process = subprocess.Popen(cli(killed, *overrides), cwd=REPO, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  checkpoint_dir = killed / "checkpoints"
  while time.time() < deadline:
    steps = finished_steps(checkpoint_dir)
    if steps and max(steps) >= 21:
      break
    time.sleep(0.05)
  assert process.poll() is None, "the run finished before it could be killed"
  os.killpg(process.pid, signal.SIGKILL)  # the run and its grain workers, as a lost machine
  process.wait()
  killed_at = max(finished_steps(checkpoint_dir))
  assert killed_at < 280  # 40 epochs × 7 steps: killed mid-run
  subprocess.run(cli(killed, *overrides), cwd=REPO, env=env, check=True,
                 capture_output=True)

  step_a, state_a = checkpoints.restore_latest(straight)
  step_b, state_b = checkpoints.restore_latest(killed)
  assert step_a == step_b == 280
  chex.assert_trees_all_equal(state_a["params"], state_b["params"])
  chex.assert_trees_all_equal(state_a["batch_stats"], state_b["batch_stats"])
  chex.assert_trees_all_equal(state_a["loss_state"], state_b["loss_state"])
  chex.assert_trees_all_equal(state_a["opt_state"], state_b["opt_state"])
  assert float(np.sum(state_a["loss_state"]["reweight"]["batch_counts"])) > 0
  summary_a = json.loads((straight / "summary.json").read_text())
  summary_b = json.loads((killed / "summary.json").read_text())
  assert summary_a["per_class_accuracy"] == summary_b["per_class_accuracy"]
  if pipeline:  # the resumed run read its input position from the checkpoint
    saved = json.loads((killed / "checkpoints" / str(step_b) / "input" /
                        "process_0-of-1.json").read_text())
    assert saved["start"] == 0 and saved["grain"]


def _corrupt_cifar(folder):
  folder.mkdir()
  jpeg = np.frombuffer(b"not a jpeg at all" * 4, np.uint8)
  for split in ("train", "test"):
    np.savez(folder / f"{split}.npz", jpeg=jpeg, offsets=np.array([0, 30, 68]),
             labels=np.array([0, 1], np.int32))
  return folder


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """A short finished run (7 steps, one checkpoint), made once for the bad-config tests."""
  root = tmp_path_factory.mktemp("finished")
  subprocess.run(cli(root / "run", "--max_steps=7", "--config.checkpoint_every_steps=7",
                     "--config.nc_metrics=False"),
                 cwd=REPO, env=cli_env(root), check=True, capture_output=True)
  return root / "run"


# One case of each kind in the default run (a config error, missing and corrupt data, a config that
# differs from the checkpoint's); the other config errors in the slow run.
@pytest.mark.parametrize("overrides, message", [
    pytest.param(("--config.loss=nope",), "config.loss: unknown loss 'nope'",
                 marks=pytest.mark.slow),
    pytest.param(("--config.dataset=imagenet9",), "imagenet9", marks=pytest.mark.slow),
    pytest.param(("--config.imbalance_factor=0.5",), "imbalance_factor", marks=pytest.mark.slow),
    (("--config.dataset=mnist", "--config.data_dir=/nonexistent/mnist"), "/nonexistent/mnist"),
    (("--config.dataset=cifar10_jpeg", "--config.data_dir={corrupt}"), "index 0"),
    (("--config.lerning_rate=0.1",), "lerning_rate"),
    pytest.param(("--config.mr2.decay=1.0",), "config.mr2.decay", marks=pytest.mark.slow),
    (("--config.loss=mr2",), "different config (fields loss ('ce' there, 'mr2' here), mr2."),
])
def test_bad_config_or_data_is_one_line_and_keeps_checkpoints(tmp_path, finished_run, overrides,
                                                              message):
  env = cli_env(tmp_path)
  workdir = tmp_path / "run"
  shutil.copytree(finished_run, workdir)
  before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
  corrupt = _corrupt_cifar(tmp_path / "corrupt")
  overrides = [o.format(corrupt=corrupt) for o in overrides]
  result = subprocess.run(cli(workdir, *overrides), cwd=REPO, env=env, capture_output=True,
                          text=True)
  assert result.returncode == 2, result.stderr[-2000:]
  error_lines = [line for line in result.stderr.splitlines() if line.strip()]
  assert len(error_lines) == 1, result.stderr[-2000:]
  assert error_lines[0].startswith("error: ") or "FATAL Flags parsing error" in error_lines[0]
  assert message in error_lines[0]
  after = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
  assert after == before


def test_glmc_paired_batches_are_one_global_draw_mixed_as_the_spec_says():
  """The default run's guard of GLMC's paired batches in the trainer (the device part, 8 devices
  equal one, is the slow test below): GLMC's recipe gives the pipeline its re-balanced pair draw
  and two views; per step one λ, one CutMix box and each row's partner are drawn for the global
  batch, so four processes together hold the pairs, λ and box of one process; partners carry their
  own labels; and `glmc_mix` makes view 0 the global mixture λx + (1 − λ)x_b and view 1 the CutMix
  of the partners by the step's box (PIPELINES spec §3)."""
  split = digits_train()
  config = tiny_config("glmc")
  config.glmc.r = 0.5
  recipe = recipes.of(config)
  assert (recipe.pair.func, recipe.mix, recipe.views) == (glmc.glmc_pair, glmc.glmc_mix, 2)
  draw = recipe.pair(split)
  kwargs = dict(seed=3, epoch=2, augment=True, views=2, pair=draw)
  whole = list(batches_lib.train_batches(split, 32, **kwargs))[:3]
  parts = [list(batches_lib.train_batches(split, 8, process_index=p, process_count=4, **kwargs))[:3]
           for p in range(4)]
  for b, batch in enumerate(whole):
    assert batch["image"].shape[1] == batch["image_b"].shape[1] == 2
    np.testing.assert_array_equal(batch["label_b"], split.labels[batch["index_b"]])
    pairs = {(i, j) for part in parts
             for i, j in zip(part[b]["index"].tolist(), part[b]["index_b"].tolist())}
    assert pairs == set(zip(batch["index"].tolist(), batch["index_b"].tolist()))
    for key in ("lam", "box"):
      assert {part[b][key][0].tobytes() for part in parts} == {batch[key][0].tobytes()}
      assert np.all(batch[key] == batch[key][0])
  batch = whole[0]
  mixed, (labels_b, lam) = jax.jit(glmc.glmc_mix)(batch)
  lam, (y0, y1, x0, x1) = float(lam), batch["box"][0]
  np.testing.assert_allclose(mixed[:, 0], lam * batch["image"][:, 0]
                             + (1 - lam) * batch["image_b"][:, 0], rtol=1e-6, atol=1e-6)
  local = batch["image"][:, 1].copy()
  local[:, y0:y1, x0:x1] = batch["image_b"][:, 1, y0:y1, x0:x1]
  np.testing.assert_array_equal(mixed[:, 1], local)
  np.testing.assert_array_equal(labels_b, batch["label_b"])


# ≈ 15–25 s; its host part in the default run: test_glmc_paired_batches_are_one_global_draw…;
# GLMC's library loss is exact over 8 devices in tests/lib/reweight_jax/baselines/test_glmc.py
@pytest.mark.slow
def test_glmc_paired_batches_over_8_devices_equal_one_device():
  """GLMC's step (paired re-balanced rows, global MixUp and local CutMix with the batch's λ and box,
  two passes with their own BatchNorm statistics, fc / fc_cb / projector / predictor) for 2 steps:
  shard_map on 8 devices equals one device."""
  config = tiny_config("glmc")
  config.glmc.r, config.glmc.w_con = 0.5, 2.0
  results = run_steps(config, num_steps=2, modes=[("none", 1), ("shard_map", NUM_DEVICES)])
  assert_same_training(results["shard_map", NUM_DEVICES], results["none", 1])
  params = results["none", 1][0].params
  assert {"fc", "projector", "predictor", "head"} <= set(params)
  metrics = results["none", 1][1]
  for term in ("glmc_balanced", "glmc_rebalanced", "glmc_consistency"):
    assert np.isfinite(metrics[term]), term
  assert -2 <= metrics["glmc_consistency"] <= 2  # −cos − cos of the two passes' predictions


def test_mixup_draws_one_lambda_and_one_global_permutation_on_the_host():
  """Mixup's partners (`recipes.mixup_pair`) come with the batch: per step one λ and one permutation
  π of the global batch, the same pairs whether the global batch is one process's or split over
  four (no image crosses devices); `recipes.mixup_mix` is x̃ = λx + (1 − λ)x_π."""
  split = digits_train()
  draw = recipes.mixup_pair(1.0, split)
  kwargs = dict(seed=2, epoch=1, augment=False, pair=draw)
  whole = list(batches_lib.train_batches(split, 32, **kwargs))[:3]
  parts = [list(batches_lib.train_batches(split, 8, process_index=p, process_count=4, **kwargs))[:3]
           for p in range(4)]
  for b, batch in enumerate(whole):
    assert sorted(batch["index_b"].tolist()) == sorted(batch["index"].tolist())  # a permutation
    assert not np.array_equal(batch["index_b"], batch["index"])
    pairs = {(i, j) for part in parts
             for i, j in zip(part[b]["index"].tolist(), part[b]["index_b"].tolist())}
    assert pairs == set(zip(batch["index"].tolist(), batch["index_b"].tolist()))
    assert {float(part[b]["lam"][0]) for part in parts} == {float(batch["lam"][0])}
    assert 0 <= batch["lam"][0] <= 1 and np.all(batch["lam"] == batch["lam"][0])
  mixed, (partner_labels, lam) = jax.jit(recipes.mixup_mix)(whole[0])
  lam = float(lam)
  np.testing.assert_allclose(mixed, lam * whole[0]["image"] + (1 - lam) * whole[0]["image_b"],
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(partner_labels, split.labels[whole[0]["index_b"]])


# ≈ 10–20 s; the mixup draw's process split: test_mixup_draws_one_lambda_and_one_global_permutation…,
# DR's: tests/lib/reweight_jax/baselines/test_etf_dr.py
@pytest.mark.slow
def test_etf_dr_with_mixup_over_8_devices_equals_one_device_and_keeps_m_fixed():
  """ETF-DR (head 'etf', DR loss with GivenEw, mixup α = 1) for 2 steps: shard_map on 8 devices
  equals one device, and the ETF M in the parameters is `etf_classifier(K, d, seed)` bit for bit
  after the steps (no gradient step, no weight decay), while the head's BatchNorm trained."""
  import reweight_jax
  config = tiny_config("etf_dr")
  config.head, config.mixup_alpha = "etf", 1.0
  results = run_steps(config, num_steps=2, modes=[("none", 1), ("shard_map", NUM_DEVICES)])
  assert_same_training(results["shard_map", NUM_DEVICES], results["none", 1])
  params = results["none", 1][0].params["head"]
  expected = reweight_jax.baselines.etf_classifier(10, params["etf"].shape[0], config.seed)
  np.testing.assert_array_equal(np.asarray(params["etf"]), np.asarray(expected))
  assert not np.allclose(np.asarray(params["norm"]["scale"]), 1.0)
  assert np.isfinite(results["none", 1][1]["loss"])


def test_a_run_written_before_new_config_fields_resumes_and_a_changed_one_does_not(tmp_path):
  """A config.json without fields added since (top-level ones, a field of its loss's sub-tree) or
  with the sub-trees of methods it does not train (every run recorded all of them once) reads as
  today's run config (`lineage.read_saved_config`): the run resumes; a field that differs from the
  saved value is still refused."""
  config = tiny_config("mr2")
  config.num_epochs = 2
  workdir = tmp_path / "run"
  loop.train_and_evaluate(config, workdir, max_steps=2)
  saved = json.loads((workdir / "config.json").read_text())
  for field in ("compute_dtype", "views"):
    del saved[field]
  del saved["mr2"]["stats_reduction"]
  saved["glmc"] = {"r": 0.0, "weight_exponent": 1.2, "w_con": 1.0, "projection_dim": 128}
  (workdir / "config.json").write_text(json.dumps(saved))
  assert loop.train_and_evaluate(config, workdir, max_steps=3)["steps"] == 3
  config.views = 2
  with pytest.raises(ConfigError,
                     match=r"different config \(fields views \(1 there, 2 here\)\); its checkpoint"):
    loop.train_and_evaluate(config, workdir, max_steps=4)


def test_trainer_milelr_schedule_is_the_library_one():
  """The trainer's `create_learning_rate_fn` with schedule 'milelr' is `reweight_jax.milelr_schedule`
  on its ⌊N/B⌋ epochs (moved here from tests/lib/reweight_jax/test_milelr.py: it needs the harness)."""
  counts = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]  # CIFAR-10-LT IF 100
  spe = sum(counts) // 128
  schedule = reweight_jax.milelr_schedule(0.3, np.asarray(counts), 128, steps_per_epoch=spe)
  config = ml_collections.ConfigDict(dict(schedule="milelr", learning_rate=0.3, batch_size=128,
                                          num_epochs=200, warmup_epochs=10,
                                          milelr_switch_epoch=160))
  trainer = train_state.create_learning_rate_fn(config, spe, np.asarray(counts))
  for k in (0, 5 * spe, 160 * spe, 180 * spe):
    assert float(trainer(k)) == float(schedule(k))


def test_the_loop_starts_and_resumes_under_pmap(tmp_path):
  # Under pmap the placed state carries a device axis, so the loop reads its start step before
  # placing it (reading it after raised "Only scalar arrays can be converted", on a fresh start
  # and on a resume alike; only the slow multi-process test ran the loop under pmap).
  assert jax.local_device_count() == NUM_DEVICES
  config = tiny_config("mr2+inverse_reweight")
  config.parallel = "pmap"
  config.batch_size = 8 * NUM_DEVICES
  config.checkpoint_every_steps = 2
  config.nc_metrics = False
  summary = loop.train_and_evaluate(config, tmp_path / "run", max_steps=2)
  assert summary["steps"] == 2
  summary = loop.train_and_evaluate(config, tmp_path / "run", max_steps=3)
  assert summary["steps"] == 3 and np.isfinite(summary["overall_accuracy"])
