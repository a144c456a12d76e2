"""Fault injection on the trainer: a kill during a checkpoint write, a truncated or corrupted
checkpoint, a NaN mid-run, a full disk while writing metrics, and data files that vanish or break.
In every case the error names what happened and nothing already written is lost."""

import errno
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

from experiments.common.errors import DataError
from experiments.configs import digits_lt
from experiments.data import input_pipeline
from experiments.data import loading
from experiments.train import checkpoints
from experiments.train import loop
from experiments.train import loop_events
from experiments.train import metric_writer
from tests import checkpoints as checkpoint_files

REPO = pathlib.Path(__file__).resolve().parents[3]
EVERY = 7  # checkpoint interval (digits LT: 7 steps per epoch at batch 64)


def config_for(loss="mr2", **overrides):
  config = digits_lt.get_config()
  config.loss = loss
  config.num_epochs = 4
  config.checkpoint_every_steps = EVERY
  config.log_every_steps = 5
  config.progress_bar = False
  config.nc_metrics = False
  for field, value in overrides.items():
    config[field] = value
  return config


def train_state_template(config=None):
  """The initial host train state of `config_for()` (the template checkpoints restore into)."""
  from experiments import models
  from experiments.train import train_state
  config = config or config_for()
  split, _, _ = loading.load_data(config)
  model = models.create_model(config.model, 10, head=config.head)
  return train_state.create_train_state(config, model, split.images.shape[1:], 10, lambda s: 0.0,
                                        jax.random.key(0))


def steps_in(workdir):
  folder = pathlib.Path(workdir) / "checkpoints"
  return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def final_state(workdir):
  return checkpoint_files.restore_latest(workdir)


def assert_same_final_state(workdir_a, workdir_b):
  (step_a, a), (step_b, b) = final_state(workdir_a), final_state(workdir_b)
  assert step_a == step_b
  chex.assert_trees_all_equal(a["params"], b["params"])
  chex.assert_trees_all_equal(a["loss_state"], b["loss_state"])
  chex.assert_trees_all_equal(a["opt_state"], b["opt_state"])


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """An uninterrupted 21-step run (checkpoints 7, 14, 21), the reference for every resume here."""
  workdir = tmp_path_factory.mktemp("straight") / "run"
  loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)
  return workdir


# ------------------------------------------------------------------------------------------------
# A kill during a checkpoint write
# ------------------------------------------------------------------------------------------------

def test_interrupted_checkpoint_write_is_never_read(tmp_path, straight, monkeypatch):
  """The write of step 14 dies before orbax renames its temporary directory (what SIGKILL leaves,
  here without the process dying: the slow test below kills it for real); the resumed run restarts
  from step 7 and ends equal to the uninterrupted run."""
  from orbax.checkpoint._src.path import async_path
  rename = async_path.rename

  async def dying_rename(src, dst):
    if pathlib.Path(str(dst)).name == str(2 * EVERY):
      raise KeyboardInterrupt("killed during the checkpoint write")
    return await rename(src, dst)

  workdir = tmp_path / "run"
  monkeypatch.setattr(async_path, "rename", dying_rename)
  with pytest.raises(KeyboardInterrupt):
    loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)
  monkeypatch.setattr(async_path, "rename", rename)
  leftovers = [p.name for p in (workdir / "checkpoints").iterdir() if not p.name.isdigit()]
  assert steps_in(workdir) == [EVERY] and any("tmp" in name for name in leftovers), leftovers
  loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)
  assert steps_in(workdir) == [2 * EVERY, 3 * EVERY]
  assert_same_final_state(workdir, straight)


KILL_SCRIPT = r"""
import os, signal, sys
from orbax.checkpoint._src.path import async_path
from experiments.train import loop
from tests.harness.train.test_faults import config_for, EVERY
rename = async_path.rename
async def dying_rename(src, dst):
  if os.path.basename(str(dst)) == str(2 * EVERY):
    os.kill(os.getpid(), signal.SIGKILL)
  return await rename(src, dst)
async_path.rename = dying_rename
loop.train_and_evaluate(config_for(), sys.argv[1], max_steps=3 * EVERY)
"""


@pytest.mark.slow  # a subprocess compiling the step, then SIGKILL
def test_sigkill_during_checkpoint_write_resumes_from_the_previous_checkpoint(tmp_path, straight):
  workdir = tmp_path / "run"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
  result = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(workdir)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
  assert steps_in(workdir) == [EVERY]
  loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)
  assert_same_final_state(workdir, straight)


# ------------------------------------------------------------------------------------------------
# A truncated or corrupted latest checkpoint
# ------------------------------------------------------------------------------------------------

def _largest_file(folder):
  return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate(path):
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])


def _flip_byte(path):
  data = bytearray(path.read_bytes())
  data[len(data) // 2] ^= 0xFF
  path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _flip_byte], ids=["truncated", "bit_flip"])
