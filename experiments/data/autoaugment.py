"""AutoAugment (Cubuk et al. 2019) with the CIFAR-10 policy, and Cutout (DeVries & Taylor 2017):
what view 0 of the reweighting paper's released recipe (PIPELINES spec §1) applies after its crop +
flip, on uint8 batches [B, H, W, 3] with the draws of a `np.random.Generator`.

The ops are `experiments.data.pillow_ops` (Pillow's arithmetic, bit for bit). Where the reference
code (`autoaug.py`, DeepVoltaire's `CIFAR10Policy`) and the spec text differ, this module follows
the code and says so:
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

from collections.abc import Sequence

import numpy as np

from experiments.data.pillow_ops import (auto_contrast, brightness, check_images, color, contrast,
                                         equalize, invert, posterize, rotate, sharpness, shear_x,
                                         shear_y, solarize, translate_x, translate_y)


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
  images = check_images(images)
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
  images = check_images(images)
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
