"""Pillow's image operations in NumPy on uint8 batches [B, H, W, 3], bit for bit, one parameter per
image: the geometric ops (shear, translate, rotate), the per-channel lookups (autocontrast,
equalize, invert, solarize, posterize) and the enhancements (colour, contrast, brightness,
sharpness). They are AutoAugment's ops (`experiments.data.autoaugment`) and ColorJitter's
adjustments (`experiments.data.color_jitter`).

The reweighting paper's reference applies its transforms to one PIL image at a time (`autoaug.py`
of tongzixin716716/Inverse-Loss-Reweighting, a copy of DeepVoltaire/AutoAugment's `CIFAR10Policy`,
and torchvision's PIL transforms). Every operation here reproduces Pillow's own arithmetic (its
fixed-point nearest-neighbour affine, its bicubic filter, its float32 blend, its integer luma), so
its output equals Pillow's bit for bit; the tests compare each one with Pillow. The operations work
on a whole batch with one parameter per image, so AutoAugment applies each op once to the images
that drew it.

Where the reference code and the spec text differ, this module follows the code: ShearX/Y resample
BICUBIC (the reference's `Image.transform(..., Image.BICUBIC, ...)`); TranslateX/Y and Rotate use
NEAREST, Pillow's default there.
"""

from __future__ import annotations

import functools
import math

import numpy as np

FILL = 128  # grey fill of the geometric ops (the reference's fillcolor=(128, 128, 128))


def check_images(images: np.ndarray, name: str = "images") -> np.ndarray:
  """`images` as an ndarray; ValueError naming `name` unless uint8 [B, H, W, 3]."""
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f"{name}: expected uint8 [B, H, W, 3], got {images.dtype} {images.shape}")
  return images


def per_image(values, batch: int, dtype=np.float64) -> np.ndarray:
  """One parameter per image: a scalar is broadcast, an array must have shape [batch]."""
  values = np.asarray(values, dtype)
  if values.ndim == 0:
    return np.full(batch, values, dtype)
  if values.shape != (batch,):
    raise ValueError(f"expected a scalar or one parameter per image [{batch}], got shape "
                     f"{values.shape}")
  return values


def _batch_index(images: np.ndarray) -> np.ndarray:
  return np.arange(len(images))[:, None, None]


# ----------------------------------------------------------------------------------------------
# Geometric ops (Pillow `Image.transform(size, AFFINE, data, resample, fillcolor=(128,) * 3)`).
# Output pixel (x, y) reads the input at
#   (a0·(x + ½) + a1·(y + ½) + a2, a3·(x + ½) + a4·(y + ½) + a5);
# pixels whose source lies outside the image keep the fill.


def _bicubic(v1, v2, v3, v4, d):
  """Pillow's BICUBIC macro (Geometry.c), a = −0.5 cubic convolution, in its operation order."""
  p2 = -v1 + v3
  p3 = 2 * (v1 - v2) + v3 - v4
  p4 = -v1 + v2 - v3 + v4
  return v2 + d * (p2 + d * (p3 + d * p4))


def _bicubic_to_uint8(values: np.ndarray) -> np.ndarray:
  """Pillow's bicubic_filter32RGB output: ≤ 0 → 0, ≥ 255 → 255, else truncated."""
  return np.trunc(np.clip(values, 0.0, 255.0)).astype(np.uint8)


def _bicubic_taps(source: np.ndarray, size: int):
  """Clamped indices of the 4 taps around `source` (pixel-centre coordinates) and the fraction."""
  shifted = source - 0.5
  floor = np.floor(shifted)
  fraction = shifted - floor
  first = floor.astype(np.int64) - 1
  return [np.clip(first + k, 0, size - 1) for k in range(4)], fraction


def shear_x(images: np.ndarray, shear) -> np.ndarray:
  """Pillow `transform(AFFINE, (1, s, 0, 0, 1, 0), BICUBIC, fillcolor=128)`: output (x, y) reads
  the input at x' = x + ½ + s·(y + ½) on row y, interpolated along the row with Pillow's bicubic
  (a = −0.5, edge pixels repeated; the row coordinate falls on a pixel centre, where Pillow's 2-D
  filter reduces exactly to the 1-D one); x' outside [0, W) gives grey 128. `shear`: scalar or
  [B]."""
  images = check_images(images)
  batch, height, width, _ = images.shape
  s = per_image(shear, batch)[:, None, None]
  x = (np.arange(width) + 0.5)[None, None, :]
  y = (np.arange(height) + 0.5)[None, :, None]
  source = 1.0 * x + s * y + 0.0  # a0·x + a1·y + a2, in Pillow's order
  valid = (source >= 0) & (source < width)
  taps, fraction = _bicubic_taps(source, width)
  rows = np.broadcast_to(np.arange(height)[None, :, None], source.shape)
  b = _batch_index(images)
  values = [images[b, rows, tap].astype(np.float64) for tap in taps]
  out = _bicubic_to_uint8(_bicubic(*values, fraction[..., None]))
  out[~valid] = FILL
  return out


