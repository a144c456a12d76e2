"""Crop + flip on the device (`config.input_on_device`): the 'crop_flip' augmentation cut from a
copy of the uint8 training split held in device memory, at the offsets the host path draws.

The host draws each view's (top, left, flip) with the generator and the calls of the host path
(`augmentations.crop_flip_view_draws`: the draws `crop_flip.random_crop_flip` cuts with) and sends
them with the rows' dataset positions — int32 [B, 3] per view and [B], instead of the images
[B, H, W, C] — (`batches.train_batch(..., crops_on_device=True)`). The device gathers the crops
from its copy of the split (`crop_flip_rows`), and the step normalises them with the host's
256-entry table (`normalization.normalize(..., xp=jnp)`, `steps.device_images`). Index arithmetic,
a gather and a table lookup, no float arithmetic: the uint8 crops and the float32 images are bit
for bit the host path's (tests/harness/data/test_device_crop_flip.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from experiments.data.crop_flip import CROP_PADDING

# The batch fields that carry a view's draws in place of its images ('image', 'image_b').
DRAW_FIELDS = {"crop": ("image", "index"), "crop_b": ("image_b", "index_b")}


def crop_flip_rows(images: jax.Array, rows: jax.Array, draws: jax.Array,
                   padding: int = CROP_PADDING) -> jax.Array:
  """The crops of rows `rows` of `images` at `draws`, as `crop_flip.random_crop_flip` cuts them.

  Pixel (i, j) of a crop at (top, left) is pixel (top + i − padding, left + j' − padding) of the
  row, j' = W − 1 − j when flipped and j otherwise, and zero (the padding) outside the image: one
  gather from the unpadded split, no padded copy.

  Args:
    images: uint8 [N, H, W, C], the split in device memory.
    rows: int [B], the rows' positions in `images`.
    draws: int32 [B, 3] or [B, V, 3] (V views of each row): (top, left, flip) each, offsets in the
      padded image in [0, 2·padding], flip 1 where the crop is mirrored.
    padding: the zero border the offsets are drawn in.

  Returns:
    uint8 [B, H, W, C], or [B, V, H, W, C].
  """
  height, width = images.shape[1:3]
  rows = rows.reshape(rows.shape + (1,) * (draws.ndim - 2))  # one row for each of its views
  top, left, flip = draws[..., 0], draws[..., 1], draws[..., 2]
  y = top[..., None] + jnp.arange(height) - padding  # [B, (V,) H]
  columns = jnp.where(flip[..., None] == 1, jnp.arange(width)[::-1], jnp.arange(width))
  x = left[..., None] + columns - padding  # [B, (V,) W]
  inside = (((y >= 0) & (y < height))[..., :, None] & ((x >= 0) & (x < width))[..., None, :])
  pixels = images[rows[..., None, None], jnp.clip(y, 0, height - 1)[..., :, None],
                  jnp.clip(x, 0, width - 1)[..., None, :]]
  return jnp.where(inside[..., None], pixels, jnp.zeros((), images.dtype))


def with_device_images(images: jax.Array, batch: dict, padding: int = CROP_PADDING) -> dict:
  """A batch of `batches.train_batch(..., crops_on_device=True)` as the host path gives it with
  uint8 images: 'image' cut from `images` at the rows 'index' with the draws 'crop' (a paired
  batch's 'image_b' at 'index_b' with 'crop_b'), the draw fields removed."""
  out = {k: v for k, v in batch.items() if k not in DRAW_FIELDS}
  for draws, (image, index) in DRAW_FIELDS.items():
    if draws in batch:
      out[image] = crop_flip_rows(images, batch[index], batch[draws], padding)
  return out
