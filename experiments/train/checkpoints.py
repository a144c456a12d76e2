"""Checkpoints: one host copy of the train state in orbax, verified on restore, and the guards
(through `experiments.train.lineage`) against resuming a workdir with a different config or
starting from a run that trained otherwise.

Each checkpoint holds the state ('state') and the SHA-256 of its leaves ('integrity') in one orbax
step directory, written to a temporary name and renamed when complete, so a run killed during a
write leaves no step directory that is read. On restore the digest is recomputed: a truncated or
corrupted checkpoint is a `CheckpointError` naming the step; `resume_from_previous=True` sets it
aside (renamed `corrupt-<step>`, nothing deleted) and resumes from the newest checkpoint that reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import pathlib

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging as absl_logging

from experiments.common.errors import ConfigError
from experiments.common.errors import CheckpointError
from experiments.configs import schema
from experiments.methods import registry
from experiments.models.pretrained import weights
from experiments.train import lineage
from experiments.train import train_state

log = logging.getLogger(__name__)


# Fields that may change when a run is resumed: how it runs and reports, not what it computes
# (input_on_device: where the same crops are cut).
RESUMABLE_FIELDS = ("parallel", "progress_bar", "log_every_steps", "checkpoint_every_steps",
                    "keep_checkpoints", "eval_batch_size", "nc_metrics", "class_loss_every_epochs",
                    "test_every_epochs", "reference_summary", "data_dir", "input_on_device")
# Fields in which a run may differ from the run it starts from (`init_from`): the loss, its
# sub-trees and how a run is kept or reported.
INIT_FROM_FREE = ("loss", "init_from", *registry.CONFIG_TREES, *RESUMABLE_FIELDS)


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


def start_epochs(config) -> tuple[int, ...]:
  """The start epochs of every deferred method (reweight.start_epoch, ldam.drw_epoch,
  ib.start_epoch, > 0) in the config a run is given, at the method's default where it sets none
  (`schema.deferred_starts`): the run checkpoints and keeps the end of each, so that a deferred
  sibling can start there from this run (`config.init_from`) instead of training its first epochs
  again. The given config, not the run's: a CE run of a recipe that starts the reweighting at
  epoch 160 keeps that epoch, though its own config holds no reweighting."""
  epochs = set(schema.deferred_starts(config).values())
  return tuple(sorted(e for e in epochs if 0 < e < config.num_epochs))


def manager(workdir: pathlib.Path, config, steps_per_epoch: int | None = None,
            keep_epochs: tuple[int, ...] = ()) -> ocp.CheckpointManager:
  """Keeps the latest `keep_checkpoints`, and (given `steps_per_epoch`) the ends of `keep_epochs`
  (`start_epochs`)."""
  policies = [ocp.checkpoint_managers.LatestN(config.keep_checkpoints)]
  if steps_per_epoch is not None:
    policies.append(ocp.checkpoint_managers.CustomSteps(
        [e * steps_per_epoch for e in keep_epochs]))
  options = ocp.CheckpointManagerOptions(
      create=True, enable_async_checkpointing=False, cleanup_tmp_directories=True,
      preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies))
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


class InputState:
  """The input pipeline's position as one process's JSON (grain's iterator state), written per
  process (`process_<i>-of-<n>.json`) by grain's orbax handler as the checkpoint's 'input' item."""

  def __init__(self, state: dict | None = None):
    self.state = state

  def get_state(self) -> bytes:
    return json.dumps(self.state).encode()

  def set_state(self, state: bytes) -> None:
    self.state = json.loads(state)

  def start_prefetch(self) -> None:  # the handler's restore calls it; nothing to start here
    pass


def save(checkpoint_manager: ocp.CheckpointManager, step: int, host_state,
         input_state: dict | None = None) -> None:
  """Writes `host_state` (a `to_checkpoint` copy) with its digest as checkpoint `step`, and the
  input pipeline's position (`input_state`, grain's iterator state) when it has one."""
  items = dict(state=ocp.args.StandardSave(host_state),
               integrity=ocp.args.JsonSave({"sha256": digest(host_state), "step": int(step)}))
  if input_state is not None:
    # optional: grain only when its pipeline runs (an accelerator may lack it)
    import grain  # pylint: disable=g-import-not-at-top
    items["input"] = grain.checkpoint.CheckpointSave(InputState(input_state))
  checkpoint_manager.save(step, args=ocp.args.Composite(**items))


def restore_step(checkpoint_manager: ocp.CheckpointManager, step: int, template,
                  input_state: bool = False):
  """Checkpoint `step` as a state like `template` (host values), checked against its digest; with
  `input_state`, (state, the input pipeline's position saved with it, or None)."""
  where = checkpoint_manager.directory / str(step)
  items = dict(state=ocp.args.StandardRestore(to_checkpoint(template)),
               integrity=ocp.args.JsonRestore())
  has_input = input_state and (where / "input").is_dir()  # only a grain pipeline's has one
  if has_input:
    # optional: grain only when its pipeline runs (an accelerator may lack it)
    import grain  # pylint: disable=g-import-not-at-top
    items["input"] = grain.checkpoint.CheckpointRestore(InputState())
  try:
    restored = checkpoint_manager.restore(step, args=ocp.args.Composite(**items))
  except Exception as error:  # orbax / tensorstore raise many kinds for a damaged file
    raise CheckpointError(f"checkpoint at step {step} ({where}) cannot be read: "
                          f"{type(error).__name__}: {str(error).splitlines()[0][:200]}") from error
  expected = (restored.integrity or {}).get("sha256")
  actual = digest(jax.tree.map(np.asarray, restored.state))
  if expected != actual:
    raise CheckpointError(f"checkpoint at step {step} ({where}) is corrupted: its content does not "
                          f"match the digest written with it")
  state = from_checkpoint(restored.state, template)
  if not input_state:
    return state
  return state, restored.input.state if has_input else None


def restore_latest(checkpoint_manager: ocp.CheckpointManager, template, *,
                   resume_from_previous: bool = False, input_state: bool = False):
  """The latest checkpoint as a state like `template` (host values), or `template` when none;
  with `input_state`, (state, the input pipeline's position saved with it, or None).

  A checkpoint that cannot be read or fails its digest raises `CheckpointError` naming the step;
  with `resume_from_previous` it is renamed `corrupt-<step>` and the next older one is tried.
  """
  for step in sorted(checkpoint_manager.all_steps(), reverse=True):
    try:
      return restore_step(checkpoint_manager, step, template, input_state)
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
  return (template, None) if input_state else template


def _restore_latest(workdir: str | pathlib.Path) -> tuple[int, dict]:
  """(step, the saved train state as nested dicts of arrays) of a run's latest checkpoint, read-only
  and without a template (`read_variables`)."""
  directory = pathlib.Path(workdir).resolve() / "checkpoints"
  if not directory.is_dir() or not any(p.name.isdigit() for p in directory.iterdir()):
    raise FileNotFoundError(f"{directory}: no checkpoint (the run saved none yet)")
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.ERROR)  # orbax: "read only", "no target given"
  try:
    checkpoint_manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
        read_only=True, create=False, enable_async_checkpointing=False))
    step = checkpoint_manager.latest_step()
    if step is None:
      raise FileNotFoundError(f"{directory}: no complete checkpoint")
    try:
      if (directory / str(step) / "state").is_dir():  # the composite step: state + digest
        restored = checkpoint_manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore())).state
      else:  # a single-item step (checkpoints written before the composite layout)
        restored = checkpoint_manager.restore(step, args=ocp.args.StandardRestore())
    except Exception as error:  # orbax / tensorstore raise many kinds for a damaged file
      first = str(error).splitlines()[0][:200] if str(error) else ""
      raise CheckpointError(f"checkpoint at step {step} ({directory / str(step)}) cannot be read: "
                            f"{type(error).__name__}: {first}") from error
    checkpoint_manager.close()
  finally:
    absl_logging.set_verbosity(verbosity)
  return int(step), restored


