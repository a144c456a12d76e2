"""'tfds:<name>': a TFDS dataset prepared in ArrayRecord format, read through `tfds.data_source`
(random access; TensorFlow is not needed), its labels read once, its images decoded on index (a
`LazyImages` of `TfdsRecords`)."""

from __future__ import annotations

import numpy as np

from experiments.common.errors import DataError
from experiments.data.lazy_images import LazyImages, ReopenedRecords
from experiments.data.split import Split, one_line

TFDS_PREFIX = "tfds:"


def _open_tfds(name: str, split: str, data_dir):
  # optional: only 'tfds:' sources need it (and it imports slowly)
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except Exception as e:
    raise DataError(f"cannot open TFDS {name!r} split {split!r} (data_dir={data_dir}; it must "
                    f"be prepared in array_record format): {one_line(e).split(' Available ')[0]}"
                    ) from None


def _read_tfds(source, name: str, split: str, i: int) -> dict:
  try:
    return source[i]
  except Exception as e:
    raise DataError(f"cannot read example {i} of TFDS {name!r} split {split!r}: "
                    f"{one_line(e)}") from None


class TfdsRecords(ReopenedRecords):
  """Record i: the 'image' of example i of a TFDS ArrayRecord data source.

  Pickles as its spec (name, split, data_dir, shape, size) without the opened source, which the
  receiving process reopens (`tfds.data_source`, download=False) on its first decode: the tfds
  source would pickle too (array_record's reader reopens its files), but the spec is smaller and
  does not depend on those internals.
  """

  def __init__(self, name: str, split: str, data_dir, image_shape: tuple[int, int, int],
               num_records: int, source=None):
    self.name, self.split = name, split
    self.data_dir = None if data_dir is None else str(data_dir)
    self.image_shape = image_shape
    self.num_records = num_records
    self._source = source

  def _open(self):
    return _open_tfds(self.name, self.split, self.data_dir)

  def decode(self, i: int) -> np.ndarray:
    image = np.asarray(_read_tfds(self.source, self.name, self.split, i)["image"], np.uint8)
    if image.shape != self.image_shape:
      raise DataError(f"example {i} of TFDS {self.name!r} split {self.split!r} has shape "
                      f"{image.shape}, expected {self.image_shape}")
    return image


def load_tfds(name: str, split: str, data_dir) -> Split:
  """Split `split` of 'tfds:<name>', prepared as ArrayRecord (`download=False`: nothing is fetched
  or built here). Reading the labels is one pass over the records, each decoded whole once and its
  image dropped (`decoders={'image': SkipDecoding()}` would skip the image, but
  `tfds.testing.mock_data` serves decoders only through TensorFlow); the images stay lazy."""
  tfds_name = name[len(TFDS_PREFIX):]
  source = _open_tfds(tfds_name, split, data_dir)
  features = source.dataset_info.features
  if "image" not in features or "label" not in features:
    raise DataError(f"TFDS {tfds_name!r} lacks 'image'/'label' features; it has "
                    f"{list(features.keys())}")
  image_shape = tuple(features["image"].shape)
  if None in image_shape:
    raise DataError(f"TFDS {tfds_name!r}: images differ in shape ({image_shape}); only sources "
                    f"with one image shape can be batched")
  if not len(source):
    raise DataError(f"TFDS {tfds_name!r} split {split!r} is empty")
  labels = np.fromiter((_read_tfds(source, tfds_name, split, i)["label"]
                        for i in range(len(source))), np.int64, len(source))
  label_feature = features["label"]
  records = TfdsRecords(tfds_name, split, data_dir, image_shape, len(source), source)
  return Split(LazyImages(records), labels, label_feature.num_classes,
               tuple(label_feature.names), name)