def test_damaged_latest_checkpoint_names_the_step_and_falls_back_on_request(tmp_path, straight,
                                                                            damage):
  workdir = tmp_path / "run"
  shutil.copytree(straight, workdir)
  damage(_largest_file(workdir / "checkpoints" / str(3 * EVERY) / "state"))
  with pytest.raises(checkpoints.CheckpointError,
                     match=rf"checkpoint at step {3 * EVERY} .*--resume_from_previous to resume "
                           rf"from step {2 * EVERY}"):
    loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)
  assert steps_in(workdir) == [2 * EVERY, 3 * EVERY]  # nothing touched by the refusal
  loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY, resume_from_previous=True)
  assert (workdir / "checkpoints" / f"corrupt-{3 * EVERY}").is_dir()  # set aside, not deleted
  assert_same_final_state(workdir, straight)


def test_digest_refuses_a_rewritten_state_that_orbax_reads_without_complaint(tmp_path, straight):
  """The digest earns its place: a latest checkpoint whose `state` item was rewritten by orbax
  itself with one parameter changed (a well-formed file, the old digest kept) restores through
  orbax without complaint, and only the digest refuses it."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  shutil.copytree(straight, workdir)
  state_dir = workdir / "checkpoints" / str(3 * EVERY) / "state"
  checkpointer = ocp.StandardCheckpointer()
  original = checkpointer.restore(state_dir)
  leaves, treedef = jax.tree.flatten(original)
  index = next(i for i, leaf in enumerate(leaves)
               if np.issubdtype(np.asarray(leaf).dtype, np.floating) and np.size(leaf) > 1)
  leaves[index] = np.asarray(leaves[index]) + np.float32(1e-3)
  rewritten = jax.tree.unflatten(treedef, leaves)
  checkpointer.save(tmp_path / "rewritten", rewritten)
  checkpointer.wait_until_finished()
  shutil.rmtree(state_dir)
  shutil.copytree(tmp_path / "rewritten", state_dir)
  read_back = checkpointer.restore(state_dir)  # orbax: no error, the changed values
  np.testing.assert_array_equal(jax.tree.leaves(read_back)[index], leaves[index])
  with pytest.raises(checkpoints.CheckpointError,
                     match=rf"checkpoint at step {3 * EVERY} .*does not match the digest"):
    loop.train_and_evaluate(config_for(), workdir, max_steps=3 * EVERY)


def test_digest_detects_a_changed_value():
  state = {"a": np.arange(4.0), "b": {"c": np.ones((2, 2), np.float32)}}
  changed = {"a": np.arange(4.0), "b": {"c": np.array([[1, 1], [1, 1 + 1e-7]], np.float32)}}
  assert checkpoints.digest(state) == checkpoints.digest(jax.tree.map(np.copy, state))
  assert checkpoints.digest(state) != checkpoints.digest(changed)


# ------------------------------------------------------------------------------------------------
# A NaN mid-run
# ------------------------------------------------------------------------------------------------

def _poison_batches(monkeypatch, bad_step):
  """Makes the images of global step `bad_step` (1-based) NaN."""
  batch_at = input_pipeline.BatchAt.__call__

  def poisoned(self, step):
    step, batch = batch_at(self, step)
    if step + 1 == bad_step:
      batch = {**batch, "image": np.full_like(batch["image"], np.nan)}
    return step, batch

  monkeypatch.setattr(input_pipeline.BatchAt, "__call__", poisoned)


@pytest.mark.parametrize("bad_step, caught_at", [(9, "log"), (12, "checkpoint")])
def test_nan_stops_the_run_naming_step_classes_and_last_good_checkpoint(tmp_path, monkeypatch,
                                                                        bad_step, caught_at):
  """Logging every 5 steps and checkpointing every 7: a NaN at step 9 is caught at the log of step
  10, one at step 12 by the checkpoint of step 14 (before the log of step 15). Either way the last
  good checkpoint is step 7 and no checkpoint of the diverged state exists."""
  del caught_at
  _poison_batches(monkeypatch, bad_step)
  workdir = tmp_path / "run"
  with pytest.raises(FloatingPointError) as error:
    loop.train_and_evaluate(config_for("mr2"), workdir, max_steps=3 * EVERY)
  message = str(error.value)
  assert f"first at step {bad_step} " in message, message
  # The NaN entered through the loss: the parameters diverged; MR2's statistics stayed finite here
  # (the ReLU features of NaN images are finite), and the message says which.
  assert "non-finite class statistics: none; parameters finite: False" in message, message
  assert f"last good checkpoint: step {EVERY} in {workdir / 'checkpoints'}" in message, message
  assert steps_in(workdir) == [EVERY]
  step, restored = checkpoint_files.restore_latest(workdir)
  assert step == EVERY and all(np.all(np.isfinite(x)) for x in jax.tree.leaves(restored["params"]))


def test_divergence_error_names_the_non_finite_class_statistics(tmp_path):
  import mr2_jax
  import reweight_jax
  stats = mr2_jax.init_class_stats(6)
  stats = stats._replace(sq_mean_norm=stats.sq_mean_norm.at[2].set(np.nan),
                         mean_sq_deviation=stats.mean_sq_deviation.at[5].set(np.inf))

  class HostState:
    loss_state = {"class_stats": stats, "reweight": reweight_jax.init_reweight_state(6)}
    params = {"w": np.ones(3)}

  manager = checkpoints.manager(tmp_path, config_for())
  message = str(loop_events.divergence_error(12, HostState(), manager, "mr2"))
  assert "first at step 12 (loss mr2)" in message, message
  assert "class_stats.sq_mean_norm classes [2]" in message, message
  assert "class_stats.mean_sq_deviation classes [5]" in message, message
  assert "reweight" not in message and "parameters finite: True" in message, message
  assert "last good checkpoint: none" in message, message


# ------------------------------------------------------------------------------------------------
# A full disk while writing metrics
# ------------------------------------------------------------------------------------------------

class _FullDiskFile:
  """A file object whose writes fail with ENOSPC once `budget` writes have succeeded."""

  def __init__(self, path, budget):
    self._file, self._budget, self.name = open(path, "a", encoding="utf-8"), budget, str(path)

  def write(self, text):
    if self._budget <= 0:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    self._budget -= 1
    return self._file.write(text)

  def flush(self):
    self._file.flush()

  def close(self):
    self._file.close()


def test_full_disk_while_writing_metrics_is_a_clear_error_and_checkpoints_stay(tmp_path,
                                                                              monkeypatch):
  monkeypatch.setattr(metric_writer, "open",
                      lambda path, *a, **k: _FullDiskFile(path, budget=2), raising=False)
  workdir = tmp_path / "run"
  with pytest.raises(metric_writer.MetricWriteError) as error:
    loop.train_and_evaluate(config_for(), workdir, max_steps=4 * EVERY)
  message = str(error.value)
  assert "No space left on device" in message and "jsonl at step " in message, message
  written = steps_in(workdir)
  assert written, "a checkpoint was written before the disk filled"
  assert f"checkpoints up to step {written[-1]} in {workdir / 'checkpoints'} are intact" in message
  step, restored = checkpoint_files.restore_latest(workdir)  # digest-verified below as well
  assert step == written[-1]
  template = train_state_template()
  checkpoints.restore_latest(checkpoints.manager(workdir, config_for()), template)


# ------------------------------------------------------------------------------------------------
# Data files that vanish or break
# ------------------------------------------------------------------------------------------------

def _mnist_folder(folder):
  rng = np.random.default_rng(0)
  folder.mkdir()
  for split, n in (("train", 300), ("test", 100)):
    np.savez(folder / f"{split}.npz", images=rng.integers(0, 255, (n, 28, 28), dtype=np.uint8),
             labels=np.arange(n, dtype=np.int64) % 10)
  return folder


def test_data_read_once_survives_deletion_and_a_resume_names_the_missing_file(tmp_path,
                                                                             monkeypatch):
  """The pipeline reads every file before the first step (host memory): deleting the data folder
  mid-run loses nothing; resuming after it stops with one error naming the file, checkpoints kept."""
  folder = _mnist_folder(tmp_path / "mnist")
  config = config_for("ce", dataset="mnist", data_dir=str(folder), batch_size=30,
                      imbalance_factor=1.0)
  batch_at = input_pipeline.BatchAt.__call__

  def deleting(self, step):
    shutil.rmtree(folder, ignore_errors=True)
    return batch_at(self, step)

  monkeypatch.setattr(input_pipeline.BatchAt, "__call__", deleting)
  workdir = tmp_path / "run"
  summary = loop.train_and_evaluate(config, workdir, max_steps=2 * EVERY)
  assert summary["steps"] == 2 * EVERY and not folder.exists()
  with pytest.raises(DataError, match=str(folder)):
    loop.train_and_evaluate(config, workdir, max_steps=3 * EVERY)
  assert steps_in(workdir) == [EVERY, 2 * EVERY]


def test_corrupted_data_file_names_the_file(tmp_path):
  folder = _mnist_folder(tmp_path / "mnist")
  (folder / "train.npz").write_bytes((folder / "train.npz").read_bytes()[:1000])
  config = config_for("ce", dataset="mnist", data_dir=str(folder), batch_size=30)
  with pytest.raises(DataError, match=f"cannot read {folder / 'train.npz'}"):
    loop.train_and_evaluate(config, tmp_path / "run", max_steps=EVERY)
  assert not (tmp_path / "run").exists()  # refused before anything was written