def _model_variables(restored: dict) -> dict:
  """{'params', 'batch_stats'} of a restored train state (no BatchNorm: an empty dict)."""
  return {"params": restored.get("params"), "batch_stats": restored.get("batch_stats") or {}}


def _flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
  flat = {}
  for key, value in tree.items():
    name = f"{prefix}/{key}" if prefix else str(key)
    flat.update(_flatten(value, name) if isinstance(value, dict) else {name: np.asarray(value)})
  return flat


def write_variables_npz(workdir: str | pathlib.Path, path: str | pathlib.Path) -> int:
  """Writes a run's final model variables, its parameters and BatchNorm statistics, from its latest
  checkpoint to `path` (NumPy .npz, one array per leaf named by its path, e.g.
  `params/head/kernel`, `batch_stats/stem_bn/mean`, and `step`), the few MB a study commits so that
  anyone can recompute its features without the optimiser's state; returns the step.
  `read_variables_npz` reads it back.

  Raises:
    FileNotFoundError: no checkpoint. CheckpointError: unreadable.
  """
  step, restored = _restore_latest(workdir)
  flat = _flatten(_model_variables(restored))
  np.savez(path, step=np.asarray(step), **flat)
  return step


def read_variables_npz(path: str | pathlib.Path) -> tuple[int, dict]:
  """(step, {'params', 'batch_stats'}) as nested dicts of arrays, from `write_variables_npz`'s
  file (the layout `model.apply` takes)."""
  variables: dict = {"params": {}, "batch_stats": {}}
  with np.load(path) as data:
    step = int(data["step"])
    for name in data.files:
      if name == "step":
        continue
      *parents, leaf = name.split("/")
      node = variables
      for parent in parents:
        node = node.setdefault(parent, {})
      node[leaf] = data[name]
  return step, variables


