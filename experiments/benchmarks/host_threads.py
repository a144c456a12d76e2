"""Images/s of the 'numpy' training input (`input_pipeline.NumpyInput`, the trainer's own path) per
host thread count (`config.data_workers`), on a CIFAR-10-LT-sized in-memory split, for crop + flip
(the standard recipes) and the released reweighting recipe's three views (AutoAugment + Cutout and
two SimCLR views). It says how many host cores keep an accelerator step of R images/s fed
(issue 17.3: the pipeline must not be the bound of `tools/reference.sh`).

Thread counts are measured interleaved, round by round, in one process (this machine is shared and
noisy: compare the ratios within a run); each figure is the median over rounds.

  python -m experiments.benchmarks.host_threads --threads=0,1,2 --out=results/benchmarks
"""

from __future__ import annotations

import os
import platform

import numpy as np
from absl import app
from absl import flags

from experiments.benchmarks.report import write_report
from experiments.benchmarks.timing import time_calls
from experiments.data import batches as batches_lib
from experiments.data import in_memory_sources
from experiments.data import loading
from experiments.data.split import Split
from experiments.data import input_pipeline

_THREADS = flags.DEFINE_list("threads", ["0", "1", "2"],
                             "data_workers values to time (0: one thread, as 1).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median is reported.")
_BATCH = flags.DEFINE_integer("batch_size", 128, "Images per batch.")
_DATA_DIR = flags.DEFINE_string("data_dir", None,
                                "CIFAR-10 JPEG folder (default: random pixels of the same shape).")
_OUT = flags.DEFINE_string("out", None, "Folder for host_threads.{json,md} (default: print).")

# (augmentation, views, timed batches per measurement)
RECIPES = (("crop_flip", 1, 60), ("released", 3, 8))
LT_IMAGES = 12_406  # CIFAR-10-LT, imbalance factor 100


def lt_sized_split() -> Split:
  if _DATA_DIR.value:
    split = loading.load_split("cifar10_jpeg", "train", _DATA_DIR.value)
    keep = np.random.default_rng(0).permutation(len(split.labels))[:LT_IMAGES]
    return Split(split.images[keep], split.labels[keep], split.num_classes,
                 split.class_names, split.name)
  rng = np.random.default_rng(0)
  return Split(rng.integers(0, 256, (LT_IMAGES, 32, 32, 3), dtype=np.uint8),
               rng.integers(0, 10, LT_IMAGES).astype(np.int32), 10,
               in_memory_sources.CIFAR10_CLASS_NAMES, "cifar10_jpeg")


def images_per_second(split, augmentation: str, views: int, threads: int, batches: int) -> float:
  """Batches taken from `NumpyInput.batches` (placement a no-op), after one untimed batch."""
  steps_per_epoch = batches_lib.steps_per_epoch(split, _BATCH.value, 1, None)
  at = input_pipeline.BatchAt(split, _BATCH.value, steps_per_epoch, seed=0, augment=True,
                              views=views, augmentation=augmentation)
  stream = input_pipeline.make("numpy", at, 10 * steps_per_epoch, workers=threads).batches(
      0, lambda batch: batch)
  elapsed = sum(time_calls(lambda: next(stream), batches, warmup=1))
  stream.close()
  return batches * _BATCH.value / elapsed


def main(argv):
  del argv
  split = lt_sized_split()
  threads = [int(t) for t in _THREADS.value]
  times = {(aug, t): [] for aug, _, _ in RECIPES for t in threads}
  for _ in range(_ROUNDS.value):
    for augmentation, views, batches in RECIPES:
      for t in threads:
        times[augmentation, t].append(
            images_per_second(split, augmentation, views, t, batches))
  result = {
      "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor()},
      # The data's kind, not its folder (a local path says nothing to a reader).
      "data": "CIFAR-10 as JPEG" if _DATA_DIR.value else "random pixels",
      "batch_size": _BATCH.value,
      "images_per_second": {f"{aug}/threads={t}": {"median": float(np.median(v)),
                                                    "min": min(v), "max": max(v)}
                            for (aug, t), v in times.items()}}
  lines = [f"'numpy' input, CIFAR-10-LT-sized split ({LT_IMAGES:,} images, {result['data']}), "
           f"batch {_BATCH.value}, {os.cpu_count()} CPU cores; images/s, median (min–max) of "
           f"{_ROUNDS.value} interleaved rounds:", "",
           "| recipe | " + " | ".join(f"data_workers={t}" for t in threads) + " |",
           "|---|" + "---|" * len(threads)]
  for augmentation, views, _ in RECIPES:
    cells = []
    for t in threads:
      v = times[augmentation, t]
      cells.append(f"{np.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})")
    lines.append(f"| {augmentation} ({views} view{'s' * (views > 1)}) | " + " | ".join(cells) + " |")
  write_report(_OUT.value, "host_threads", result, lines)


if __name__ == "__main__":
  app.run(main)
