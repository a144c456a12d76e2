"""Checkpoints: one host copy of the train state in orbax, verified on restore, and the guard
against resuming a workdir with a different config.

Each checkpoint holds the state ('state') and the SHA-256 of its leaves ('integrity') in one orbax
step directory, written to a temporary name and renamed when complete, so a run killed during a
write leaves no step directory that is read. On restore the digest is recomputed: a truncated or
corrupted checkpoint is a `CheckpointError` naming the step; `resume_from_previous=True` sets it
aside (renamed `corrupt-<step>`, nothing deleted) and resumes from the newest checkpoint that reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pathlib

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiments.config_errors import ConfigError

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
  """A checkpoint that cannot be read or does not match its digest (the message names the step)."""

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


def digest(host_state) -> str:
  """SHA-256 over the leaves of a host state: paths, shapes and values (as float64, exact for every
  float32 / int32 / bool leaf here, so a restore that widens a scalar's integer type still matches)."""
  sha = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(host_state)[0]:
    leaf = np.ascontiguousarray(np.asarray(leaf, np.float64))
    sha.update(f"{jax.tree_util.keystr(path)}:{leaf.shape}".encode())
    sha.update(leaf.tobytes())
  return sha.hexdigest()


def save(checkpoint_manager: ocp.CheckpointManager, step: int, host_state) -> None:
  """Writes `host_state` (a `to_checkpoint` copy) with its digest as checkpoint `step`."""
  checkpoint_manager.save(step, args=ocp.args.Composite(
      state=ocp.args.StandardSave(host_state),
      integrity=ocp.args.JsonSave({"sha256": digest(host_state), "step": int(step)})))


def _restore_step(checkpoint_manager: ocp.CheckpointManager, step: int, template):
  where = checkpoint_manager.directory / str(step)
  try:
    restored = checkpoint_manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(to_checkpoint(template)),
        integrity=ocp.args.JsonRestore()))
  except Exception as error:  # orbax / tensorstore raise many kinds for a damaged file
    raise CheckpointError(f"checkpoint at step {step} ({where}) cannot be read: "
                          f"{type(error).__name__}: {str(error).splitlines()[0][:200]}") from error
  expected = (restored.integrity or {}).get("sha256")
  actual = digest(jax.tree.map(np.asarray, restored.state))
  if expected != actual:
    raise CheckpointError(f"checkpoint at step {step} ({where}) is corrupted: its content does not "
                          f"match the digest written with it")
  return from_checkpoint(restored.state, template)


def restore_latest(checkpoint_manager: ocp.CheckpointManager, template, *,
                   resume_from_previous: bool = False):
  """The latest checkpoint as a state like `template` (host values), or `template` when none.

  A checkpoint that cannot be read or fails its digest raises `CheckpointError` naming the step;
  with `resume_from_previous` it is renamed `corrupt-<step>` and the next older one is tried.
  """
  for step in sorted(checkpoint_manager.all_steps(), reverse=True):
    try:
      return _restore_step(checkpoint_manager, step, template)
    except CheckpointError as error:
      older = [s for s in checkpoint_manager.all_steps() if s < step]
      if not resume_from_previous:
        hint = (f"; rerun with --resume_from_previous to resume from step {max(older)}" if older
                else "; no older checkpoint: remove it to start afresh")
        raise CheckpointError(f"{error}{hint}") from error
      aside = checkpoint_manager.directory / f"corrupt-{step}"
      (checkpoint_manager.directory / str(step)).rename(aside)
      checkpoint_manager.reload()
      log.warning("%s; set aside as %s, trying the previous checkpoint.", error, aside)
  return template


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
