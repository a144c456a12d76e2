"""The training augmentations by name (`config.augmentation`: `AUGMENTATIONS`) and the views of the
reweighting paper's released recipe (PIPELINES spec §1), on uint8 batches [B, H, W, 3] with the
draws of a `np.random.Generator`:

  reference_view0  view 0: pad-4 random crop + flip → AutoAugment (CIFAR-10 policy) → Cutout 16×16;
  simclr_view      views 1, 2: RandomResizedCrop(scale 0.2–1) → flip → ColorJitter(0.4, 0.4, 0.4,
                   0.1) w.p. 0.8 → grayscale w.p. 0.2.

`augment_view` is view v of a batch under a named augmentation, a pure function of the batch's key
([seed, epoch, batch]) and the process. Normalisation comes afterwards
(`experiments.data.normalization.normalize`).
"""

from __future__ import annotations

import numpy as np

from experiments.common.errors import DataError
from experiments.data.autoaugment import autoaugment, cutout
from experiments.data.color_jitter import color_jitter, random_grayscale
from experiments.data.crop_flip import crop_flip_draws, random_crop_flip, random_flip
from experiments.data.pillow_ops import check_images
from experiments.data.resized_crop import random_resized_crop


def reference_view0(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """View 0 of the released recipe: zero-pad-4 random crop + horizontal flip
  (`experiments.data.crop_flip.random_crop_flip`) → `autoaugment` (CIFAR-10 policy) → `cutout`
  (16×16)."""
  images = check_images(images)
  return cutout(autoaugment(random_crop_flip(images, rng), rng), rng)


def simclr_view(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """The released recipe's views 1 and 2 (SimCLR): `random_resized_crop` (scale (0.2, 1), ratio
  (3/4, 4/3)) → `random_flip` → `color_jitter` (0.4, 0.4, 0.4, 0.1, p 0.8) → `random_grayscale`
  (p 0.2)."""
  images = random_resized_crop(images, rng)
  images = random_flip(images, rng)
  images = color_jitter(images, rng)
  return random_grayscale(images, rng)


def _crop_flip_rng(key: list[int], view: int) -> np.random.Generator:
  """The generator of view `view`'s crops under 'crop_flip': `key` for view 0, [*key, v] for v > 0."""
  return np.random.default_rng(key + [view] if view > 0 else key)


def _crop_flip(images, view, key, process_index, process_count):
  """'crop_flip': pad-4 random crop + flip for every view (view 0 draws with `key`, view v > 0 with
  [*key, v]), drawn for the global batch: an example gets the same crop whatever the number of
  processes."""
  return random_crop_flip(images, _crop_flip_rng(key, view), process_index=process_index,
                          process_count=process_count)


def crop_flip_view_draws(batch: int, view: int, key: list[int], *, process_index: int = 0,
                         process_count: int = 1) -> np.ndarray:
  """The draws that 'crop_flip' makes for view `view` of a batch of `batch` rows with `key`
  (`crop_flip.crop_flip_draws`: int32 [batch, 3] of top, left, flip), from the generator
  `augment_view` uses: the device cuts these crops from its copy of the split
  (`experiments.data.device_crop_flip`), the same ones `augment_view` cuts on the host."""
  return crop_flip_draws(_crop_flip_rng(key, view), batch, process_index=process_index,
                         process_count=process_count)


def _batch_rng(key, view, tag, process_index, process_count) -> np.random.Generator:
  """The per-process-batch generator of the vectorised augmentations (`tag` tells them apart)."""
  return np.random.default_rng([*key, view, tag, process_index, process_count])


def _released(images, view, key, process_index, process_count):
  """'released': the reweighting paper's released recipe (PIPELINES spec §1): view 0 crop + flip →
  AutoAugment (CIFAR-10 policy) → Cutout 16×16, views ≥ 1 the SimCLR transform."""
  if view > 0:
    return _simclr(images, view, key, process_index, process_count)
  images = _crop_flip(images, view, key, process_index, process_count)
  rng = _batch_rng(key, view, 1, process_index, process_count)
  return cutout(autoaugment(images, rng), rng)


def _simclr(images, view, key, process_index, process_count):
  """'simclr': the SimCLR transform (random resized crop, flip, colour jitter, grayscale) for every
  view (SupCon's reference views)."""
  return simclr_view(images, _batch_rng(key, view, 2, process_index, process_count))


def _inception(images, view, key, process_index, process_count):
  """'inception': Inception's random-resized crop (area U(0.08, 1), aspect exp U(log 3/4, log 4/3),
  back to H × W bilinear) + flip, for ImageNet-scale training. The crop is taken from the image as
  the pipeline decoded it (ImageNet-LT: the 224² centre crop of the shorter side resized to 256),
  not from the full-resolution file. Drawn for the global batch (with the generator a single
  process uses), so an example gets the same crop and flip whatever the number of processes."""
  rng = _batch_rng(key, view, 3, 0, 1)
  split = dict(process_index=process_index, process_count=process_count)
  return random_flip(random_resized_crop(images, rng, scale=(0.08, 1.0), **split), rng, **split)


# The training augmentations, one entry each: fn(images, view, key, process_index, process_count).
AUGMENTATION_FNS = {"crop_flip": _crop_flip, "released": _released, "simclr": _simclr,
                    "inception": _inception}
AUGMENTATIONS = tuple(AUGMENTATION_FNS)


def augment_view(images: np.ndarray, augmentation: str, view: int, key: list[int], *,
                 process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """View `view` of a batch of uint8 images under `augmentation` (an `AUGMENTATION_FNS` entry, whose
  docstring says what it draws), a pure function of `key` ([seed, epoch, batch]) and the process.

  The AutoAugment / Cutout / SimCLR draws are made per process batch ([*key, view, tag,
  process index, process count]), vectorised over it (≈ 5× the throughput of per-example
  generators), so unlike crop + flip and 'inception' they depend on how the global batch is split
  over processes.
  """
  if augmentation not in AUGMENTATION_FNS:
    raise DataError(f"augmentation: unknown {augmentation!r}; expected one of {AUGMENTATIONS}")
  return AUGMENTATION_FNS[augmentation](images, view, key, process_index, process_count)
