"""The sources held in host memory as uint8 [N, H, W, C], one entry each in `LOCAL_SOURCES`
(loader(split, data_dir) → Split; splits 'train' and 'test'):

  'digits'        scikit-learn's embedded 8x8 digits (no files needed).
  'mnist'         `data_dir`/{train,test}.npz with `images` uint8 [N, 28, 28] and `labels`.
  'cifar10_jpeg'  `data_dir`/{train,test}.npz of concatenated JPEG files (`jpeg`, `offsets`, `labels`);
                  decoded once with Pillow and cached as .npy under $MR2_JAX_CACHE (~/.cache/mr2_jax).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pathlib
import time
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from experiments.common.errors import DataError
from experiments.data.split import Split, one_line

DIGITS = "digits"
MNIST = "mnist"
CIFAR10_JPEG = "cifar10_jpeg"
LOCAL_SPLITS = ("train", "test")

CIFAR10_CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                       "ship", "truck")
DIGIT_CLASS_NAMES = tuple(str(d) for d in range(10))

log = logging.getLogger(__name__)


def _npz_path(name: str, split: str, data_dir) -> pathlib.Path:
  if data_dir is None:
    raise DataError(f"dataset {name!r} needs data_dir (the shared copy is at "
                    f"../shared/data/{name} relative to the repository root)")
  folder = pathlib.Path(data_dir).expanduser()
  if not folder.is_dir():
    raise DataError(f"data folder for {name!r} not found: {folder}")
  path = folder / f"{split}.npz"
  if not path.is_file():
    raise DataError(f"data file for {name!r} split {split!r} not found: {path}")
  return path


def _read_npz(path: pathlib.Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
  try:
    with np.load(path, allow_pickle=False) as npz:
      missing = [k for k in keys if k not in npz.files]
      if missing:
        raise DataError(f"{path} lacks array(s) {missing}; it holds {npz.files}")
      return {k: npz[k] for k in keys}
  except DataError:
    raise
  except Exception as e:  # zipfile.BadZipFile, ValueError, OSError, ...
    raise DataError(f"cannot read {path}: {one_line(e)}") from None


def _load_digits(split: str) -> Split:
  """scikit-learn digits; 1/3 held out as test, stratified, seed 0 (a fixed, documented split)."""
  digits = load_digits()
  images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
  labels = digits.target.astype(np.int32)
  train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=1 / 3,
                                         stratify=labels, random_state=0)
  idx = np.sort(train_idx if split == "train" else test_idx)
  return Split(images[idx], labels[idx], 10, DIGIT_CLASS_NAMES, DIGITS)


def _load_mnist(path: pathlib.Path, split: str) -> Split:
  arrays = _read_npz(path, ("images", "labels"))
  images, labels = arrays["images"], arrays["labels"]
  if images.dtype != np.uint8 or images.ndim != 3:
    raise DataError(f"{path}: 'images' must be uint8 [N, 28, 28], got {images.dtype} "
                    f"{images.shape}")
  return Split(images[..., None], labels, 10, DIGIT_CLASS_NAMES, MNIST)


def cache_dir() -> pathlib.Path:
  """Where decoded arrays are cached: $MR2_JAX_CACHE, else ~/.cache/mr2_jax."""
  return pathlib.Path(os.environ.get("MR2_JAX_CACHE") or "~/.cache/mr2_jax").expanduser()


def _load_cifar10_jpeg(path: pathlib.Path, split: str) -> Split:
  arrays = _read_npz(path, ("jpeg", "offsets", "labels"))
  jpeg, offsets, labels = arrays["jpeg"], arrays["offsets"], arrays["labels"]
  if offsets.ndim != 1 or len(offsets) != len(labels) + 1:
    raise DataError(f"{path}: {len(offsets)} offsets for {len(labels)} labels (need N + 1)")
  images = _decode_cached(path, split, jpeg, offsets)
  return Split(images, labels, 10, CIFAR10_CLASS_NAMES, CIFAR10_JPEG)


def _decode_cached(path: pathlib.Path, split: str, jpeg: np.ndarray,
                   offsets: np.ndarray) -> np.ndarray:
  """Decodes once; the cache key is the source file's path, size and mtime, so a new file re-decodes."""
  stat = path.stat()
  path_hash = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
  cached = cache_dir() / (f"{CIFAR10_JPEG}-{split}-{path_hash}-{stat.st_size}-"
                          f"{stat.st_mtime_ns}.npy")
  expected_shape = (len(offsets) - 1, 32, 32, 3)
  if cached.is_file():
    try:
      images = np.load(cached, allow_pickle=False)
      if images.shape == expected_shape and images.dtype == np.uint8:
        return images
    except (OSError, ValueError):
      pass
    log.warning("Ignoring unusable cache file %s; decoding again.", cached)
  start = time.perf_counter()
  images = decode_jpegs(jpeg, offsets, source=str(path))
  log.info("Decoded %d JPEG images from %s in %.1f s.", len(images), path,
           time.perf_counter() - start)
  try:
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    with open(partial, "wb") as f:
      np.save(f, images)
    os.replace(partial, cached)  # Atomic: a concurrent reader sees no file or a complete one.
  except OSError as e:
    log.warning("Could not write decode cache %s (%s); continuing without it.", cached,
                one_line(e))
  return images


def decode_jpegs(jpeg: np.ndarray, offsets: np.ndarray, source: str = "<array>",
                 shape: tuple[int, int, int] = (32, 32, 3)) -> np.ndarray:
  """Decodes image i = jpeg[offsets[i]:offsets[i+1]] with Pillow into uint8 [N, *shape]."""
  num_images = len(offsets) - 1
  images = np.empty((num_images, *shape), np.uint8)
  mode = "RGB" if shape[-1] == 3 else "L"
  for i in range(num_images):
    encoded = jpeg[offsets[i]:offsets[i + 1]].tobytes()
    try:
      with Image.open(io.BytesIO(encoded)) as image:
        pixels = np.asarray(image.convert(mode))
    except Exception as e:  # PIL raises OSError, SyntaxError, ValueError, ... on corrupt data.
      raise DataError(f"corrupt JPEG at index {i} in {source}: {one_line(e)}") from None
    pixels = pixels.reshape(pixels.shape[:2] + (-1,))
    if pixels.shape != shape:
      raise DataError(f"image at index {i} in {source} has shape {pixels.shape}, expected {shape}")
    images[i] = pixels
  return images


# The in-memory sources, one entry each: loader(split, data_dir) → Split (the lazy ones are
# `experiments.data.sources.LAZY_SOURCES` / `LAZY_PREFIXES`).
LOCAL_SOURCES: dict[str, Callable[[str, str | os.PathLike | None], Split]] = {
    DIGITS: lambda split, data_dir: _load_digits(split),
    MNIST: lambda split, data_dir: _load_mnist(_npz_path(MNIST, split, data_dir), split),
    CIFAR10_JPEG: lambda split, data_dir: _load_cifar10_jpeg(
        _npz_path(CIFAR10_JPEG, split, data_dir), split),
}
