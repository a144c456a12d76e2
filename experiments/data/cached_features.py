"""Cached features of a frozen encoder as a data source: 'features:<stem>' (`load_split`).

A frozen-feature study (a linear probe) trains a head on features computed once by a frozen
encoder, so each of its many runs reads float32 [N, d] rows instead of images. The files, in
`data_dir` (default `feature_dir()`, `$MR2_JAX_CACHE/features`):

    <stem>-<split>-features.npy   float32 [N, d]
    <stem>-<split>-labels.npy     int [N]
    <stem>-classes.json           {"class_names": [...]} (index = label)

written by `write_split` (`python -m experiments.studies.linear_probe features` writes
EfficientNet-Lite0's of CIFAR-10 under the stem 'lite0-r<resolution>'). A split '<split>-flip' holds the features of the
horizontally flipped images: the source 'features:<stem>+flip' gives them to the training split as
a second stored view (`Split.extra_views`, for a loss on two views such as SupCon's). The features
are read as they are: the trainer neither normalises nor augments a features split
(`Split.is_features`).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence

import numpy as np

from experiments.common.errors import DataError
from experiments.data.in_memory_sources import cache_dir
from experiments.data.split import Split

FEATURES_PREFIX = "features:"
FLIP_SUFFIX = "+flip"


def feature_dir() -> pathlib.Path:
  """Where features are cached by default: `cache_dir()`/features."""
  return cache_dir() / "features"


def split_paths(folder: str | os.PathLike, stem: str, split: str) -> tuple[pathlib.Path, ...]:
  """(features .npy, labels .npy) of `split` under `stem` in `folder`."""
  base = pathlib.Path(folder) / f"{stem}-{split}"
  return (base.with_name(base.name + "-features.npy"), base.with_name(base.name + "-labels.npy"))


def classes_path(folder: str | os.PathLike, stem: str) -> pathlib.Path:
  return pathlib.Path(folder) / f"{stem}-classes.json"


def write_split(folder: str | os.PathLike, stem: str, split: str, features: np.ndarray,
                labels: np.ndarray, class_names: Sequence[str]) -> pathlib.Path:
  """Writes one split's features and labels (and the class names) under `stem`; returns the
  features' path."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  features_path, labels_path = split_paths(folder, stem, split)
  np.save(features_path, np.asarray(features, np.float32))
  np.save(labels_path, np.asarray(labels))
  classes_path(folder, stem).write_text(json.dumps({"class_names": list(class_names)}) + "\n")
  return features_path


def write_synthetic(folder: str | os.PathLike, stem: str, rows: int, dim: int,
                    test_rows: int = 1000, classes: int = 10) -> None:
  """Writes synthetic features under `stem` ('train': `rows`, 'test': `test_rows` rows of `dim`
  floats, `classes` Gaussian classes around random centres, balanced): a features source of a real
  encoder's shape where its features are not at hand (a benchmark on an accelerator machine)."""
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(classes, dim)).astype(np.float32)
  for split, n in (("train", rows), ("test", test_rows)):
    labels = np.arange(n) % classes
    features = centres[labels] + rng.normal(size=(n, dim)).astype(np.float32)
    write_split(folder, stem, split, features, labels, [f"class{k}" for k in range(classes)])


def load_cached_features(name: str, split: str, data_dir: str | os.PathLike | None = None
                         ) -> Split:
  """Split `split` of the cached features 'features:<stem>' in `data_dir` (default
  `feature_dir()`): float32 [N, d] rows, a `Split` whose `is_features` is true. With
  'features:<stem>+flip' the training split also holds the flipped images' features
  ('train-flip') as its second view."""
  stem = name.removeprefix(FEATURES_PREFIX)
  with_flip = stem.endswith(FLIP_SUFFIX)
  stem = stem.removesuffix(FLIP_SUFFIX)
  folder = pathlib.Path(data_dir).expanduser() if data_dir else feature_dir()
  features, labels, class_names = _read(name, folder, stem, split)
  extra_views = None
  if with_flip and split == "train":
    flipped, flipped_labels, _ = _read(name, folder, stem, f"{split}-flip")
    if flipped.shape != features.shape or not np.array_equal(flipped_labels, labels):
      raise DataError(f"dataset {name!r}: the '{split}-flip' features ({flipped.shape}) do not "
                      f"match the '{split}' ones ({features.shape}) row for row")
    extra_views = flipped[:, None]
  return Split(features, labels, len(class_names), class_names, name, extra_views=extra_views)


def _read(name: str, folder: pathlib.Path, stem: str, split: str
          ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """(features float32 [N, d], labels [N], class names) of one stored split, checked."""
  features_path, labels_path = split_paths(folder, stem, split)
  names_path = classes_path(folder, stem)
  for path in (features_path, labels_path, names_path):
    if not path.is_file():
      raise DataError(f"dataset {name!r}, split {split!r}: no file {path} (write the features "
                      "first: `python -m experiments.studies.linear_probe features` for CIFAR-10's)")
  features = np.load(features_path)
  if features.dtype != np.float32 or features.ndim != 2:
    raise DataError(f"{features_path}: features must be float32 [N, d], got {features.dtype} "
                    f"{features.shape}")
  if not np.isfinite(features).all():
    rows = np.flatnonzero(~np.isfinite(features).all(axis=1))
    raise DataError(f"{features_path}: {len(rows)} rows hold non-finite values (first: {rows[0]})")
  return features, np.load(labels_path), tuple(json.loads(names_path.read_text())["class_names"])


def is_features_source(name: str) -> bool:
  return name.startswith(FEATURES_PREFIX)
