"""Training metrics: means over the logging window, written as JSON lines and TensorBoard events."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from experiments.common.errors import MetricWriteError


_FLAGS = ("finite", "step")


@jax.jit
def accumulate(window: dict[str, Any] | None, metrics: dict[str, jax.Array]) -> dict[str, Any]:
  """Adds one step's metrics to the window: per entry the sum of its non-NaN values and their count
  (a per-class metric is NaN for a class absent from a batch); 'finite' as a logical and, and
  'first_nonfinite_step' the first step whose 'finite' was False (−1 while none was)."""
  def add(total, count, value):
    value = jnp.asarray(value, jnp.float32)
    known = ~jnp.isnan(value)
    return total + jnp.where(known, value, 0), count + known
  if window is None:
    window = {k: (jnp.zeros(jnp.shape(v), jnp.float32), jnp.zeros(jnp.shape(v), jnp.float32))
              for k, v in metrics.items() if k not in _FLAGS}
    window["finite"] = jnp.asarray(True)
    window["first_nonfinite_step"] = jnp.asarray(-1, jnp.int32)
  out = {k: add(*window[k], metrics[k]) for k in metrics if k not in _FLAGS}
  out["finite"] = window["finite"] & metrics["finite"]
  out["first_nonfinite_step"] = jnp.where(window["finite"] & ~metrics["finite"],
                                          metrics["step"].astype(jnp.int32),
                                          window["first_nonfinite_step"])
  return out


def window_means(window: dict[str, Any]) -> tuple[int | None, dict[str, float], dict[str, list]]:
  """(first non-finite step or None, scalar means, per-class means) of a host copy of the window; a
  scalar never computed in the window is left out, a class never seen in a per-class entry is NaN.
  'train_correct' stays a sum (the caller divides by images)."""
  first_nonfinite = None if bool(window["finite"]) else int(window["first_nonfinite_step"])
  scalars, per_class = {}, {}
  for key, (total, count) in ((k, v) for k, v in window.items()
                              if k not in ("finite", "first_nonfinite_step")):
    total, count = np.asarray(total, np.float64), np.asarray(count, np.float64)
    if key == "train_correct":
      scalars[key] = float(total)
      continue
    with np.errstate(invalid="ignore", divide="ignore"):
      mean = np.where(count > 0, total / np.where(count > 0, count, 1), np.nan)
    if mean.ndim == 0:
      if count > 0:  # a scalar the window never computed (the other side of a deferred start)
        scalars[key] = float(mean)
    else:
      per_class[key] = mean.tolist()
  return first_nonfinite, scalars, per_class


HISTORY_FILES = ("metrics.jsonl", "class_history.jsonl")


def copy_history(source: pathlib.Path, workdir: pathlib.Path, last_step: int) -> None:
  """A run started from another run's checkpoint at `last_step` (`config.init_from`) inherits that
  run's records up to it: `workdir`'s metrics.jsonl and class_history.jsonl become the source's
  lines with step <= `last_step`, unchanged (the states this run's parameters went through, so its
  logs cover its whole training, e.g. ρ and NC1–NC4 from epoch 0 for a reweighting started at
  epoch 160). TensorBoard events are not copied. A missing source file copies nothing."""
  for name in HISTORY_FILES:
    if (source / name).exists():
      (workdir / name).write_text(_lines_up_to(source / name, last_step))


def _lines_up_to(path: pathlib.Path, step: int) -> str:
  """The JSON lines of a log whose step is <= `step`, unchanged."""
  kept = [line for line in path.read_text().splitlines()
          if line.strip() and json.loads(line)["step"] <= step]
  return "".join(line + "\n" for line in kept)


class MetricWriter:
  """JSON lines (metrics.jsonl, class_history.jsonl) and TensorBoard events (tensorboardX, no TF)."""

  def __init__(self, workdir: pathlib.Path, enabled: bool, start_step: int):
    self.enabled = enabled
    if not enabled:
      return
    # A resumed run repeats the steps after its last checkpoint: drop their earlier records.
    for name in HISTORY_FILES:
      path = workdir / name
      if path.exists():
        path.write_text(_lines_up_to(path, start_step))
    # optional: tensorboardX only on the process that writes the logs
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self.metrics = open(workdir / "metrics.jsonl", "a", encoding="utf-8")
    self.class_history = open(workdir / "class_history.jsonl", "a", encoding="utf-8")
    self.tensorboard = SummaryWriter(str(workdir / "tensorboard"))

  def write(self, step: int, scalars: dict[str, float], per_class: dict[str, list[float]]):
    """Appends one record; an OSError (a full disk) is a `MetricWriteError` naming file and step."""
    if not self.enabled:
      return
    target = self.metrics
    try:
      self.metrics.write(json.dumps({"step": step, **scalars}) + "\n")
      self.metrics.flush()
      if per_class:
        target = self.class_history
        self.class_history.write(json.dumps({"step": step, **per_class}) + "\n")
        self.class_history.flush()
      target = None
      for name, value in scalars.items():
        self.tensorboard.add_scalar(name, value, step)
    except OSError as error:
      where = target.name if target is not None else "tensorboard/"
      raise MetricWriteError(f"cannot write training metrics to {where} at step {step}: "
                             f"{error.strerror or error}") from error

  def close(self):
    if self.enabled:
      self.metrics.close()
      self.class_history.close()
      self.tensorboard.close()