def shear_y(images: np.ndarray, shear) -> np.ndarray:
  """Pillow `transform(AFFINE, (1, 0, 0, s, 1, 0), BICUBIC, fillcolor=128)`: output (x, y) reads
  the input at y' = s·(x + ½) + y + ½ in column x, interpolated down the column with Pillow's
  bicubic; y' outside [0, H) gives grey 128. `shear`: scalar or [B]."""
  images = check_images(images)
  batch, height, width, _ = images.shape
  s = per_image(shear, batch)[:, None, None]
  x = (np.arange(width) + 0.5)[None, None, :]
  y = (np.arange(height) + 0.5)[None, :, None]
  source = s * x + 1.0 * y + 0.0
  valid = (source >= 0) & (source < height)
  taps, fraction = _bicubic_taps(source, height)
  cols = np.broadcast_to(np.arange(width)[None, None, :], source.shape)
  b = _batch_index(images)
  values = [images[b, tap, cols].astype(np.float64) for tap in taps]
  out = _bicubic_to_uint8(_bicubic(*values, fraction[..., None]))
  out[~valid] = FILL
  return out


def _translate_sources(offsets: np.ndarray, size: int) -> np.ndarray:
  """Source index per output index, Pillow's ImagingScaleAffine: position c + ½, advanced by 1.0
  per pixel (accumulated as Pillow does), truncated; negative positions are outside (-1)."""
  steps = np.ones((len(offsets), size))
  steps[:, 0] = offsets + 1.0 * 0.5
  positions = np.cumsum(steps, axis=1)  # sequential sums, like Pillow's `xo += a[0]`
  return np.where(positions < 0, -1, np.trunc(positions)).astype(np.int64)


def translate_x(images: np.ndarray, pixels) -> np.ndarray:
  """Pillow `transform(AFFINE, (1, 0, t, 0, 1, 0), NEAREST, fillcolor=128)`: output column x takes
  input column ⌊x + ½ + t⌋ (t > 0 moves content left); columns from outside are grey 128.
  `pixels` (t, fractional allowed): scalar or [B]."""
  images = check_images(images)
  batch, height, width, _ = images.shape
  source = _translate_sources(per_image(pixels, batch), width)  # [B, W]
  valid = (source >= 0) & (source < width)
  out = images[np.arange(batch)[:, None, None], np.arange(height)[None, :, None],
               np.clip(source, 0, width - 1)[:, None, :]]
  out[np.broadcast_to(~valid[:, None, :], out.shape[:3])] = FILL
  return out


def translate_y(images: np.ndarray, pixels) -> np.ndarray:
  """Pillow `transform(AFFINE, (1, 0, 0, 0, 1, t), NEAREST, fillcolor=128)`: output row y takes
  input row ⌊y + ½ + t⌋; rows from outside are grey 128. `pixels`: scalar or [B]."""
  images = check_images(images)
  batch, height, _, _ = images.shape
  source = _translate_sources(per_image(pixels, batch), height)  # [B, H]
  valid = (source >= 0) & (source < height)
  out = images[np.arange(batch)[:, None], np.clip(source, 0, height - 1)]
  out[~valid] = FILL
  return out


@functools.lru_cache(maxsize=1024)
def _rotation_fixed_point(degrees: float, width: int, height: int) -> tuple[int, ...]:
  """Pillow `Image.rotate`'s inverse affine matrix (about the centre (W/2, H/2), cos and sin
  rounded to 15 decimals) in the 16.16 fixed point of Geometry.c's affine_fixed, with the
  half-pixel offsets folded into the translation: (a0, a1, a2, a3, a4, a5)."""
  angle = -math.radians(degrees)
  m = [round(math.cos(angle), 15), round(math.sin(angle), 15), 0.0,
       round(-math.sin(angle), 15), round(math.cos(angle), 15), 0.0]
  cx, cy = width / 2, height / 2
  m[2], m[5] = m[0] * -cx + m[1] * -cy + m[2], m[3] * -cx + m[4] * -cy + m[5]
  m[2] += cx
  m[5] += cy

  def fix(v: float) -> int:
    return math.floor(v * 65536.0 + 0.5)

  return (fix(m[0]), fix(m[1]), fix(m[2] + m[0] * 0.5 + m[1] * 0.5),
          fix(m[3]), fix(m[4]), fix(m[5] + m[3] * 0.5 + m[4] * 0.5))


