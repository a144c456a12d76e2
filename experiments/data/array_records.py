"""'arrayrecord:<path with {split}>': ArrayRecord files written by this project
(`write_array_record`; `python -m experiments.data.sources` converts an image-file source), one
record per image, its encoded bytes (JPEG / PNG) after a 4-byte label, with `<file>.json` beside it
holding the labels and class names (so labels never read the records); images decoded on index (a
`LazyImages` of `ArrayRecordImages`). One file per split instead of a million small ones."""

from __future__ import annotations

import io
import json
import os
import pathlib
import struct
from collections.abc import Sequence

import numpy as np
from PIL import Image

from experiments.common.errors import DataError
from experiments.data.image_files import SPLITS, check_split, resize_center_crop
from experiments.data.lazy_images import LazyImages, ReopenedRecords
from experiments.data.split import Split, one_line

ARRAY_RECORD_PREFIX = "arrayrecord:"


def _decode_bytes(encoded: bytes, where: str, resize: int, image_size: int) -> np.ndarray:
  try:
    with Image.open(io.BytesIO(encoded)) as image:
      return resize_center_crop(image.convert("RGB"), resize, image_size)
  except Exception as e:  # PIL.UnidentifiedImageError, truncated data, ...
    raise DataError(f"cannot decode {where}: {one_line(e)}") from None


class ArrayRecordImages(ReopenedRecords):
  """Record i of an ArrayRecord file of `write_array_record`: its image bytes after the 4-byte label,
  RGB, `resize_center_crop`-ed to image_size² (an image already image_size² with resize equal to it
  is kept as stored). Pickles as the path; the reader opens in the process that decodes."""

  def __init__(self, path: str | os.PathLike, num_records: int, image_size: int, resize: int):
    self.path, self.num_records = str(path), num_records
    self.image_size, self.resize = image_size, resize
    self.image_shape = (image_size, image_size, 3)

  def _open(self):
    # optional: only 'arrayrecord:' sources read it
    from array_record.python import array_record_data_source  # pylint: disable=g-import-not-at-top
    return array_record_data_source.ArrayRecordDataSource(self.path)

  def decode(self, i: int) -> np.ndarray:
    record = self.source[i]
    return _decode_bytes(record[4:], f"record {i} of {self.path}", self.resize, self.image_size)


def write_array_record(path: str | os.PathLike, encoded: Sequence[bytes], labels: Sequence[int],
                       class_names: Sequence[str]) -> pathlib.Path:
  """Writes images (their encoded bytes, e.g. a JPEG file's) with int labels in [0, K) as one
  ArrayRecord file, record i = int32 little-endian label ‖ bytes, and `<path>.json` with the labels
  and the K class names. Returns the path."""
  # optional: only writing ArrayRecord files needs it
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(path)
  labels = np.asarray(labels, np.int64)
  if len(labels) != len(encoded) or (len(labels) and not 0 <= labels.min() <= labels.max()
                                     < len(class_names)):
    raise DataError(f"write_array_record: {len(encoded)} images, {len(labels)} labels, labels must "
                    f"lie in [0, {len(class_names)})")
  path.parent.mkdir(parents=True, exist_ok=True)
  writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
  for label, data in zip(labels, encoded):
    writer.write(struct.pack("<i", int(label)) + bytes(data))
  writer.close()
  pathlib.Path(f"{path}.json").write_text(json.dumps(
      {"labels": labels.tolist(), "class_names": list(class_names)}))
  return path


def load_array_record(name: str, split: str, data_dir, image_size: int = 224,
                      resize: int = 256) -> Split:
  """Split `split` of 'arrayrecord:<path with {split}>' (relative to `data_dir` when relative);
  labels and class names from the `.json` beside the file, nothing decoded."""
  check_split(name, split)
  pattern = name[len(ARRAY_RECORD_PREFIX):]
  if "{split}" not in pattern:
    raise DataError(f"dataset {name!r}: the path must contain '{{split}}' (replaced by "
                    f"{'/'.join(SPLITS)}), so that the splits are different files")
  root = pathlib.Path(data_dir).expanduser() if data_dir else pathlib.Path()
  path = root / pathlib.Path(pattern.replace("{split}", split)).expanduser()
  meta = pathlib.Path(f"{path}.json")
  if not path.is_file() or not meta.is_file():
    raise DataError(f"ArrayRecord split {split!r} of {name!r} not found: {path} and {meta} "
                    f"(written by `python -m experiments.data.sources`)")
  try:
    info = json.loads(meta.read_text())
    labels, class_names = np.asarray(info["labels"], np.int64), tuple(info["class_names"])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise DataError(f"cannot read {meta}: {one_line(e)}") from None
  records = ArrayRecordImages(path, len(labels), image_size, resize)
  return Split(LazyImages(records), labels, len(class_names), class_names, name)
