"""Host-side augmentations of the reweighting paper's released recipe (PIPELINES spec §1), in NumPy.

Every function takes and returns uint8 images [B, H, W, 3] and draws its randomness from a
`np.random.Generator`, so a batch is a pure function of (images, generator state):

  reference_view0  view 0: pad-4 random crop + flip → AutoAugment (CIFAR-10 policy) → Cutout 16×16;
  simclr_view      views 1, 2: RandomResizedCrop(scale 0.2–1) → flip → ColorJitter(0.4, 0.4, 0.4,
                   0.1) w.p. 0.8 → grayscale w.p. 0.2.

Normalisation comes afterwards (`experiments.data.datasets.normalize`).

The reference applies these to one PIL image at a time (`autoaug.py` of tongzixin716716/
Inverse-Loss-Reweighting, a copy of DeepVoltaire/AutoAugment's `CIFAR10Policy`, and torchvision's
PIL transforms). Every image operation here reproduces Pillow's own arithmetic (its fixed-point
nearest-neighbour affine, its bicubic and two-pass bilinear filters, its float32 blend, its
integer luma, its HSV conversions), so its output equals Pillow's bit for bit; the tests compare
each one with Pillow. The operations work on a whole batch with one parameter per image, so
AutoAugment applies each op once to the images that drew it.

Where the reference code and the spec text differ, this module follows the code and says so:
  * ShearX/Y resample BICUBIC (the reference's `Image.transform(..., Image.BICUBIC, ...)`);
    TranslateX/Y and Rotate use NEAREST, Pillow's default there.
  * Magnitude levels are the code's `np.linspace` tables (they equal the spec's formulas up to
    float rounding): shear 0.3·m/9, translate (150/331)·m/9 of the image side in pixels
    (fractional; Pillow's nearest-neighbour affine then picks the source pixel), rotate 30°·m/9
    counter-clockwise (never negated), enhancement factor 1 ± 0.9·m/9, posterize round(8 − 4m/9)
    bits, solarize threshold 256·(1 − m/9).
  * Cutout zeroes rows/columns [c − 8, c + 8) ∩ [0, 32) around a centre c drawn uniformly from
    {0, ..., 31}², as the reference's `Cutout(1, 16)` (before normalisation, so 0 is black).
Random draws use NumPy, not Python's `random` or torch: distributions equal the reference's,
individual draws do not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from experiments.data.datasets import random_crop_flip

FILL = 128  # grey fill of the geometric ops (the reference's fillcolor=(128, 128, 128))

_PRECISION_BITS = 22  # Pillow's 8-bit resampling: coefficients in 32 − 8 − 2 bits of fixed point.


def _check_images(images: np.ndarray, name: str = "images") -> np.ndarray:
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f"{name}: expected uint8 [B, H, W, 3], got {images.dtype} {images.shape}")
  return images


def _per_image(values, batch: int, dtype=np.float64) -> np.ndarray:
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
  images = _check_images(images)
  batch, height, width, _ = images.shape
  s = _per_image(shear, batch)[:, None, None]
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
  images = _check_images(images)
  batch, height, width, _ = images.shape
  s = _per_image(shear, batch)[:, None, None]
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
  images = _check_images(images)
  batch, height, width, _ = images.shape
  source = _translate_sources(_per_image(pixels, batch), width)  # [B, W]
  valid = (source >= 0) & (source < width)
  out = images[np.arange(batch)[:, None, None], np.arange(height)[None, :, None],
               np.clip(source, 0, width - 1)[:, None, :]]
  out[np.broadcast_to(~valid[:, None, :], out.shape[:3])] = FILL
  return out


def translate_y(images: np.ndarray, pixels) -> np.ndarray:
  """Pillow `transform(AFFINE, (1, 0, 0, 0, 1, t), NEAREST, fillcolor=128)`: output row y takes
  input row ⌊y + ½ + t⌋; rows from outside are grey 128. `pixels`: scalar or [B]."""
  images = _check_images(images)
  batch, height, _, _ = images.shape
  source = _translate_sources(_per_image(pixels, batch), height)  # [B, H]
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
  images = _check_images(images)
  angles = _per_image(degrees, len(images))
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
  images = _check_images(images)
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
  images = _check_images(images)
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
  return 255 - _check_images(images)


def solarize(images: np.ndarray, threshold) -> np.ndarray:
  """Pillow `ImageOps.solarize`: v ↦ v if v < threshold else 255 − v (threshold 256: identity;
  0: invert). `threshold`: scalar or [B], any real."""
  images = _check_images(images)
  t = _per_image(threshold, len(images))[:, None, None, None]
  return np.where(images < t, images, 255 - images).astype(np.uint8)


def posterize(images: np.ndarray, bits) -> np.ndarray:
  """Pillow `ImageOps.posterize`: keep the `bits` high bits, v ↦ v & ~(2^(8 − bits) − 1).
  `bits`: integers in 1..8, scalar or [B]."""
  images = _check_images(images)
  bits = _per_image(bits, len(images), np.int64)
  if np.any((bits < 1) | (bits > 8)):
    raise ValueError(f"posterize: bits must lie in 1..8, got {np.unique(bits)}")
  masks = (0xFF & ~((1 << (8 - bits)) - 1)).astype(np.uint8)
  return images & masks[:, None, None, None]


# ----------------------------------------------------------------------------------------------
# Enhancements (Pillow ImageEnhance: blend a degenerate image with the input).


def _blend(degenerate: np.ndarray, images: np.ndarray, factor) -> np.ndarray:
  """Pillow `Image.blend(degenerate, image, factor)`: degenerate + factor·(image − degenerate) in
  float32 (factor is a C float), clipped to [0, 255] and truncated."""
  alpha = _per_image(factor, len(images)).astype(np.float32)[:, None, None, None]
  base = np.broadcast_to(degenerate, images.shape)
  difference = (images.astype(np.int16) - base).astype(np.float32)
  values = base.astype(np.float32) + alpha * difference
  return np.trunc(np.clip(values, 0, 255)).astype(np.uint8)


def luma(images: np.ndarray) -> np.ndarray:
  """uint8 [B, H, W]: Pillow's RGB → 'L' (ITU-R 601-2 luma),
  (19595 R + 38470 G + 7471 B + 2^15) >> 16."""
  images = _check_images(images).astype(np.int32)
  return ((images[..., 0] * 19595 + images[..., 1] * 38470 + images[..., 2] * 7471 + 0x8000)
          >> 16).astype(np.uint8)


def color(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Color(image).enhance(factor)`: blend of the grey image (luma, replicated
  to 3 channels) with the image; 0 grey, 1 identity. `factor`: scalar or [B]."""
  images = _check_images(images)
  return _blend(luma(images)[..., None], images, factor)


