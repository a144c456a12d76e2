"""A run's data: `load_split` (a split of a source, by name) and `load_data` (a config's training
set long-tailed by `imbalance_factor`, its validation hold-out, and the test set).

Sources (`load_split`; one entry each in `in_memory_sources.LOCAL_SOURCES`,
`sources.LAZY_SOURCES` or `sources.LAZY_PREFIXES`):
  'digits'        scikit-learn's embedded 8x8 digits (no files needed).
  'mnist'         `data_dir`/{train,test}.npz with `images` uint8 [N, 28, 28] and `labels`.
  'cifar10_jpeg'  `data_dir`/{train,test}.npz of concatenated JPEG files (`jpeg`, `offsets`, `labels`);
                  decoded once with Pillow and cached as .npy under $MR2_JAX_CACHE (~/.cache/mr2_jax).
  'tfds:<name>'   a TFDS dataset already prepared in ArrayRecord format, read through
                  `tfds.data_source` (random access; TensorFlow is not needed); images lazy.
  'imagenet_lt', 'places_lt', 'inat2018', 'list:<path with {split}>'
                  image folders with the OLTR split lists or iNaturalist 2018's JSON, images decoded
                  on index (`experiments.data.sources`, which documents the files expected).
  'arrayrecord:<path with {split}>'
                  ArrayRecord files written by `python -m experiments.data.sources`; images lazy.
  'features:<stem>'
                  a frozen encoder's cached features, float32 [N, d] (`cached_features`: files in
                  `data_dir`, default $MR2_JAX_CACHE/features), for frozen-feature studies.
The first three are held in host memory as uint8 ([N, H, W, C]), the others as
`experiments.data.lazy_images.LazyImages`, rows decoded when indexed.
"""

from __future__ import annotations

import os

from experiments.common.errors import DataError
from experiments.data import cached_features
from experiments.data import sources
from experiments.data.holdout import validation_split
from experiments.data.in_memory_sources import LOCAL_SOURCES, LOCAL_SPLITS
from experiments.data.long_tail import long_tail_indices
from experiments.data.split import Split


def load_split(name: str, split: str, data_dir: str | os.PathLike | None = None, *,
               image_size: int = 224, resize: int = 256) -> Split:
  """Loads split `split` of source `name` (the module docstring's list).

  `image_size` and `resize` apply to the image-file sources only: shorter side resized to `resize`,
  centre crop image_size² (`image_files.resize_center_crop`).
  """
  if cached_features.is_features_source(name):
    return cached_features.load_cached_features(name, split, data_dir)
  if sources.is_lazy_source(name):
    return sources.load_split(name, split, data_dir, image_size=image_size, resize=resize)
  if name not in LOCAL_SOURCES:
    raise DataError(f"unknown dataset {name!r}; expected one of "
                    f"{(*LOCAL_SOURCES, *sources.LAZY_SOURCE_NAMES)}")
  if split not in LOCAL_SPLITS:
    raise DataError(f"unknown split {split!r} for dataset {name!r}; expected one of {LOCAL_SPLITS}")
  return LOCAL_SOURCES[name](split, data_dir)


def train_indices(config, labels, num_classes: int):
  """The indices of the training images a config trains on: `long_tail_indices` with its
  imbalance factor, seed, `max_train_per_class` and `lt_selection` (labels only, no image read)."""
  return long_tail_indices(labels, num_classes, config.imbalance_factor, config.seed,
                           max_count=config.max_train_per_class or None,
                           selection=config.lt_selection)


def load_data(config):
  """(train, validation or None, test) splits; the training set long-tailed by `imbalance_factor`."""
  size = dict(image_size=config.image_size, resize=config.resize)  # image-file sources only
  train = load_split(config.dataset, "train", config.data_dir, **size)
  test = load_split(config.dataset, "test", config.data_dir, **size)
  train = train.subset(train_indices(config, train.labels, train.num_classes))
  validation = None
  if config.validation_fraction > 0:
    train, validation = validation_split(train, config.validation_fraction, config.seed)
  return train, validation, test