def read_variables(workdir: str | pathlib.Path, model, image_shape) -> tuple[int, dict]:
  """(step, {'params', 'batch_stats'}) of a run's latest checkpoint, for a model like `model`.

  Restored without a state template (only the model's variables are used and their shapes are
  checked against `model`, so the rest of the train state — optimizer, loss state — may have any
  layout), from the trainer's composite steps ('state' + digest) and older single-item steps; the
  digest is not checked (the trainer checks it on resume). The manager is read-only: it creates
  nothing and leaves a still-running job's files alone. Used by diagnose, JTT's stage-1 model and
  the frozen encoder of a two-stage run.

  Raises:
    FileNotFoundError: no checkpoint. CheckpointError: unreadable, or variables that do not fit.
  """
  step, restored = _restore_latest(workdir)
  expected = jax.eval_shape(functools.partial(model.init, train=False), jax.random.key(0),
                            np.zeros((1, *image_shape), np.float32))
  variables = _model_variables(restored)
  shapes = jax.tree.map(np.shape, variables)
  wanted = jax.tree.map(lambda x: x.shape, {"params": expected["params"],
                                            "batch_stats": expected.get("batch_stats", {})})
  if shapes != wanted:
    directory = pathlib.Path(workdir).resolve() / "checkpoints" / str(step)
    raise CheckpointError(f"{directory}: its parameters do not fit the model of "
                          f"config.json")
  return int(step), variables


def check_resumable(workdir: pathlib.Path, config) -> None:
  """Refuses to resume a workdir whose checkpoints were made with a config that differs in a field
  beyond `RESUMABLE_FIELDS` (`lineage.check_same_config`)."""
  checkpoints = workdir / "checkpoints"
  if not ((workdir / "config.json").exists() and checkpoints.exists() and any(
      p.name.isdigit() for p in checkpoints.iterdir())):
    return
  lineage.check_same_config(workdir, config, label="--workdir", free=RESUMABLE_FIELDS,
                            why="its checkpoints cannot be resumed: use a new --workdir")


def check_same_record(workdir: pathlib.Path, name: str, record: dict) -> None:
  """Writes `record` (what a run derived from another one, e.g. JTT's stage-1 step and error set)
  as workdir/`name` on a fresh start; refuses to resume a run whose record has changed since (the
  stage-1 workdir trained on, say), which would change the training set mid-run."""
  if not record:
    return
  path = workdir / name
  if path.is_file():
    changed = lineage.differences(json.loads(path.read_text()), record)
    if changed:
      raise ConfigError(f"--workdir: {workdir} was started from a different run ({path}: "
                        f"{lineage.describe(changed)}); the run it derives from has changed: use "
                        f"a new --workdir")
    return
  if jax.process_index() == 0:
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def init_from_source(config) -> tuple[pathlib.Path, int]:
  """(the other run's workdir, resolved; the epoch) of `config.init_from` ('<workdir>:<epoch>')."""
  source, _, epoch_text = str(config.init_from).rpartition(":")
  if not source or not epoch_text.isdigit():
    raise ConfigError(f"config.init_from: expected '<workdir>:<epoch>', got {config.init_from!r}")
  return pathlib.Path(source).resolve(), int(epoch_text)


