"""torchvision's `ColorJitter` and `RandomGrayscale` on PIL images, in NumPy on uint8 batches
[B, H, W, 3], bit for bit: the hue shift through Pillow's HSV conversions (exact lookup tables),
brightness, contrast and saturation through Pillow's enhancements (`experiments.data.pillow_ops`),
grayscale as Pillow's 'L'. The SimCLR views end with them."""

from __future__ import annotations

import functools

import numpy as np

from experiments.data.pillow_ops import brightness, check_images, color, contrast, luma, per_image


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
  images = check_images(images)
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
  hsv = check_images(hsv, "hsv")
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
  images = check_images(images)
  factor = per_image(hue_factor, len(images))
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
  images = check_images(images)
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
  images = check_images(images)
  chosen = rng.random(len(images)) < p
  return np.where(chosen[:, None, None, None], grayscale(images), images)
