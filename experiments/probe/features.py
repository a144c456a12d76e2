"""EfficientNet-Lite0 features of CIFAR-10 for the frozen-feature studies: extracted once, cached.

The backbone is EfficientNet-Lite0 pretrained on ImageNet (`experiments.models.pretrained`); its
pooled 1280-d features of CIFAR-10 are extracted once and cached as the source
'features:lite0-r<resolution>' (`experiments.data.cached_features`), then every run of a study is a
run of the trainer on them (`experiments/configs/probe_cifar10.py`), so many seeds are cheap.

    python -m experiments.studies.linear_probe features --data_dir=DATA --resolution=128

Features: CIFAR-10 images (32 px) upsampled bilinearly to `resolution`, no augmentation (one view),
not normalised afterwards (neither standardised nor L2-normalised: raw pooled ReLU6 activations, as
the MoCo-v2 probe reads raw pooled features). Cached in `--features_dir` (default
`experiments.data.cached_features.feature_dir()`). `--splits=train-flip` adds the horizontally
flipped images (a second view, for SupCon's two views in `experiments.studies.probe_comparison`).
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import numpy as np
from absl import flags

from experiments.data import cached_features, in_memory_sources, loading
from experiments.models.pretrained import efficientnet_lite

DATASET = in_memory_sources.CIFAR10_JPEG
NUM_CLASSES = 10
FEATURE_BATCH = 128
# Measured on the 2-core CPU (batch 128, jit): 224 px 40 images/s, 160 px 77, 128 px 117, 96 px 228.
# 128 px extracts the 60,000 images in about 9 minutes, inside the 15-minute budget with margin.
RESOLUTION = 128


def extract_features(images_uint8: np.ndarray, resolution: int, batch_size: int = FEATURE_BATCH,
                     variables=None, report_every: int = 50) -> tuple[np.ndarray, float]:
  """Pooled Lite0 features float32 [N, 1280] of uint8 images [N, h, w, 3]; returns (features, img/s).

  The last batch is zero-padded to `batch_size` (one compiled shape) and the padding dropped.
  """
  if variables is None:
    variables = efficientnet_lite.load_lite0_params()
  model = efficientnet_lite.EfficientNetLite0()

  @jax.jit
  def features_of(images):
    return model.apply(variables, efficientnet_lite.preprocess(images, resolution))[1]

  num_images = len(images_uint8)
  out = np.empty((num_images, efficientnet_lite.FEATURE_DIM), np.float32)
  start = time.perf_counter()
  for b, first in enumerate(range(0, num_images, batch_size)):
    batch = images_uint8[first:first + batch_size]
    real = len(batch)
    if real < batch_size:
      batch = np.concatenate([batch, np.zeros((batch_size - real, *batch.shape[1:]), np.uint8)])
    out[first:first + real] = np.asarray(features_of(batch))[:real]
    if report_every and (b + 1) % report_every == 0:
      done = first + real
      print(f"  {done}/{num_images} images, {done / (time.perf_counter() - start):.1f} images/s",
            flush=True)
  return out, num_images / (time.perf_counter() - start)


def features_command(args: flags.FlagValues) -> None:
  """`python -m experiments.studies.linear_probe features`: extracts and caches the features of
  each of `args.splits`, and writes the extraction's timings beside them."""
  cache = pathlib.Path(args.features_dir) if args.features_dir else cached_features.feature_dir()
  cache.mkdir(parents=True, exist_ok=True)
  stem = f"lite0-r{args.resolution}"
  variables = efficientnet_lite.load_lite0_params()
  report = {"resolution": args.resolution, "batch_size": args.batch_size,
            "weights": str(efficientnet_lite.lite0_weights_path()), "splits": {}}
  for split in args.splits:
    # "<split>-flip": the horizontally flipped images (a second view, for SupCon's two views).
    base, flipped = split.removesuffix("-flip"), split.endswith("-flip")
    source = loading.load_split(DATASET, base, args.data_dir)
    images = source.images[:, :, ::-1] if flipped else source.images
    start = time.perf_counter()
    features, images_per_s = extract_features(np.ascontiguousarray(images), args.resolution,
                                              args.batch_size, variables)
    wall = time.perf_counter() - start
    features_path = cached_features.write_split(cache, stem, split, features, source.labels,
                                                source.class_names)
    report["splits"][split] = {"images": len(source), "images_per_s": images_per_s,
                               "wall_s": wall, "path": str(features_path)}
    print(f"{split}: {len(source)} images in {wall:.0f} s, {images_per_s:.1f} images/s "
          f"(resolution {args.resolution}) -> {features_path}", flush=True)
  name = "extraction" if list(args.splits) == ["train", "test"] else "extraction-" + "-".join(
      args.splits)
  (cache / f"{stem}-{name}.json").write_text(json.dumps(report, indent=1))