def init_from(config, template, steps_per_epoch: int, num_classes: int):
  """The state of another run at the end of an epoch, for a run that trains like it until then.

  `config.init_from` is '<workdir>:<epoch>'. The other run's config must equal this one in every
  field but the loss, the loss sub-trees and how a run is kept or reported (`INIT_FROM_FREE`);
  its loss must be this loss's `before` entry (or this loss), and `epoch` must not pass this loss's
  start epoch — so the restored state is the one this run would have reached itself. Loss-state
  fields the other run does not carry start at their initial values, as they would here (a deferred
  entry's own state is untouched before its start).
  """
  source, epoch = init_from_source(config)
  before = lineage.check_same_config(source, config, label="config.init_from", free=INIT_FROM_FREE,
                                     why="only the loss and its start may differ")
  entry = registry.get(config.loss)
  if before["loss"] not in (config.loss, entry.before if entry.start else config.loss):
    raise ConfigError(f"config.init_from: {source} trained loss {before['loss']!r}, but "
                      f"{config.loss!r} trains as {entry.before!r} before its start")
  if epoch > registry.start_epoch(config) and before["loss"] != config.loss:
    raise ConfigError(f"config.init_from: epoch {epoch} is after the start of {config.loss!r} "
                      f"(epoch {registry.start_epoch(config)}): the runs differ from there on")
  source_manager = ocp.CheckpointManager(source / "checkpoints")
  step = epoch * steps_per_epoch
  if step not in source_manager.all_steps():
    kept = sorted(s // steps_per_epoch for s in source_manager.all_steps()
                  if s % steps_per_epoch == 0)
    raise ConfigError(f"config.init_from: {source} has no checkpoint at the end of epoch {epoch} "
                      f"(step {step}); it kept epochs {kept}")
  source_template = template.replace(
      loss_state=registry.init_loss_state(_config_with_loss(config, before["loss"]), num_classes))
  restored = restore_step(source_manager, step, source_template)
  loss_state = {**template.loss_state, **{k: v for k, v in restored.loss_state.items()
                                          if k in template.loss_state}}
  return restored.replace(loss_state=loss_state)


# What a frozen encoder's run must share with the linear stage: the model and the training set.
ENCODER_FIELDS = ("model", *lineage.TRAINING_SET_FIELDS)


def _num_classes(template) -> int:
  return template.params["head"]["kernel"].shape[-1]


def load_frozen_encoder(config, template, image_shape):
  """`template` with every parameter but the head, and the BatchNorm statistics, from the latest
  checkpoint of the run `config.frozen_encoder_from` (the linear stage of a two-stage method, e.g.
  SupCon: the head starts fresh and is the only thing trained), or from a PyTorch weight file
  (`experiments.models.pretrained.weights`: a linear probe of a pretrained network). Returns (state,
  record)."""
  if weights.is_weight_file(config.frozen_encoder_from):  # a PyTorch weight file: a linear probe
    variables = weights.encoder_variables(config.frozen_encoder_from, config.model,
                                          train_state.base_model(config, _num_classes(template)),
                                          "frozen_encoder_from")
    return weights.with_encoder(template, variables), {
        "frozen_encoder_from": str(pathlib.Path(config.frozen_encoder_from).resolve())}
  source = pathlib.Path(config.frozen_encoder_from).resolve()
  before = ml_collections.ConfigDict(lineage.check_same_config(
      source, config, label="config.frozen_encoder_from", fields=ENCODER_FIELDS,
      why=f"the encoder's run must share the model and the training set "
          f"({', '.join(ENCODER_FIELDS)})"))
  num_classes = _num_classes(template)
  try:
    step, variables = read_variables(source, train_state.build_model(before, num_classes),
                                     image_shape)
  except (FileNotFoundError, CheckpointError) as error:
    raise ConfigError(f"config.frozen_encoder_from: {error}") from error
  params = {key: (value if key == "head" else variables["params"][key])
            for key, value in template.params.items()}
  batch_stats = {key: variables["batch_stats"][key] for key in template.batch_stats}
  state = template.replace(params=jax.tree.map(np.asarray, params),
                           batch_stats=jax.tree.map(np.asarray, batch_stats))
  return state, {"frozen_encoder_from": str(source), "frozen_encoder_step": step,
                 "frozen_encoder_loss": before.get("loss")}


def init_from_differences(before: dict, now: dict) -> list[str]:
  """Config fields (JSON dicts; leaves, 'a.b') in which two runs differ beyond `INIT_FROM_FREE`: a
  run may start from the other (`init_from`) only when this is empty."""
  return [field for field, _, _ in lineage.differences(before, now, free=INIT_FROM_FREE)]


def _config_with_loss(config, loss: str):
  config = config.copy_and_resolve_references()
  config.loss = loss
  return config