def _rotate_by(images: np.ndarray, degrees: float) -> np.ndarray:
  """Pillow `rotate(degrees)` of every image in [n, H, W, 3], uncovered pixels grey 128."""
  _, height, width, _ = images.shape
  degrees = degrees % 360.0
  # Pillow's exact fast paths (rotate: no centre or translation given).
  if degrees == 0:
    return images.copy()
  if degrees == 180:
    return images[:, ::-1, ::-1].copy()
  if degrees in (90, 270) and width == height:
    return np.rot90(images, 1 if degrees == 90 else -1, axes=(1, 2)).copy()
  a0, a1, a2, a3, a4, a5 = _rotation_fixed_point(degrees, width, height)
  y = np.arange(height, dtype=np.int64)[:, None]
  x = np.arange(width, dtype=np.int64)[None, :]
  source_x = (a2 + y * a1 + x * a0) >> 16  # arithmetic shift: floor, as in C on two's complement
  source_y = (a5 + y * a4 + x * a3) >> 16
  valid = (source_x >= 0) & (source_x < width) & (source_y >= 0) & (source_y < height)
  out = images[:, np.clip(source_y, 0, height - 1), np.clip(source_x, 0, width - 1)]
  out[:, ~valid] = FILL
  return out


def rotate(images: np.ndarray, degrees) -> np.ndarray:
  """The reference's `rotate_with_fill`: Pillow `rotate(degrees)` (counter-clockwise about the
  centre, NEAREST, same size) with the uncovered corners grey 128. Pillow computes the source pixel
  in 16.16 fixed point; this reproduces that arithmetic (and Pillow's exact 90°/180°/270° paths).
  `degrees`: scalar or [B]."""
  images = check_images(images)
  angles = per_image(degrees, len(images))
  out = np.empty_like(images)
  for angle in np.unique(angles):
    rows = np.flatnonzero(angles == angle)
    out[rows] = _rotate_by(images[rows], float(angle))
  return out


# ----------------------------------------------------------------------------------------------
# Per-channel lookup ops (Pillow ImageOps on RGB: one table per channel, from its histogram).


def _channel_histograms(images: np.ndarray) -> np.ndarray:
  """int64 [B, 3, 256]: per image and channel, the count of each value."""
  batch = len(images)
  keys = (np.arange(batch * 3).reshape(batch, 1, 1, 3) * 256 + images).ravel()
  return np.bincount(keys, minlength=batch * 3 * 256).reshape(batch, 3, 256)


def _apply_tables(images: np.ndarray, tables: np.ndarray) -> np.ndarray:
  """out[b, y, x, c] = tables[b, c, images[b, y, x, c]] (tables [B, 3, 256], clipped to 0..255)."""
  tables = np.clip(tables, 0, 255).astype(np.uint8)
  channel = np.arange(3)[None, None, None, :]
  return tables[np.arange(len(images))[:, None, None, None], channel, images]


def auto_contrast(images: np.ndarray) -> np.ndarray:
  """Pillow `ImageOps.autocontrast` (cutoff 0): per channel with lowest value lo < highest hi,
  v ↦ clip(trunc(v·255/(hi − lo) − lo·255/(hi − lo)), 0, 255) in float64; a flat channel is kept."""
  images = check_images(images)
  low = images.min(axis=(1, 2)).astype(np.float64)   # [B, 3]
  high = images.max(axis=(1, 2)).astype(np.float64)
  stretch = high > low
  scale = np.where(stretch, 255.0 / np.where(stretch, high - low, 1.0), 1.0)
  offset = np.where(stretch, -low * scale, 0.0)
  values = images * scale[:, None, None, :] + offset[:, None, None, :]
  return np.clip(np.trunc(values), 0, 255).astype(np.uint8)


