"""What the training loop does after a step (`Events.after_step`), in order: the metrics of a
logging window written, the epoch-end pass of a method that has one (FairDRO's q), the training
set's per-class loss and NC metrics, the test accuracy, and the checkpoint — and the error a
diverged run stops with. Evaluation passes do not count as training time in images/s."""

from __future__ import annotations

import functools
import time

import jax
import numpy as np

from experiments.methods.method import EpochPass
from experiments.train import checkpoints
from experiments.train import evaluation
from experiments.train import metric_writer


def divergence_error(first_step, host_state, manager, loss_name: str) -> FloatingPointError:
  """The error a diverged run stops with: the first non-finite step, the per-class state entries
  that are not finite (field and classes), and the last good checkpoint (nothing later is written)."""
  bad = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(host_state.loss_state)[0]:
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.floating) and not np.all(np.isfinite(leaf)):
      classes = np.flatnonzero(~np.isfinite(leaf.reshape(leaf.shape[0], -1)).any(-1)).tolist()
      name = ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
      bad.append(f"{name} classes {classes}")
  params_finite = all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(host_state.params))
  last = manager.latest_step()
  return FloatingPointError(
      f"non-finite loss or state first at step {first_step} (loss {loss_name}); non-finite class "
      f"statistics: {'; '.join(bad) or 'none'}; parameters finite: {params_finite}; last good "
      f"checkpoint: " + (f"step {last} in {manager.directory}" if last is not None else "none")
      + " (no checkpoint of the diverged state was written)")


