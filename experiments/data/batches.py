"""Training and evaluation batches of a `Split`, in plain NumPy.

A training epoch is a permutation from (seed, epoch) — of the split or of a sample of its positions
(JTT's up-sampled set) —, sharded over processes, cut into full batches, augmented
(`experiments.data.augmentations.augment_view`: crop + flip vectorised over the batch, or the
released recipe's AutoAugment / Cutout / SimCLR views) with random numbers drawn from (seed, epoch,
batch), in one or more views per example, with each row's dataset position and, for GLMC, a
re-balanced partner row. A batch is therefore a pure function of (seed, epoch, batch index,
process): training resumes mid-epoch exactly from the step alone (the grain pipeline checkpoints
its iterator state too and checks it against the step: `experiments.data.input_pipeline`).
Evaluation batches are every example in order, the last one padded; `measure_throughput` times
`train_batches` alone.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from experiments.common.errors import DataError
from experiments.data.augmentations import AUGMENTATIONS, augment_view, crop_flip_view_draws
from experiments.data.crop_flip import CROP_PADDING, process_rows
from experiments.data.normalization import normalize
from experiments.data.split import Split


class PairDraw(NamedTuple):
  """One step's pairing of a paired batch, drawn on the host for the global batch (a recipe's
  `pair` draw: GLMC's re-balanced partners, mixup's permutation)."""
  rows: np.ndarray                 # int [global batch] each row's partner's dataset position
  lam: float                       # the step's λ
  box: tuple[int, int, int, int]   # its CutMix box (y0, y1, x0, x1); zeros where none is cut


def steps_per_epoch(split: Split, batch_size: int, process_count: int = 1,
                    sample: np.ndarray | None = None) -> int:
  """Full batches per epoch and process; `batch_size` is per process. An epoch draws from `sample`
  (dataset positions, repeats allowed: JTT's up-sampled set) when given, else from the whole split."""
  if batch_size < 1 or process_count < 1:
    raise DataError(f"batch_size and process_count must be >= 1, got {batch_size}, {process_count}")
  size = len(split) if sample is None else len(sample)
  steps = size // process_count // batch_size
  if steps == 0:
    raise DataError(f"{size} examples do not fill one batch of {batch_size} on each of "
                    f"{process_count} process(es)")
  return steps


def check_sample(split: Split, sample: np.ndarray) -> np.ndarray:
  """`sample` as int64 dataset positions of `split`, refused (DataError) when outside [0, N)."""
  sample = np.asarray(sample)
  if sample.ndim != 1 or not np.issubdtype(sample.dtype, np.integer):
    raise DataError(f"sample: expected int dataset positions [M], got {sample.dtype} {sample.shape}")
  if len(sample) and (sample.min() < 0 or sample.max() >= len(split)):
    raise DataError(f"sample: positions must lie in [0, {len(split)}), got "
                    f"[{sample.min()}, {sample.max()}]")
  return sample.astype(np.int64)


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The example order of one epoch, shared by all processes."""
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def train_batches(split: Split, batch_size: int, *, seed: int, epoch: int, augment: bool,
                  process_index: int = 0, process_count: int = 1, start_batch: int = 0,
                  views: int = 1, sample: np.ndarray | None = None,
                  augmentation: str = "crop_flip",
                  pair: Callable[..., PairDraw] | None = None,
                  normalized: bool = True,
                  crops_on_device: bool = False) -> Iterator[dict[str, np.ndarray]]:
  """One epoch of full training batches for this process.

  The epoch's permutation (of the split, or of `sample`) is cut to steps · batch_size ·
  process_count examples (the remainder is dropped, so every batch is full and every process runs
  the same number of steps) and process p takes positions p, p + P, p + 2P, ... Batch b of that
  shard is a pure function of (seed, epoch, b, process), so `start_batch=b` resumes an interrupted
  epoch exactly.

  Args:
    augment: whether to augment at all; `augmentation` names how (`augment_view`).
    views: augmented views per example (SupCon's two, the released recipe's three); each view is
      augmented with its own draws (`augment_view`).
    sample: dataset positions an epoch draws from, repeats allowed (JTT's up-sampled training set:
      the epoch grows); default every position once.
    pair: a paired batch (GLMC's re-balanced partner rows, mixup's permuted global batch):
      pair(rng, global rows, H, W) → `PairDraw` (partner positions, λ, CutMix box), drawn with
      rng [seed, epoch, b, 1000] for the
      global batch (`global rows`: its dataset positions, every process's rows; this process takes
      its rows' partners), adds 'image_b' (augmented like 'image', key [seed, epoch, b, 1001]),
      'label_b', 'index_b', and 'lam' float32 [B] and 'box' int32 [B, 4] (the step's values on
      every row).
    normalized: images as float32 `normalize`d here (the in-memory pipeline), or as the uint8
      pixels, normalised on the device (`normalize(..., xp=jnp)`, the grain pipeline): 4× fewer
      bytes to the device.
    crops_on_device: no images: each view's crop + flip draws instead ('crop', and 'crop_b' for a
      paired batch), which the device cuts from its copy of the split
      (`experiments.data.device_crop_flip`; 'crop_flip', or no augmentation).

  Yields:
    {'image': float32 [batch_size, H, W, C] normalised, or uint8 ([batch_size, views, H, W, C]
     when views > 1), 'label': int32 [batch_size], 'index': int32 [batch_size] the examples'
     positions in `split` (LfF's per-example state is indexed by them)}; with crops_on_device
     'crop' int32 [batch_size, 3] ([batch_size, views, 3]) of (top, left, flip) in place of 'image'.
  """
  if not 0 <= process_index < process_count:
    raise DataError(f"process_index {process_index} not in [0, {process_count})")
  if views < 1:
    raise DataError(f"views must be >= 1, got {views}")
  if augmentation not in AUGMENTATIONS:
    raise DataError(f"augmentation: unknown {augmentation!r}; expected one of {AUGMENTATIONS}")
  sample = np.arange(len(split)) if sample is None else check_sample(split, sample)
  steps = steps_per_epoch(split, batch_size, process_count, sample)
  if not 0 <= start_batch <= steps:
    raise DataError(f"start_batch {start_batch} not in [0, {steps}]")
  order = epoch_order(len(sample), steps * batch_size * process_count, seed=seed, epoch=epoch)
  for b in range(start_batch, steps):
    rows = sample[global_batch_positions(order, b, batch_size * process_count)]
    yield train_batch(split, process_rows(rows, process_index, process_count), key=[seed, epoch, b],
                      augment=augment, process_index=process_index, process_count=process_count,
                      views=views, augmentation=augmentation, pair=pair, normalized=normalized,
                      global_indices=rows, crops_on_device=crops_on_device)


@functools.lru_cache(maxsize=4)
def epoch_order(num_examples: int, kept: int, *, seed: int, epoch: int) -> np.ndarray:
  """One epoch's positions (into `sample`, or the split), the permutation cut to `kept` = steps ·
  global batch: global batch b is the block [b·G, (b + 1)·G), and process p takes its rows p,
  p + P, p + 2P, ... (`global_batch_positions`). The one epoch order of the harness: the trainer's
  two pipelines call it.

  Read-only and cached for the few epochs in flight: the grain pipeline builds each batch by step
  (`input_pipeline.BatchAt`) in threads that share it (lru_cache is thread-safe)."""
  order = epoch_permutation(num_examples, seed, epoch)[:kept]
  order.flags.writeable = False
  return order


def global_batch_positions(order: np.ndarray, b: int, global_batch: int) -> np.ndarray:
  """Global batch b of an epoch's `epoch_order`."""
  return order[b * global_batch:(b + 1) * global_batch]


def train_batch(split: Split, indices: np.ndarray, *, key: list[int], augment: bool,
                process_index: int = 0, process_count: int = 1, views: int = 1,
                augmentation: str = "crop_flip", pair: Callable[..., PairDraw] | None = None,
                normalized: bool = True,
                global_indices: np.ndarray | None = None,
                crops_on_device: bool = False) -> dict[str, np.ndarray]:
  """The training batch of the split's rows `indices` (this process's rows of the global batch
  `global_indices`) with the draws of `key` ([seed, epoch, batch]); one element of
  `train_batches` (which documents the arguments and the result)."""
  batch_size = len(indices)
  if crops_on_device and augment and augmentation != "crop_flip":
    raise DataError(f"crops on the device: 'crop_flip' only, got augmentation {augmentation!r}")

  def images(rows, view_key):  # the rows' views, or the draws the device cuts them with
    if crops_on_device:
      return _view_draws(len(rows), views, augment, view_key, process_index, process_count)
    if split.is_features:
      return _feature_views(split, rows, views, augment)
    return _views(split, split.images[rows], views, augment, augmentation, view_key,
                  process_index, process_count, normalized)

  image_field = "crop" if crops_on_device else "image"
  batch = {image_field: images(indices, key), "label": split.labels[indices],
           "index": indices.astype(np.int32)}
  if pair is not None:
    # Keys apart from the views' ([seed, epoch, b, v ...], v < 1000).
    if global_indices is None or len(global_indices) != batch_size * process_count:
      raise DataError("a paired batch needs the global batch's positions (global_indices)")
    drawn = pair(np.random.default_rng([*key, 1000]), np.asarray(global_indices),
                 *split.images.shape[1:3])
    partners = process_rows(np.asarray(drawn.rows), process_index, process_count)
    batch.update({f"{image_field}_b": images(partners, [*key, 1001])},
                 label_b=split.labels[partners], index_b=partners.astype(np.int32),
                 lam=np.full(batch_size, drawn.lam, np.float32),
                 box=np.tile(np.asarray(drawn.box, np.int32), (batch_size, 1)))
  return batch


def _views(split: Split, raw: np.ndarray, views: int, augment: bool, augmentation: str,
           key: list[int], process_index: int, process_count: int,
           normalized: bool = True) -> np.ndarray:
  """The views of raw uint8 images, normalised (float32) or not (uint8): [B, H, W, C], or
  [B, V, H, W, C] for V > 1."""
  crops = [augment_view(raw, augmentation, v, key, process_index=process_index,
                        process_count=process_count) if augment else raw for v in range(views)]
  if normalized:
    crops = [normalize(crop, split.name) for crop in crops]
  return crops[0] if views == 1 else np.stack(crops, axis=1)


def _feature_views(split: Split, rows: np.ndarray, views: int, augment: bool) -> np.ndarray:
  """The views of features rows as they are: view 0 the features, view v the split's stored view
  v (`Split.extra_views`), or a copy of view 0 where none is stored (as an image without
  augmentation): [B, d], or [B, V, d] for V > 1."""
  if augment:
    raise DataError(f"Split {split.name!r} holds features, which are not augmented: set "
                    "config.augment = False")
  stored = 1 + (0 if split.extra_views is None else split.extra_views.shape[1])
  out = [split.images[rows] if v == 0 or v >= stored else split.extra_views[rows, v - 1]
         for v in range(views)]
  return out[0] if views == 1 else np.stack(out, axis=1)


def _view_draws(batch_size: int, views: int, augment: bool, key: list[int], process_index: int,
                process_count: int) -> np.ndarray:
  """The crop + flip draws of each view (`augmentations.crop_flip_view_draws`), without
  augmentation the uncropped image (top = left = padding, no flip): int32 [B, 3], or [B, V, 3]
  for V > 1."""
  if augment:
    draws = [crop_flip_view_draws(batch_size, v, key, process_index=process_index,
                                  process_count=process_count) for v in range(views)]
  else:
    draws = [np.tile(np.array([CROP_PADDING, CROP_PADDING, 0], np.int32), (batch_size, 1))] * views
  return draws[0] if views == 1 else np.stack(draws, axis=1)


def eval_batches(split: Split, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
  """All examples in order; the last batch is zero-padded to `batch_size`.

  Yields:
    {'image': float32 [batch_size, H, W, C], 'label': int32 [batch_size],
     'mask': bool [batch_size] (False on padding; reduce metrics with it)}.
  """
  if batch_size < 1:
    raise DataError(f"batch_size must be >= 1, got {batch_size}")
  for start in range(0, len(split), batch_size):
    images = split.images[start:start + batch_size]
    labels = split.labels[start:start + batch_size]
    num_real = len(labels)
    num_pad = batch_size - num_real
    if num_pad:
      images = np.concatenate([images, np.zeros((num_pad, *images.shape[1:]), images.dtype)])
      labels = np.concatenate([labels, np.zeros(num_pad, np.int32)])
    yield {"image": images if split.is_features else normalize(images, split.name),
           "label": labels,
           "mask": np.arange(batch_size) < num_real}


def measure_throughput(split: Split, batch_size: int, augment: bool, n_batches: int) -> float:
  """Images per second that `train_batches` alone produces (no model), over `n_batches` batches."""
  produced = 0
  epoch = 0
  start = time.perf_counter()
  while produced < n_batches:
    for batch in train_batches(split, batch_size, seed=0, epoch=epoch, augment=augment):
      produced += 1
      if produced == n_batches:
        break
    epoch += 1
  return n_batches * batch_size / (time.perf_counter() - start)