def equalize(images: np.ndarray) -> np.ndarray:
  """Pillow `ImageOps.equalize`: per channel with histogram h over N pixels, step =
  (N − h[last non-empty value]) // 255, v ↦ min((step // 2 + Σ_{u<v} h[u]) // step, 255); a channel
  with one distinct value, or step = 0, is kept. Integer arithmetic throughout."""
  images = check_images(images)
  hist = _channel_histograms(images)
  pixels = images.shape[1] * images.shape[2]
  last = 255 - np.argmax(hist[..., ::-1] > 0, axis=-1)
  step = (pixels - np.take_along_axis(hist, last[..., None], -1)[..., 0]) // 255
  before = np.cumsum(hist, axis=-1) - hist
  equalised = (step[..., None] // 2 + before) // np.maximum(step, 1)[..., None]
  keep = ((hist > 0).sum(-1) <= 1) | (step == 0)
  tables = np.where(keep[..., None], np.arange(256), equalised)
  return _apply_tables(images, tables)


def invert(images: np.ndarray) -> np.ndarray:
  """Pillow `ImageOps.invert`: v ↦ 255 − v."""
  return 255 - check_images(images)


def solarize(images: np.ndarray, threshold) -> np.ndarray:
  """Pillow `ImageOps.solarize`: v ↦ v if v < threshold else 255 − v (threshold 256: identity;
  0: invert). `threshold`: scalar or [B], any real."""
  images = check_images(images)
  t = per_image(threshold, len(images))[:, None, None, None]
  return np.where(images < t, images, 255 - images).astype(np.uint8)


def posterize(images: np.ndarray, bits) -> np.ndarray:
  """Pillow `ImageOps.posterize`: keep the `bits` high bits, v ↦ v & ~(2^(8 − bits) − 1).
  `bits`: integers in 1..8, scalar or [B]."""
  images = check_images(images)
  bits = per_image(bits, len(images), np.int64)
  if np.any((bits < 1) | (bits > 8)):
    raise ValueError(f"posterize: bits must lie in 1..8, got {np.unique(bits)}")
  masks = (0xFF & ~((1 << (8 - bits)) - 1)).astype(np.uint8)
  return images & masks[:, None, None, None]


# ----------------------------------------------------------------------------------------------
# Enhancements (Pillow ImageEnhance: blend a degenerate image with the input).


def _blend(degenerate: np.ndarray, images: np.ndarray, factor) -> np.ndarray:
  """Pillow `Image.blend(degenerate, image, factor)`: degenerate + factor·(image − degenerate) in
  float32 (factor is a C float), clipped to [0, 255] and truncated."""
  alpha = per_image(factor, len(images)).astype(np.float32)[:, None, None, None]
  base = np.broadcast_to(degenerate, images.shape)
  difference = (images.astype(np.int16) - base).astype(np.float32)
  values = base.astype(np.float32) + alpha * difference
  return np.trunc(np.clip(values, 0, 255)).astype(np.uint8)


def luma(images: np.ndarray) -> np.ndarray:
  """uint8 [B, H, W]: Pillow's RGB → 'L' (ITU-R 601-2 luma),
  (19595 R + 38470 G + 7471 B + 2^15) >> 16."""
  images = check_images(images).astype(np.int32)
  return ((images[..., 0] * 19595 + images[..., 1] * 38470 + images[..., 2] * 7471 + 0x8000)
          >> 16).astype(np.uint8)


def color(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Color(image).enhance(factor)`: blend of the grey image (luma, replicated
  to 3 channels) with the image; 0 grey, 1 identity. `factor`: scalar or [B]."""
  images = check_images(images)
  return _blend(luma(images)[..., None], images, factor)


def contrast(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Contrast(image).enhance(factor)`: blend of a constant image, the mean luma
  rounded half up (int(mean + 0.5)), with the image; 0 flat grey, 1 identity. `factor`: scalar or
  [B]."""
  images = check_images(images)
  grey = luma(images)
  mean = grey.sum(axis=(1, 2), dtype=np.int64) / (grey.shape[1] * grey.shape[2])
  level = np.floor(mean + 0.5).astype(np.uint8)
  return _blend(level[:, None, None, None], images, factor)


def brightness(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Brightness(image).enhance(factor)`: v ↦ clip(trunc(factor·v)) (a blend
  with black, float32). `factor`: scalar or [B]."""
  images = check_images(images)
  return _blend(np.zeros((), np.uint8), images, factor)


def smooth(images: np.ndarray) -> np.ndarray:
  """Pillow `filter(ImageFilter.SMOOTH)`: 3×3 kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13 rounded
  to nearest (Pillow sums in float32 with +0.5; as S/13 is never within 1/26 of a half, that is
  exactly (2S + 13) // 26), border rows and columns copied."""
  images = check_images(images)
  wide = images.astype(np.int32)
  sums = 4 * wide[:, 1:-1, 1:-1]
  for dy in range(3):
    for dx in range(3):
      sums = sums + wide[:, dy:dy + wide.shape[1] - 2, dx:dx + wide.shape[2] - 2]
  out = images.copy()
  out[:, 1:-1, 1:-1] = (2 * sums + 13) // 26
  return out


def sharpness(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Sharpness(image).enhance(factor)`: blend of `smooth(image)` with the
  image; 0 smoothed, 1 identity, 2 sharpened; the border pixels never change. `factor`: scalar or
  [B]."""
  images = check_images(images)
  return _blend(smooth(images), images, factor)