class Events:
  """The loop's work after each step of a run (`loop.Plan`), on its runner and checkpoints."""

  def __init__(self, run, runner, manager, start_step: int, *, show_progress: bool = True):
    self.run, self.runner, self.manager = run, runner, manager
    config = run.config
    is_main = jax.process_index() == 0
    self.writer = metric_writer.MetricWriter(run.workdir, is_main, start_step)
    self.progress = None
    if config.progress_bar and is_main and show_progress:
      # optional: tqdm only for the progress bar (config.progress_bar)
      from tqdm import tqdm  # pylint: disable=g-import-not-at-top
      self.progress = tqdm(total=run.total_steps * config.batch_size,
                           initial=start_step * config.batch_size, unit="img", unit_scale=True,
                           dynamic_ncols=True, desc=f"{config.loss} {config.dataset}")
    self.evaluate_train = functools.partial(
        evaluation.evaluate_split, runner, split=run.train, batch_size=config.eval_batch_size,
        num_classes=run.train.num_classes, process_index=jax.process_index(),
        process_count=jax.process_count())
    self.window, self.window_steps, self.window_start = None, 0, time.perf_counter()

  def after_step(self, step: int, state, metrics, input_state):
    """Everything due after global step `step` (1-based); returns the state (an epoch-end pass
    changes its loss state)."""
    self.count(metrics)
    return self.at(step, state, metrics, input_state) if self.due(step) else state

  def count(self, metrics) -> None:
    """One step's metrics added to the logging window."""
    self.window = metric_writer.accumulate(self.window, metrics)
    self.window_steps += 1
    if self.progress is not None:
      self.progress.update(self.run.config.batch_size)

  def logs(self, step: int) -> bool:
    """Whether the logging window ends at `step`."""
    return step % self.run.config.log_every_steps == 0 or step == self.run.total_steps

  def due(self, step: int) -> bool:
    """Whether `at` has anything to do after `step`: a logging window, an epoch, a checkpoint."""
    config = self.run.config
    return (self.logs(step) or step % self.run.steps_per_epoch == 0
            or step % config.checkpoint_every_steps == 0)

  def at(self, step: int, state, metrics, input_state):
    """The events of `step` once its metrics are counted (`due`): the logging window, the epoch's
    passes, the checkpoint; returns the state."""
    run, config = self.run, self.run.config
    if self.logs(step):
      self.log_window(step, state)
    epoch, epoch_ended = divmod(step, run.steps_per_epoch)
    if epoch_ended == 0:
      if run.recipe.epoch_end is not None:
        state = self.timed(self.epoch_end_pass, state, epoch)
      if config.class_loss_every_epochs and epoch % config.class_loss_every_epochs == 0:
        self.timed(self.training_set_pass, step, state)
      if config.test_every_epochs and epoch % config.test_every_epochs == 0:
        self.timed(self.test_pass, step, state)
    kept_epoch = epoch_ended == 0 and epoch in run.keep_epochs
    if step % config.checkpoint_every_steps == 0 or step == run.total_steps or kept_epoch:
      self.save(step, state, metrics, input_state)
    return state

  def timed(self, evaluate, *args):
    """`evaluate(*args)`, its time left out of the window's images/s (training time only)."""
    evaluation_start = time.perf_counter()
    result = evaluate(*args)
    self.window_start += time.perf_counter() - evaluation_start
    return result

  def write(self, step, scalars, per_class):
    try:
      self.writer.write(step, scalars, per_class)
    except metric_writer.MetricWriteError as error:
      raise metric_writer.MetricWriteError(
          f"{error}; the checkpoints up to step {self.manager.latest_step()} in "
          f"{self.manager.directory} are intact") from error

  def log_window(self, step: int, state) -> None:
    """The logging window's means (metrics.jsonl, class_history.jsonl); a non-finite one stops
    the run."""
    run, config, runner = self.run, self.run.config, self.runner
    first_nonfinite, scalars, per_class = metric_writer.window_means(runner.to_host(self.window))
    if first_nonfinite is not None:
      raise divergence_error(first_nonfinite, runner.to_host(state), self.manager, config.loss)
    elapsed = time.perf_counter() - self.window_start
    scalars["train_accuracy"] = scalars.pop("train_correct") / (
        self.window_steps * config.batch_size * run.recipe.views)
    scalars.update(epoch=step / run.steps_per_epoch,
                   images_per_sec=self.window_steps * config.batch_size / elapsed)
    self.write(step, scalars, per_class)
    if self.progress is not None:
      self.progress.set_postfix(loss=f"{scalars['loss']:.3f}", epoch=f"{scalars['epoch']:.1f}")
    self.window, self.window_steps, self.window_start = None, 0, time.perf_counter()

  def epoch_end_pass(self, state, epoch: int):
    """A state set from the training set (FairDRO's q): one eval-mode pass, no augmentation."""
    config, runner = self.run.config, self.runner
    sums = self.evaluate_train(state)
    host = runner.to_host(state)
    return runner.place_state(host.replace(loss_state=self.run.recipe.epoch_end(
        host.loss_state, EpochPass(sums.loss_sums, sums.correct, sums.counts), epoch - 1,
        config.num_epochs)))

  def training_set_pass(self, step: int, state) -> None:
    """L_c and ρ on the training set, with `nc_metrics` NC1–NC4 (the terminal-phase claims)."""
    config = self.run.config
    sums = self.evaluate_train(state, neural_collapse=config.nc_metrics, head_kind=config.head)
    class_loss, loss_rho = evaluation.training_class_loss(sums)
    scalars = {"epoch": step / self.run.steps_per_epoch, "train_rho": loss_rho}
    if config.nc_metrics:
      params = self.runner.to_host(state).params
      nc = evaluation.neural_collapse_metrics(sums, config.head, params)
      scalars.update({f"train_{name}": value for name, value in nc.items() if name != "rho"})
      balanced = evaluation.neural_collapse_metrics(sums, config.head, params,
                                                    centring="class_balanced")
      scalars.update({f"train_{name}_balanced": value for name, value in balanced.items()})
    self.write(step, scalars, {"train_class_ce": class_loss})

  def test_pass(self, step: int, state) -> None:
    accuracy, class_accuracy = evaluation.test_accuracy(
        self.evaluate_train(state, split=self.run.test))
    self.write(step, {"epoch": step / self.run.steps_per_epoch, "test_accuracy": accuracy},
               {"test_class_accuracy": class_accuracy})

  def save(self, step: int, state, metrics, input_state) -> None:
    """The checkpoint of `step`; never of a diverged state."""
    runner, manager = self.runner, self.manager
    if not bool(runner.to_host(metrics["finite"])):
      first_nonfinite, _, _ = metric_writer.window_means(runner.to_host(self.window))
      raise divergence_error(first_nonfinite or step, runner.to_host(state), manager,
                             self.run.config.loss)
    try:
      checkpoints.save(manager, step, checkpoints.to_checkpoint(runner.to_host(state)),
                       input_state)
    except OSError as error:
      raise checkpoints.CheckpointError(
          f"cannot write the checkpoint of step {step} in {manager.directory}: "
          f"{error.strerror or error}; the checkpoint of step {manager.latest_step()} is "
          f"intact") from error

  def close(self) -> None:
    if self.progress is not None:
      self.progress.close()
    self.writer.close()
