"""torchvision's `RandomResizedCrop` on PIL images, in NumPy on uint8 batches [B, H, W, 3]: crop
boxes drawn as torchvision draws them, each resized back with Pillow's two-pass BILINEAR resize
(its antialiasing filter, its 22-bit fixed point), bit for bit. The SimCLR views and the
'inception' augmentation start with it."""

from __future__ import annotations

import functools
import math

import numpy as np

from experiments.data.crop_flip import process_rows
from experiments.data.pillow_ops import check_images, per_image

_PRECISION_BITS = 22  # Pillow's 8-bit resampling: coefficients in 32 − 8 − 2 bits of fixed point.


@functools.lru_cache(maxsize=None)
def _bilinear_coefficients(in_size: int, out_size: int) -> np.ndarray:
  """float64 [out, in]: Pillow's 8-bit bilinear resampling weights (Resample.c precompute_coeffs,
  triangle filter widened by the downscale factor, normalised per output pixel, then rounded to
  22-bit fixed point), as exact integers."""
  scale = in_size / out_size
  filter_scale = max(scale, 1.0)
  support = 1.0 * filter_scale
  weights = np.zeros((out_size, in_size))
  for out in range(out_size):
    centre = 0.0 + (out + 0.5) * scale
    first = max(int(centre - support + 0.5), 0)
    count = min(int(centre + support + 0.5), in_size) - first
    taps = [max(0.0, 1.0 - abs((x + first - centre + 0.5) * (1.0 / filter_scale)))
            for x in range(count)]
    total = 0.0
    for tap in taps:
      total += tap
    for x, tap in enumerate(taps):
      normalised = tap / total if total != 0.0 else tap
      weights[out, first + x] = int(0.5 + normalised * (1 << _PRECISION_BITS))
  weights.flags.writeable = False  # cached: shared by every call
  return weights


def _fixed_point_to_uint8(sums: np.ndarray) -> np.ndarray:
  """Pillow's clip8 of a resampling sum: (sum + 2^21) >> 22 (the sums are exact integers in
  float64). Pillow also clips to 0..255; bilinear weights are non-negative and sum to 2^22 up to
  their rounding (±½ each), so the result already lies in 0..255."""
  return np.floor((sums + (1 << (_PRECISION_BITS - 1))) * (1.0 / (1 << _PRECISION_BITS))
                  ).astype(np.uint8)


def resized_crop(images: np.ndarray, top, left, height, width,
                 size: tuple[int, int] | None = None) -> np.ndarray:
  """torchvision `F.resized_crop` on a PIL image: crop rows [top, top + height) and columns
  [left, left + width) of each image, resize to `size` (default the input's H × W) with Pillow's
  BILINEAR `Image.resize` (horizontal pass, then vertical, each rounded to uint8 as Pillow does;
  a downscaled axis uses Pillow's widened, antialiasing filter). Crop boxes: scalars or [B]."""
  images = check_images(images)
  batch, in_height, in_width, channels = images.shape
  out_height, out_width = (in_height, in_width) if size is None else size
  boxes = [per_image(v, batch, np.int64) for v in (top, left, height, width)]
  top, left, height, width = boxes
  if np.any((height < 1) | (width < 1) | (top < 0) | (left < 0) | (top + height > in_height)
            | (left + width > in_width)):
    raise ValueError("resized_crop: every crop box must lie inside the image and be non-empty")
  # Dense per-image weights over the full input axis, zero outside the crop.
  cols = np.zeros((batch, out_width, in_width))
  rows = np.zeros((batch, out_height, in_height))
  for i in range(batch):
    cols[i, :, left[i]:left[i] + width[i]] = _bilinear_coefficients(int(width[i]), out_width)
    rows[i, :, top[i]:top[i] + height[i]] = _bilinear_coefficients(int(height[i]), out_height)
  # Horizontal pass: [B, W_in, H·C] → [B, W_out, H·C]; an axis left at its size is the identity
  # (Pillow skips that pass; the weights are then exactly 2^22 on the diagonal).
  by_column = np.transpose(images, (0, 2, 1, 3)).reshape(batch, in_width, in_height * channels)
  horizontal = _fixed_point_to_uint8(cols @ by_column.astype(np.float64))
  horizontal = np.transpose(horizontal.reshape(batch, out_width, in_height, channels), (0, 2, 1, 3))
  by_row = horizontal.reshape(batch, in_height, out_width * channels).astype(np.float64)
  vertical = _fixed_point_to_uint8(rows @ by_row)
  return vertical.reshape(batch, out_height, out_width, channels)


def random_resized_crop(images: np.ndarray, rng: np.random.Generator,
                        scale: tuple[float, float] = (0.2, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3), *, process_index: int = 0,
                        process_count: int = 1) -> np.ndarray:
  """torchvision `RandomResizedCrop(H, scale, ratio)`: per image up to 10 attempts of area
  H·W·U(scale) and aspect exp(U(log ratio)), w = round(√(area·aspect)), h = round(√(area/aspect));
  the first that fits gives the box, top-left uniform; if none fits, the centred crop of the
  whole image clamped to `ratio`. Then `resized_crop` back to H × W (Pillow bilinear).

  Draws, in this order: areas rng.uniform(*scale, (B, 10)), log-aspects rng.uniform(log r0,
  log r1, (B, 10)), tops rng.integers(0, H − h + 1), lefts rng.integers(0, W − w + 1), for
  B = the global batch (this process's rows × `process_count`), this process keeping its rows
  (`crop_flip.process_rows`): an example gets the same box whatever the number of processes, and
  one process draws as before.
  """
  images = check_images(images)
  local, height, width, _ = images.shape
  batch = local * process_count
  area = height * width * rng.uniform(scale[0], scale[1], (batch, 10))
  aspect = np.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1]), (batch, 10)))
  crop_w = np.round(np.sqrt(area * aspect)).astype(np.int64)
  crop_h = np.round(np.sqrt(area / aspect)).astype(np.int64)
  fits = (crop_w > 0) & (crop_w <= width) & (crop_h > 0) & (crop_h <= height)
  first = np.argmax(fits, axis=1)
  found = fits.any(axis=1)
  in_ratio = width / height
  if in_ratio < min(ratio):
    fallback_w, fallback_h = width, int(round(width / min(ratio)))
  elif in_ratio > max(ratio):
    fallback_w, fallback_h = int(round(height * max(ratio))), height
  else:
    fallback_w, fallback_h = width, height
  crop_w = np.where(found, crop_w[np.arange(batch), first], fallback_w)
  crop_h = np.where(found, crop_h[np.arange(batch), first], fallback_h)
  top = rng.integers(0, height - crop_h + 1)
  left = rng.integers(0, width - crop_w + 1)
  top = np.where(found, top, (height - crop_h) // 2)
  left = np.where(found, left, (width - crop_w) // 2)
  boxes = (process_rows(v, process_index, process_count) for v in (top, left, crop_h, crop_w))
  return resized_crop(images, *boxes)
