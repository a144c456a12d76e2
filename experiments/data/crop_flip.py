"""Random crops and flips of uint8 batches [B, H, W, C]: `random_crop_flip`, the CIFAR augmentation
of He et al. (2016) (zero-pad, crop back at a random offset, flip half; the 'crop_flip'
augmentation, and view 0 of the released recipe before AutoAugment) with its draws
(`crop_flip_draws`, which the device path cuts with too), and `random_flip`,
torchvision's RandomHorizontalFlip (the SimCLR and Inception views)."""

from __future__ import annotations

import numpy as np

from experiments.data.pillow_ops import check_images

CROP_PADDING = 4


def process_rows(global_draws: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's rows of draws made for the whole global batch (leading axis): positions
  process_index, process_index + P, ... (P = `process_count`), its examples' positions in the
  global batch. Drawn so, every example gets the same draw whatever the number of processes, and
  one process keeps every row."""
  return global_draws[process_index::process_count]


def crop_flip_draws(rng: np.random.Generator, batch: int, padding: int = CROP_PADDING,
                    process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """The draws of `random_crop_flip` for this process's `batch` rows: int32 [batch, 3] of (top,
  left, flip), the crop's offsets in the padded image, each in [0, 2·padding], and 1 where it is
  mirrored.

  Drawn for the whole global batch (batch·process_count examples; tops, then lefts, then the flip
  coins), this process taking positions process_index, process_index + P, ... (its examples'
  positions in the global batch), so every example gets the same crop whatever the number of
  processes. The one draw of the augmentation: the host cuts with it (`random_crop_flip`), the
  device too (`experiments.data.device_crop_flip`), so the two make the same crops.
  """
  global_batch = batch * process_count
  top = rng.integers(0, 2 * padding + 1, size=global_batch)
  left = rng.integers(0, 2 * padding + 1, size=global_batch)
  flip = rng.random(global_batch) < 0.5
  draws = np.stack([top, left, flip], axis=1).astype(np.int32)
  return process_rows(draws, process_index, process_count)


def random_crop_flip(images: np.ndarray, rng: np.random.Generator,
                     padding: int = CROP_PADDING, process_index: int = 0,
                     process_count: int = 1) -> np.ndarray:
  """Zero-pad by `padding`, crop back to H x W at a random offset, flip half horizontally.

  The CIFAR augmentation of He et al. (2016), one gather for the whole batch [B, H, W, C], at the
  offsets of `crop_flip_draws` (drawn for the global batch: every example gets the same crop
  whatever the number of processes).
  """
  batch, height, width, _ = images.shape
  padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
  top, left, flip = crop_flip_draws(rng, batch, padding, process_index, process_count).T
  rows = top[:, None] + np.arange(height)
  cols = left[:, None] + np.where(flip[:, None] == 1, np.arange(width)[::-1], np.arange(width))
  return padded[np.arange(batch)[:, None, None], rows[:, :, None], cols[:, None, :]]


def random_flip(images: np.ndarray, rng: np.random.Generator, p: float = 0.5, *,
                process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """torchvision `RandomHorizontalFlip(p)`: each image mirrored left-right iff rng.random() < p,
  the coins drawn for the global batch (this process's rows × `process_count`), this process
  keeping its rows (`process_rows`)."""
  images = check_images(images)
  flip = process_rows(rng.random(len(images) * process_count) < p, process_index, process_count)
  out = images.copy()
  out[flip] = images[flip, :, ::-1]
  return out