def contrast(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Contrast(image).enhance(factor)`: blend of a constant image, the mean luma
  rounded half up (int(mean + 0.5)), with the image; 0 flat grey, 1 identity. `factor`: scalar or
  [B]."""
  images = _check_images(images)
  grey = luma(images)
  mean = grey.sum(axis=(1, 2), dtype=np.int64) / (grey.shape[1] * grey.shape[2])
  level = np.floor(mean + 0.5).astype(np.uint8)
  return _blend(level[:, None, None, None], images, factor)


def brightness(images: np.ndarray, factor) -> np.ndarray:
  """Pillow `ImageEnhance.Brightness(image).enhance(factor)`: v ↦ clip(trunc(factor·v)) (a blend
  with black, float32). `factor`: scalar or [B]."""
  images = _check_images(images)
  return _blend(np.zeros((), np.uint8), images, factor)


def smooth(images: np.ndarray) -> np.ndarray:
  """Pillow `filter(ImageFilter.SMOOTH)`: 3×3 kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]]/13 rounded
  to nearest (Pillow sums in float32 with +0.5; as S/13 is never within 1/26 of a half, that is
  exactly (2S + 13) // 26), border rows and columns copied."""
  images = _check_images(images)
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
  images = _check_images(images)
  return _blend(smooth(images), images, factor)


# ----------------------------------------------------------------------------------------------
# AutoAugment, CIFAR-10 policy.

# The 25 sub-policies of Cubuk et al. (2019), CIFAR-10, exactly as the reference's CIFAR10Policy:
# ((op, probability, magnitude level 0..9), (op, probability, level)); ops apply in order, each
# with its own probability.
CIFAR10_POLICY: tuple[tuple[tuple[str, float, int], tuple[str, float, int]], ...] = (
    (("invert", 0.1, 7), ("contrast", 0.2, 6)),
    (("rotate", 0.7, 2), ("translateX", 0.3, 9)),
    (("sharpness", 0.8, 1), ("sharpness", 0.9, 3)),
    (("shearY", 0.5, 8), ("translateY", 0.7, 9)),
    (("autocontrast", 0.5, 8), ("equalize", 0.9, 2)),
    (("shearY", 0.2, 7), ("posterize", 0.3, 7)),
    (("color", 0.4, 3), ("brightness", 0.6, 7)),
    (("sharpness", 0.3, 9), ("brightness", 0.7, 9)),
    (("equalize", 0.6, 5), ("equalize", 0.5, 1)),
    (("contrast", 0.6, 7), ("sharpness", 0.6, 5)),
    (("color", 0.7, 7), ("translateX", 0.5, 8)),
    (("equalize", 0.3, 7), ("autocontrast", 0.4, 8)),
    (("translateY", 0.4, 3), ("sharpness", 0.2, 6)),
    (("brightness", 0.9, 6), ("color", 0.2, 8)),
    (("solarize", 0.5, 2), ("invert", 0.0, 3)),
    (("equalize", 0.2, 0), ("autocontrast", 0.6, 0)),
    (("equalize", 0.2, 8), ("equalize", 0.6, 4)),
    (("color", 0.9, 9), ("equalize", 0.6, 6)),
    (("autocontrast", 0.8, 4), ("solarize", 0.2, 8)),
    (("brightness", 0.1, 3), ("color", 0.7, 0)),
    (("solarize", 0.4, 5), ("autocontrast", 0.9, 3)),
    (("translateY", 0.9, 9), ("translateY", 0.7, 9)),
    (("autocontrast", 0.9, 2), ("solarize", 0.8, 3)),
    (("equalize", 0.8, 8), ("invert", 0.1, 3)),
    (("translateY", 0.7, 9), ("autocontrast", 0.9, 1)),
)

_ENHANCE_LEVELS = np.linspace(0.0, 0.9, 10)

# Per op: (function of (images[, parameter]), the reference's magnitude table indexed by level, or
# None for the parameterless ops, whether the reference negates the magnitude with probability ½).
_OPS = {
    "shearX": (shear_x, np.linspace(0, 0.3, 10), True),
    "shearY": (shear_y, np.linspace(0, 0.3, 10), True),
    "translateX": (translate_x, np.linspace(0, 150 / 331, 10), True),
    "translateY": (translate_y, np.linspace(0, 150 / 331, 10), True),
    "rotate": (rotate, np.linspace(0, 30, 10), False),
    "color": (color, _ENHANCE_LEVELS, True),
    "posterize": (posterize, np.round(np.linspace(8, 4, 10), 0).astype(int), False),
    "solarize": (solarize, np.linspace(256, 0, 10), False),
    "contrast": (contrast, _ENHANCE_LEVELS, True),
    "sharpness": (sharpness, _ENHANCE_LEVELS, True),
    "brightness": (brightness, _ENHANCE_LEVELS, True),
    "autocontrast": (auto_contrast, None, False),
    "equalize": (equalize, None, False),
    "invert": (invert, None, False),
}
OP_NAMES = tuple(_OPS)


def op_parameter(name: str, level, sign, image_size: int = 32) -> np.ndarray:
  """float64 (per entry of `level`/`sign`): the argument the reference passes to op `name` at
  magnitude `level` (0..9) with random sign `sign` (±1; ignored by unsigned ops):
  shear s = ±table[level]; translate ±table[level]·image_size px (the side along the translation);
  rotate +table[level] degrees; color/contrast/sharpness/brightness factor 1 ± table[level];
  posterize bits; solarize threshold; NaN for the parameterless ops."""
  if name not in _OPS:
    raise ValueError(f"unknown AutoAugment op {name!r}; expected one of {OP_NAMES}")
  _, table, signed = _OPS[name]
  level = np.asarray(level, np.int64)
  if table is None:
    return np.full(level.shape, np.nan)
  magnitude = table[level].astype(np.float64)
  if name.startswith("translate"):
    magnitude = magnitude * image_size
  if signed:
    magnitude = magnitude * np.asarray(sign, np.float64)
  if name in ("color", "contrast", "sharpness", "brightness"):
    magnitude = 1 + magnitude
  return magnitude


def apply_op(name: str, images: np.ndarray, parameter) -> np.ndarray:
  """Op `name` of the policy table on a batch, with `parameter` (scalar or [B], see
  `op_parameter`; ignored by autocontrast, equalize, invert)."""
  if name not in _OPS:
    raise ValueError(f"unknown AutoAugment op {name!r}; expected one of {OP_NAMES}")
  fn, table, _ = _OPS[name]
  return fn(images) if table is None else fn(images, parameter)


def autoaugment(images: np.ndarray, rng: np.random.Generator,
                policy: Sequence = CIFAR10_POLICY) -> np.ndarray:
  """AutoAugment (Cubuk et al. 2019): per image one sub-policy drawn uniformly from `policy`, its
  two ops applied in order, each with its own probability (PIPELINES spec §1, the reference's
  CIFAR10Policy; magnitudes: `op_parameter`).

  Draws, in this order: sub-policy index rng.integers(len(policy), size=B); uniforms
  u = rng.random((B, 2)), op k applied iff u[:, k] < its probability; signs
  rng.random((B, 2)) < 0.5 → −1 else +1 (for the signed ops). All draws are made whatever is
  applied, so the generator advances the same for every batch of size B.
  """
  images = _check_images(images)
  batch, height, width, _ = images.shape
  chosen = rng.integers(len(policy), size=batch)
  uniforms = rng.random((batch, 2))
  signs = np.where(rng.random((batch, 2)) < 0.5, -1.0, 1.0)
  out = images.copy()
  for slot in range(2):
    names = np.array([sub_policy[slot][0] for sub_policy in policy])[chosen]
    probabilities = np.array([sub_policy[slot][1] for sub_policy in policy])[chosen]
    levels = np.array([sub_policy[slot][2] for sub_policy in policy])[chosen]
    applied = uniforms[:, slot] < probabilities
    for name in np.unique(names[applied]):
      rows = np.flatnonzero(applied & (names == name))
      size = width if name == "translateX" else height
      parameter = op_parameter(name, levels[rows], signs[rows, slot], size)
      out[rows] = apply_op(name, out[rows], parameter)
  return out


def cutout(images: np.ndarray, rng: np.random.Generator, size: int = 16) -> np.ndarray:
  """Cutout (DeVries & Taylor 2017) as the reference's Cutout(1, size): per image a centre (cy, cx)
  drawn uniformly from {0..H−1} × {0..W−1} (rng.integers(H, size=B), then the same for W); rows
  [cy − size//2, cy + size//2) and columns likewise, clipped to the image, set to 0. Always applied
  (size 16: 256 pixels for an interior centre, fewer at the border)."""
  images = _check_images(images)
  batch, height, width, _ = images.shape
  half = size // 2
  centre_y = rng.integers(height, size=batch)[:, None]
  centre_x = rng.integers(width, size=batch)[:, None]
  row = np.arange(height)[None, :]
  col = np.arange(width)[None, :]
  rows = (row >= centre_y - half) & (row < centre_y + half)
  cols = (col >= centre_x - half) & (col < centre_x + half)
  hole = rows[:, :, None] & cols[:, None, :]
  return np.where(hole[..., None], np.uint8(0), images)


def reference_view0(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """View 0 of the released recipe: zero-pad-4 random crop + horizontal flip
  (`experiments.data.datasets.random_crop_flip`) → `autoaugment` (CIFAR-10 policy) → `cutout` (16×16)."""
  images = _check_images(images)
  return cutout(autoaugment(random_crop_flip(images, rng), rng), rng)


# ----------------------------------------------------------------------------------------------
# SimCLR view (torchvision's transforms on PIL images).


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
  images = _check_images(images)
  batch, in_height, in_width, channels = images.shape
  out_height, out_width = (in_height, in_width) if size is None else size
  boxes = [_per_image(v, batch, np.int64) for v in (top, left, height, width)]
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
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> np.ndarray:
  """torchvision `RandomResizedCrop(H, scale, ratio)`: per image up to 10 attempts of area
  H·W·U(scale) and aspect exp(U(log ratio)), w = round(√(area·aspect)), h = round(√(area/aspect));
  the first that fits gives the box, top-left uniform; if none fits, the centred crop of the
  whole image clamped to `ratio`. Then `resized_crop` back to H × W (Pillow bilinear).

  Draws, in this order: areas rng.uniform(*scale, (B, 10)), log-aspects rng.uniform(log r0,
  log r1, (B, 10)), tops rng.integers(0, H − h + 1), lefts rng.integers(0, W − w + 1).
  """
  images = _check_images(images)
  batch, height, width, _ = images.shape
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
  return resized_crop(images, top, left, crop_h, crop_w)


def random_flip(images: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
  """torchvision `RandomHorizontalFlip(p)`: each image mirrored left-right iff rng.random() < p."""
  images = _check_images(images)
  flip = rng.random(len(images)) < p
  out = images.copy()
  out[flip] = images[flip, :, ::-1]
  return out


@functools.lru_cache(maxsize=None)
def _hsv_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Pillow's HSV conversions (Convert.c rgb2hsv_row and hsv2rgb, with their float32/float64 mix)
  evaluated once on every combination of the few quantities they depend on, so that a conversion
  is a lookup, exact by construction (the tests compare with Pillow). Returns

    hue [3, 256, 256] uint8: RGB → H for the sector of the maximum (0: R, 1: G, 2: B; Pillow tests
      R first, then G) at (max − c1, max − c2), where h = 2·sector + (max − c1)/C − (max − c2)/C,
      (c1, c2) = (B, G), (R, B), (G, R) and C = max − min, the larger of the two differences;
      H = trunc(255·float32(frac(h/6 + 1)));
    saturation [256, 256] uint8: RGB → S at (C, max), trunc(255·float32(C/max));
    factors [3, 256, 256] float64: HSV → RGB, channel (R, G, B) = round(V·factors[channel, S, H])
      with C's round: per colorsys sector i = ⌊6H/255⌋ the factor is 1 (the channel is V),
      1 − s' (p), 1 − float32(s'·f) (q) or 1 − s'(1 − f) (t), s' = float32(S/255),
      f = float32(6H/255 − i). S = 0 gives factors 1, Pillow's (V, V, V).
  """
  first, second = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
  chroma = np.maximum(first, second).astype(np.float32)
  chroma[chroma == 0] = 1  # (0, 0) is a grey pixel, never looked up
  hue = np.empty((3, 256, 256), np.uint8)
  for sector in range(3):
    # h in double as Pillow computes it (exact here), stored to a float32.
    h = (2.0 * sector + (first.astype(np.float32) / chroma).astype(np.float64)
         - (second.astype(np.float32) / chroma).astype(np.float64)).astype(np.float32)
    h = np.fmod(h.astype(np.float64) / 6.0 + 1.0, 1.0).astype(np.float32)
    hue[sector] = np.clip(np.trunc(h.astype(np.float64) * 255.0), 0, 255)
  maximum = np.where(second == 0, 1, second).astype(np.float32)
  saturation = (first.astype(np.float32) / maximum).astype(np.float64)
  saturation = np.clip(np.trunc(saturation * 255.0), 0, 255).astype(np.uint8)

  position = np.arange(256, dtype=np.float32).astype(np.float64) * 6.0 / 255.0  # by H
  sector = np.floor(position)
  f = (position - sector).astype(np.float32)[None, :]
  fs = (np.arange(256, dtype=np.float32).astype(np.float64) / 255.0).astype(np.float32)[:, None]
  ones = np.ones((256, 256))
  p = np.broadcast_to(1.0 - fs.astype(np.float64), (256, 256))
  q = 1.0 - (fs * f).astype(np.float64)
  t = 1.0 - fs.astype(np.float64) * (1.0 - f.astype(np.float64))
  roles = sector.astype(np.int64) % 6  # colorsys: (v, t, p), (q, v, p), (p, v, t), (p, q, v), ...
  factors = np.stack([np.choose(roles[None, :], (ones, q, p, p, t, ones)),
                      np.choose(roles[None, :], (t, ones, ones, q, p, p)),
                      np.choose(roles[None, :], (p, p, t, ones, ones, q))])
  for table in (hue, saturation, factors):
    table.flags.writeable = False  # cached: shared by every call
  return hue, saturation, factors


def rgb_to_hsv(images: np.ndarray) -> np.ndarray:
  """uint8 [B, H, W, 3]: Pillow's `convert('HSV')` (Convert.c rgb2hsv_row): V = max;
  S = trunc(255·(max − min)/max); H = trunc(255·frac(h/6 + 1)) with h the colorsys sector formula;
  grey pixels get H = S = 0. Bit-exact, through `_hsv_tables`."""
  images = _check_images(images)
  hue_table, saturation_table, _ = _hsv_tables()
  r, g, b = (images[..., k] for k in range(3))
  maxc = np.maximum(np.maximum(r, g), b)
  minc = np.minimum(np.minimum(r, g), b)
  r_max = r == maxc
  g_max = ~r_max & (g == maxc)
  # (c1, c2) of the sector: R max → (B, G), G max → (R, B), B max → (G, R).
  c1 = np.where(r_max, b, np.where(g_max, r, g))
  c2 = np.where(r_max, g, np.where(g_max, b, r))
  sector = (~r_max).astype(np.intp) + (~r_max & ~g_max)
  hue = hue_table.ravel()[(sector * 256 + (maxc - c1)) * 256 + (maxc - c2)]
  saturation = saturation_table.ravel()[(maxc - minc).astype(np.intp) * 256 + maxc]
  grey = maxc == minc
  hue[grey] = 0
  saturation[grey] = 0
  return np.stack([hue, saturation, maxc], axis=-1)


def _round_half_away(values: np.ndarray) -> np.ndarray:
  """C `round` for values ≥ 0 (ties away from zero; NumPy's round is ties-to-even)."""
  whole = np.trunc(values)
  return whole + (values - whole >= 0.5)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
  """uint8 [B, H, W, 3]: Pillow's HSV → RGB (Convert.c hsv2rgb): sector i = ⌊6H/255⌋, f its
  fraction, s' = S/255, p = round(V(1 − s')), q = round(V(1 − s'f)), t = round(V(1 − s'(1 − f)))
  (C's round), channels by sector as colorsys; S = 0 gives (V, V, V). Bit-exact, through
  `_hsv_tables`."""
  hsv = _check_images(hsv, "hsv")
  _, _, factors = _hsv_tables()
  h, s, v = (hsv[..., k] for k in range(3))
  index = s.astype(np.intp) * 256 + h
  value = v.astype(np.float64)
  flat = factors.reshape(3, -1)
  return np.stack([_round_half_away(value * flat[c][index]).astype(np.uint8) for c in range(3)],
                  axis=-1)


def adjust_hue(images: np.ndarray, hue_factor) -> np.ndarray:
  """torchvision `F.adjust_hue` on a PIL image: to HSV (Pillow), H += trunc(255·hue_factor)
  modulo 256, back to RGB (Pillow). `hue_factor` in [−0.5, 0.5]: scalar or [B]. Lossy even at 0
  (the HSV round trip), which is why ColorJitter skips it when hue = 0."""
  images = _check_images(images)
  factor = _per_image(hue_factor, len(images))
  if np.any(np.abs(factor) > 0.5):
    raise ValueError("adjust_hue: hue_factor must lie in [-0.5, 0.5]")
  hsv = rgb_to_hsv(images)
  shift = (np.trunc(factor * 255).astype(np.int64) % 256).astype(np.uint8)
  hsv[..., 0] += shift[:, None, None]  # uint8 wrap-around, as torchvision's
  return hsv_to_rgb(hsv)


# ColorJitter's adjustments, in torchvision's numbering (fn_idx 0..3); named here because the
# parameters of `color_jitter` shadow two of them.
_JITTER_ADJUSTMENTS = (brightness, contrast, color, adjust_hue)


def color_jitter(images: np.ndarray, rng: np.random.Generator, brightness: float = 0.4,
                 contrast: float = 0.4, saturation: float = 0.4, hue: float = 0.1,
                 p: float = 0.8) -> np.ndarray:
  """torchvision `RandomApply([ColorJitter(brightness, contrast, saturation, hue)], p)` on PIL
  images: w.p. p, the four adjustments in a random order (a per-image permutation), factors
  U(max(0, 1 − s), 1 + s) for brightness (`brightness`), contrast (`contrast`) and saturation
  (Pillow Color, `color`), hue shift U(−hue, hue) (`adjust_hue`). A strength of 0 skips that
  adjustment, as torchvision does (so all zeros is the identity).

  Draws, in this order: applied rng.random(B) < p; order argsort(rng.random((B, 4))); factors
  rng.uniform for brightness, contrast, saturation, hue, each (B,).
  """
  images = _check_images(images)
  batch = len(images)
  applied = rng.random(batch) < p
  order = np.argsort(rng.random((batch, 4)), axis=1)
  factors = [rng.uniform(max(0.0, 1.0 - s), 1.0 + s, batch)
             for s in (brightness, contrast, saturation)]
  factors.append(rng.uniform(-hue, hue, batch))
  strengths = (brightness, contrast, saturation, hue)
  out = images.copy()
  for position in range(4):
    for k, (adjust, strength) in enumerate(zip(_JITTER_ADJUSTMENTS, strengths)):
      rows = np.flatnonzero(applied & (order[:, position] == k))
      if strength != 0 and len(rows):
        out[rows] = adjust(out[rows], factors[k][rows])
  return out


def grayscale(images: np.ndarray) -> np.ndarray:
  """torchvision `F.rgb_to_grayscale(img, 3)` on a PIL image: Pillow 'L' (`luma`) in all three
  channels."""
  return np.repeat(luma(images)[..., None], 3, axis=-1)


def random_grayscale(images: np.ndarray, rng: np.random.Generator, p: float = 0.2) -> np.ndarray:
  """torchvision `RandomGrayscale(p)`: each image replaced by `grayscale` iff rng.random() < p."""
  images = _check_images(images)
  chosen = rng.random(len(images)) < p
  return np.where(chosen[:, None, None, None], grayscale(images), images)


def simclr_view(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """The released recipe's views 1 and 2 (SimCLR): `random_resized_crop` (scale (0.2, 1), ratio
  (3/4, 4/3)) → `random_flip` → `color_jitter` (0.4, 0.4, 0.4, 0.1, p 0.8) → `random_grayscale`
  (p 0.2)."""
  images = random_resized_crop(images, rng)
  images = random_flip(images, rng)
  images = color_jitter(images, rng)
  return random_grayscale(images, rng)
