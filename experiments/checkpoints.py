"""Checkpoints: one host copy of the train state in orbax, and the guard against resuming a workdir
with a different config."""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiments.config_errors import ConfigError

# Fields that may change when a run is resumed: how it runs and reports, not what it computes.
RESUMABLE_FIELDS = ("parallel", "progress_bar", "log_every_steps", "checkpoint_every_steps",
                    "keep_checkpoints", "eval_batch_size", "nc_metrics", "class_loss_every_epochs",
                    "reference_summary", "data_dir")


def to_checkpoint(state):
  """One host (NumPy) copy of the state, the rng as its raw key data.

  Host values are what every way of running can write (in a multi-process job orbax writes NumPy
  leaves from the primary process) and what any device count can restore.
  """
  state = state.replace(rng=jax.random.key_data(state.rng))
  return jax.tree.map(np.asarray, state)


def from_checkpoint(restored, template):
  return restored.replace(rng=jax.random.wrap_key_data(restored.rng,
                                                       impl=jax.random.key_impl(template.rng)))


def manager(workdir: pathlib.Path, config) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True,
                                         enable_async_checkpointing=False,
                                         cleanup_tmp_directories=True)
  return ocp.CheckpointManager(workdir / "checkpoints", options=options)


def restore_latest(checkpoint_manager: ocp.CheckpointManager, template):
  """The latest checkpoint as a state like `template` (host values), or `template` when none."""
  step = checkpoint_manager.latest_step()
  if step is None:
    return template
  restored = checkpoint_manager.restore(step, args=ocp.args.StandardRestore(to_checkpoint(template)))
  return from_checkpoint(restored, template)


def check_resumable(workdir: pathlib.Path, config) -> None:
  """Refuses to resume a workdir whose checkpoints were made with a different config."""
  saved = workdir / "config.json"
  checkpoints = workdir / "checkpoints"
  if not (saved.exists() and checkpoints.exists() and any(
      p.name.isdigit() for p in checkpoints.iterdir())):
    return
  before = json.loads(saved.read_text())
  now = json.loads(config.to_json_best_effort())
  changed = sorted(k for k in set(before) | set(now)
                   if k not in RESUMABLE_FIELDS and before.get(k) != now.get(k))
  if changed:
    raise ConfigError(f"{workdir} holds checkpoints of a run with a different config "
                      f"(fields {', '.join(changed)}); use a new --workdir")
