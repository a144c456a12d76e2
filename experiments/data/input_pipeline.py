"""The training input of a run: one interface (`TrainInput`) over two pipelines, picked by name
(`config.input_pipeline`, `PIPELINES`):

  'numpy'  batches built in a host thread (or in `config.data_workers` threads, in step order),
           normalised to float32 on the host; the fastest for the small in-memory data sets
           (digits, MNIST, CIFAR at 32×32). NumPy's copies release the GIL, so threads scale with
           the host's cores (crop + flip: 42.9 k images/s in one thread, 80.7 k in two on this
           project's 2-core CPU; `experiments/benchmarks/host_threads.py`).
  'grain'  a `grain.MapDataset` over the run's steps, each element built in `config.data_workers`
           worker processes (decode of the rows a lazy split reads, augmentation), uint8 pixels sent
           to the device and normalised there (`steps.device_images`), placed on the device ahead
           of the step; grain's iterator state is saved in the train state's orbax checkpoint
           (item 'input', one file per process) and restored with it.

Both build batch g of the run with one function (`BatchAt`): batch b = g mod S of epoch g // S
(S steps per epoch) is `batches.train_batch` of that epoch's global batch b (this process's rows),
a pure function of (seed, epoch, b, process). So the two pipelines give the same rows, labels and
draws, and a resumed run sees the batches it would have seen; every batch carries its step, and
the trainer refuses a pipeline whose position is not the train state's step.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from absl import flags

from experiments.common.errors import DataError
from experiments.data.batches import epoch_order, global_batch_positions, train_batch
from experiments.data.split import Split
from experiments.data.threaded_map import threaded_map

PIPELINES = ("numpy", "grain")


@dataclasses.dataclass(frozen=True)
class BatchAt:
  """Batch g of a run (picklable: grain ships it to its worker processes).

  Attributes mirror `batches.train_batches`; `sample` is the positions an epoch draws from (the
  whole split by default), `normalized` whether images leave as float32 (host) or uint8,
  `crops_on_device` whether the crop draws leave in their place (the device cuts the images from
  its copy of the split: `experiments.data.device_crop_flip`).
  """
  split: Split
  batch_size: int
  steps_per_epoch: int
  seed: int
  augment: bool
  process_index: int = 0
  process_count: int = 1
  views: int = 1
  augmentation: str = "crop_flip"
  sample: np.ndarray | None = None
  pair: Callable[..., dict] | None = None
  normalized: bool = True
  crops_on_device: bool = False

  def __call__(self, step: int) -> tuple[int, dict[str, np.ndarray]]:
    epoch, b = divmod(int(step), self.steps_per_epoch)
    size = len(self.split) if self.sample is None else len(self.sample)
    global_batch = self.batch_size * self.process_count
    order = epoch_order(size, self.steps_per_epoch * global_batch, seed=self.seed, epoch=epoch)
    rows = global_batch_positions(order, b, global_batch)
    if self.sample is not None:
      rows = self.sample[rows]
    return int(step), train_batch(
        self.split, rows[self.process_index::self.process_count], key=[self.seed, epoch, b],
        augment=self.augment, process_index=self.process_index,
        process_count=self.process_count, views=self.views, augmentation=self.augmentation,
        pair=self.pair, normalized=self.normalized, global_indices=rows,
        crops_on_device=self.crops_on_device)


class TrainInput:
  """Batches of a run from step `start_step` on: iterate `batches(start_step, place)` for
  (step, placed batch, input state after it); `input_state` is what the checkpoint keeps
  (None: the position is the step itself)."""

  saves_state = False  # whether the checkpoint keeps its position (else the step is it)
  uint8_to_device = False  # whether images leave as uint8, normalised on the device

  def __init__(self, batch_at: BatchAt, total_steps: int, workers: int = 0,
               restored_state: dict | None = None):
    self.batch_at, self.total_steps, self.workers = batch_at, total_steps, workers
    self.restored_state = restored_state

  def batches(self, start_step: int, place: Callable[[dict], Any]) -> Iterator[tuple]:
    raise NotImplementedError


class NumpyInput(TrainInput):
  """Batches built in `workers` host threads (one when workers is 0; `threaded_map`, in step
  order, a few batches ahead of the step), float32 normalised on the host."""

  def batches(self, start_step, place):
    items = threaded_map(self.batch_at, range(start_step, self.total_steps),
                         max(1, self.workers))
    for step, batch in items:
      yield step, place(batch), None


class GrainInput(TrainInput):
  """A `grain.MapDataset` over steps [start, total), built by `READ_THREADS` threads in each of
  `workers` processes (0: in this process), uint8 images; `DEVICE_PREFETCH` batches placed on the device ahead of the step (JAX
  copies asynchronously; flax's `prefetch_to_device` pattern, no thread). The input state is
  grain's iterator state after the batch with the start it counts from."""

  saves_state = True
  uint8_to_device = True
  DEVICE_PREFETCH = 2
  WORKER_BUFFER = 2  # batches each worker keeps ready
  # Threads building batches in each process (the decode releases the GIL) and the batches they
  # keep ahead; grain's defaults (16 threads, 500 elements) would hold 500 batches per process.
  READ_THREADS = 2
  READ_BUFFER = 4

  def batches(self, start_step, place):
    # optional: only the grain pipeline needs it
    import grain  # pylint: disable=g-import-not-at-top
    saved = self.restored_state
    start = start_step if saved is None else int(saved["start"])
    dataset = grain.MapDataset.range(start, self.total_steps).map(self.batch_at).to_iter_dataset(
        grain.ReadOptions(num_threads=self.READ_THREADS, prefetch_buffer_size=self.READ_BUFFER))
    if self.workers > 0:
      if not flags.FLAGS.is_parsed():  # grain reads its flags (outside an absl app: defaults)
        flags.FLAGS.mark_as_parsed()
      dataset = dataset.mp_prefetch(
          grain.MultiprocessingOptions(num_workers=self.workers,
                                       per_worker_buffer_size=self.WORKER_BUFFER),
          worker_init_fn=functools.partial(exit_with_parent, os.getpid()))
    iterator = iter(dataset)
    try:
      if saved is not None:
        iterator.set_state(saved["grain"])
      ahead = collections.deque()
      for step, batch in iterator:
        ahead.append((step, place(batch), {"start": start, "grain": iterator.get_state()}))
        if len(ahead) == self.DEVICE_PREFETCH:
          yield ahead.popleft()
      yield from ahead
    finally:
      iterator.close()  # stops the worker processes and reading threads


PARENT_POLL_SECONDS = 0.5


def exit_with_parent(parent_pid: int, worker_index: int = 0, worker_count: int = 0) -> None:
  """grain's `worker_init_fn`: a daemon thread that ends this worker process once `parent_pid` (the
  trainer) is gone. grain stops its workers when the iterator is closed, but a trainer killed
  outright (SIGKILL, the OOM killer) closes nothing, and its workers (and multiprocessing's resource
  tracker, which they keep open) would run on as orphans, holding memory. Polls `os.getppid()`:
  a process whose parent died is re-parented, so its parent pid changes."""
  del worker_index, worker_count

  def watch():
    while os.getppid() == parent_pid:
      time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watch, name="exit_with_parent", daemon=True).start()


REGISTRY = {"numpy": NumpyInput, "grain": GrainInput}


def make(name: str, batch_at: BatchAt, total_steps: int, *, workers: int = 0,
         restored_state: dict | None = None) -> TrainInput:
  """The pipeline `name` ('numpy' or 'grain') over the run's `total_steps` steps."""
  if name not in REGISTRY:
    raise DataError(f"input_pipeline: unknown {name!r}; expected one of {PIPELINES}")
  if not REGISTRY[name].saves_state and restored_state is not None:
    raise DataError(f"input_pipeline {name!r} keeps no state; got a saved one")
  return REGISTRY[name](batch_at, total_steps, workers, restored_state)
