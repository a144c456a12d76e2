"""Random-access image sources whose rows are decoded only when indexed (`LazyImages`).

The long-tailed benchmarks of Liu et al. (2019, OLTR) and iNaturalist 2018 do not fit in host memory
as decoded uint8 (ImageNet-LT train alone is 115,846 · 224² · 3 bytes = 17 GB), so their
`Split.images` is a `LazyImages`: an array-like uint8 [N, H, W, C] over a picklable record reader
that holds file paths or a data-source spec, never pixels. Indexing it decodes the rows asked for;
`take` (hence `Split.subset`: long-tailed subsets, validation hold-outs) selects rows without
decoding any, and labels, class counts and Many / Medium / Few groups never decode.

Sources (`experiments.data.datasets.load_split` names):
  'imagenet_lt', 'places_lt'  the OLTR split lists `ImageNet_LT_{split}.txt`,
                              `Places_LT_{split}.txt` (one `<relative path> <label>` per line) in
                              `data_dir`, the image root; splits 'train', 'val', 'test'.
  'list:<path>'               the same format from any list files: `{split}` in the path is
                              replaced by the split name ('list:/data/lists/my_{split}.txt'; a
                              relative path is relative to `data_dir`); the image paths are
                              relative to `data_dir`.
  'inat2018'                  `data_dir`/train2018.json, val2018.json (iNaturalist 2018's COCO-style
                              annotations, paths relative to `data_dir`); split 'test' reads
                              val2018, as is customary (the test labels were never released).
  'arrayrecord:<path>'        ArrayRecord files written by this project (`write_array_record`,
                              `python -m experiments.data.sources` from any of the above): one
                              record per image, its encoded bytes (JPEG / PNG) after a 4-byte
                              label, and `<file>.json` beside it with the labels and class names
                              (so labels never read the records); `{split}` in the path as for
                              'list:', relative to `data_dir`. One file per split instead of a
                              million small ones.
  'tfds:<name>'               a TFDS dataset prepared in ArrayRecord format, read through
                              `tfds.data_source` (random access; TensorFlow is not needed).

Image files are decoded with Pillow to RGB, their shorter side resized to `resize` (bilinear) and
centre-cropped to `image_size`² (torchvision's Resize(256) + CenterCrop(224), the evaluation
transform of these benchmarks), so every row has one shape.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import pathlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from experiments.data.datasets import DataError, Split, _one_line

IMAGENET_LT = "imagenet_lt"
PLACES_LT = "places_lt"
INAT2018 = "inat2018"
LIST_PREFIX = "list:"
ARRAY_RECORD_PREFIX = "arrayrecord:"
TFDS_PREFIX = "tfds:"
SPLITS = ("train", "val", "test")

# Split-list file names of the OLTR release, and the class counts of the two benchmarks.
OLTR_LISTS = {IMAGENET_LT: ("ImageNet_LT_{split}.txt", 1000),
              PLACES_LT: ("Places_LT_{split}.txt", 365)}
INAT2018_FILES = {"train": "train2018.json", "val": "val2018.json", "test": "val2018.json"}

log = logging.getLogger(__name__)


class Records(Protocol):
  """A picklable reader of N records: `decode(i)` is record i's image, uint8 `image_shape`."""
  image_shape: tuple[int, int, int]

  def __len__(self) -> int: ...

  def decode(self, i: int) -> np.ndarray: ...


class LazyImages:
  """uint8 [N, H, W, C] whose row n is `records.decode(rows[n])`, decoded when it is indexed.

  Indexing follows NumPy's for an int, a slice or an int array [M] (negative positions count from
  the end; a position outside [−N, N) raises IndexError, never clips) and returns decoded ndarrays,
  rows in the order asked. `take(indices)` is the same row selection without decoding, as a new
  LazyImages (`ndarray.take(indices, axis=0)`'s signature, so `Split.subset` uses either).
  """
  dtype = np.dtype(np.uint8)
  ndim = 4

  def __init__(self, records: Records, rows: np.ndarray | None = None):
    self.records = records
    self.rows = np.asarray(np.arange(len(records)) if rows is None else rows, np.int64)
    if self.rows.ndim != 1 or (len(self.rows) and (self.rows.min() < 0
                                                   or self.rows.max() >= len(records))):
      raise IndexError(f"LazyImages: rows must be positions [N] in [0, {len(records)})")

  @property
  def shape(self) -> tuple[int, int, int, int]:
    return (len(self.rows), *self.records.image_shape)

  def __len__(self) -> int:
    return len(self.rows)

  def __repr__(self) -> str:
    return f"LazyImages(shape={self.shape}, records={type(self.records).__name__})"

  def __getitem__(self, key) -> np.ndarray:
    if isinstance(key, slice):
      return self._decode(self.rows[key])
    positions = np.asarray(key) if not isinstance(key, tuple) else None
    if positions is None or positions.ndim > 1 or not np.issubdtype(positions.dtype, np.integer):
      raise TypeError(f"LazyImages: index rows with an int, a slice or an int array [M], got "
                      f"{key!r}")
    rows = self.rows[positions]  # NumPy's bounds check: IndexError outside [−N, N).
    return self._decode(rows) if positions.ndim else self.records.decode(int(rows))

  def take(self, indices, axis: int = 0) -> LazyImages:
    """The rows at `indices` [M] (in that order), nothing decoded."""
    if axis != 0:
      raise ValueError(f"LazyImages.take: only rows (axis 0) can be taken, got axis={axis}")
    return LazyImages(self.records, self.rows[np.asarray(indices, np.int64)])

  def _decode(self, rows: np.ndarray) -> np.ndarray:
    images = np.empty((len(rows), *self.records.image_shape), np.uint8)
    for n, row in enumerate(rows):
      images[n] = self.records.decode(int(row))
    return images


# ----------------------------------------------------------------------------------------------
# Image files.


def resize_center_crop(image, resize: int, image_size: int) -> np.ndarray:
  """uint8 [image_size, image_size, C]: a PIL image with its shorter side resized to `resize`
  (bilinear, the longer side to ⌊resize · long / short⌋) and centre-cropped, as torchvision's
  Resize(resize) + CenterCrop(image_size) on PIL images (top-left corner rounded to nearest)."""
  from PIL import Image
  width, height = image.size
  if width <= height:
    size = (resize, int(resize * height / width))
  else:
    size = (int(resize * width / height), resize)
  pixels = np.asarray(image.resize(size, Image.BILINEAR))
  top = int(round((size[1] - image_size) / 2))
  left = int(round((size[0] - image_size) / 2))
  return pixels[top:top + image_size, left:left + image_size]


class ImageFiles:
  """Record i: the image file `root`/`paths[i]`, RGB, `resize_center_crop`-ed to image_size².

  A file that is missing or not an image raises DataError naming the file and i when record i is
  decoded (loading a split opens no image).
  """

  def __init__(self, root: str | os.PathLike, paths: tuple[str, ...], image_size: int = 224,
               resize: int = 256):
    if not 0 < image_size <= resize:
      raise DataError(f"image_size and resize must satisfy 0 < image_size <= resize, got "
                      f"{image_size}, {resize}")
    self.root = str(root)
    self.paths = tuple(paths)
    self.image_size = image_size
    self.resize = resize
    self.image_shape = (image_size, image_size, 3)

  def __len__(self) -> int:
    return len(self.paths)

  def decode(self, i: int) -> np.ndarray:
    from PIL import Image
    path = os.path.join(self.root, self.paths[i])
    try:
      with Image.open(path) as image:
        return resize_center_crop(image.convert("RGB"), self.resize, self.image_size)
    except Exception as e:  # FileNotFoundError, PIL.UnidentifiedImageError, truncated data, ...
      raise DataError(f"cannot decode example {i} ({path}): {_one_line(e)}") from None


def read_image_list(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  """(relative paths str [N], labels int64 [N]) of a split list: line i+1 is
  `<relative path> <label>` (the OLTR release format; the label follows the last space)."""
  try:
    lines = np.array(path.read_text().splitlines() or [""])
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f"cannot read split list {path}: {_one_line(e)}") from None
  paths, separator, labels = np.strings.rpartition(np.strings.strip(lines), " ")
  bad = np.flatnonzero((separator == "") | (paths == "") | ~np.strings.isdecimal(labels))
  if len(bad):
    raise DataError(f"{path}: line {bad[0] + 1}: expected '<relative path> <label>' with a "
                    f"non-negative integer label, got {str(lines[bad[0]])!r}")
  return paths, labels.astype(np.int64)


def _class_folders(paths: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[str, ...]:
  """Class k's name: the folder holding its first listed image (ImageNet's wnid), else str(k)."""
  classes, first = np.unique(labels, return_index=True)
  folders = np.strings.rpartition(np.strings.rpartition(paths[first], "/")[0], "/")[2]
  names = np.arange(num_classes).astype(str).astype(object)
  names[classes] = np.where(folders == "", names[classes], folders)
  return tuple(map(str, names))


def _data_root(name: str, data_dir, holds: str) -> pathlib.Path:
  if data_dir is None:
    raise DataError(f"dataset {name!r} needs data_dir (the image root holding {holds})")
  root = pathlib.Path(data_dir).expanduser()
  if not root.is_dir():
    raise DataError(f"data folder for {name!r} not found: {root}")
  return root


def _check_split(name: str, split: str):
  if split not in SPLITS:
    raise DataError(f"unknown split {split!r} for dataset {name!r}; expected one of {SPLITS}")


def load_image_list(name: str, split: str, data_dir, image_size: int = 224,
                    resize: int = 256) -> Split:
  """Split `split` of an OLTR-format source ('imagenet_lt', 'places_lt' or 'list:<path>').

  Every existing list of the source (train, val, test, in that order) is read, so that the splits
  agree on K (the benchmark's 1000 / 365; for 'list:' 1 + the largest label listed) and on the class
  names (`_class_folders`: ImageNet's wnids, Places' scene folders).
  """
  _check_split(name, split)
  if name.startswith(LIST_PREFIX):
    pattern, num_classes = name[len(LIST_PREFIX):], None
    if "{split}" not in pattern:
      raise DataError(f"dataset {name!r}: the list path must contain '{{split}}' (replaced by "
                      f"{'/'.join(SPLITS)}), so that the splits are different files")
    root = _data_root(name, data_dir, "the listed images")
  else:
    file_name, num_classes = OLTR_LISTS[name]
    root = _data_root(name, data_dir, file_name.replace("{split}", "{train,val,test}"))
    pattern = str(root / file_name)
  # A relative list path is relative to the image root (where OLTR's lists sit too).
  list_paths = {s: root / pathlib.Path(pattern.replace("{split}", s)).expanduser()
                for s in SPLITS}
  if not list_paths[split].is_file():
    raise DataError(f"split list for {name!r} split {split!r} not found: {list_paths[split]} "
                    f"(expected {', '.join(map(str, list_paths.values()))}, one per split)")
  lists = {s: read_image_list(path) for s, path in list_paths.items() if path.is_file()}
  all_paths, all_labels = (np.concatenate(parts) for parts in zip(*lists.values()))
  num_classes = num_classes or int(all_labels.max()) + 1
  for s, (_, labels) in lists.items():
    if labels.max() >= num_classes:
      raise DataError(f"{list_paths[s]}: label {labels.max()} outside [0, {num_classes}) of "
                      f"{name!r}")
  paths, labels = lists[split]
  records = ImageFiles(root, tuple(paths.tolist()), image_size, resize)
  return Split(LazyImages(records), labels, num_classes,
               _class_folders(all_paths, all_labels, num_classes), name)


# ----------------------------------------------------------------------------------------------
# iNaturalist 2018.


def _field(items: list, key: str, dtype=None):
  """items[n][key] for every n, looped in C (`map`, `itemgetter`): a `dtype` array [N], or a
  tuple when dtype is None."""
  values = map(operator.itemgetter(key), items)
  return tuple(values) if dtype is None else np.fromiter(values, dtype, len(items))


def load_inat2018(split: str, data_dir, image_size: int = 224, resize: int = 256) -> Split:
  """Split `split` of iNaturalist 2018 from its JSON annotations ('test' reads val2018.json).

  Example n is `images`[n] (its `file_name` relative to `data_dir`), labelled with the
  `category_id` of its one annotation. Labels are the category ids if those are 0..K−1 (as
  released); otherwise the ids are mapped to 0..K−1 in sorted order (logged), and so are the
  class names (`categories`' `name`).
  """
  _check_split(INAT2018, split)
  root = _data_root(INAT2018, data_dir, "train2018.json and val2018.json")
  path = root / INAT2018_FILES[split]
  if not path.is_file():
    raise DataError(f"annotations for {INAT2018!r} split {split!r} not found: {path} (expected "
                    f"{', '.join(sorted(set(INAT2018_FILES.values())))} in {root})")
  try:
    with open(path) as f:
      annotations = json.load(f)
    file_names = _field(annotations["images"], "file_name")
    image_ids = _field(annotations["images"], "id", np.int64)
    annotated_ids = _field(annotations["annotations"], "image_id", np.int64)
    annotated_categories = _field(annotations["annotations"], "category_id", np.int64)
    category_ids = _field(annotations["categories"], "id", np.int64)
    category_names = np.array(_field(annotations["categories"], "name"), dtype=object)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise DataError(f"{path}: not an iNaturalist 2018 annotation file ({type(e).__name__}: "
                    f"{_one_line(e)})") from None
  order = np.argsort(annotated_ids)
  annotated_ids, annotated_categories = annotated_ids[order], annotated_categories[order]
  if (not len(image_ids) or not np.array_equal(np.sort(image_ids), annotated_ids)
      or np.any(np.diff(annotated_ids) == 0)):
    raise DataError(f"{path}: expected exactly one annotation per image, got "
                    f"{len(annotated_ids)} annotations for {len(image_ids)} images")
  raw_labels = annotated_categories[np.searchsorted(annotated_ids, image_ids)]
  categories = np.argsort(category_ids)
  sorted_ids = category_ids[categories]
  if np.any(np.diff(sorted_ids) == 0) or not np.isin(raw_labels, sorted_ids).all():
    raise DataError(f"{path}: category ids must be unique and include every annotation's "
                    f"category_id")
  if not np.array_equal(sorted_ids, np.arange(len(sorted_ids))):
    log.warning("%s: category ids are not 0..%d; labels are their ranks in sorted order.", path,
                len(sorted_ids) - 1)
  records = ImageFiles(root, file_names, image_size, resize)
  return Split(LazyImages(records), np.searchsorted(sorted_ids, raw_labels), len(sorted_ids),
               tuple(map(str, category_names[categories])), INAT2018)


# ----------------------------------------------------------------------------------------------
# TFDS.


def _open_tfds(name: str, split: str, data_dir):
  import tensorflow_datasets as tfds
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except Exception as e:
    raise DataError(f"cannot open TFDS {name!r} split {split!r} (data_dir={data_dir}; it must "
                    f"be prepared in array_record format): {_one_line(e).split(' Available ')[0]}"
                    ) from None


def _read_tfds(source, name: str, split: str, i: int) -> dict:
  try:
    return source[i]
  except Exception as e:
    raise DataError(f"cannot read example {i} of TFDS {name!r} split {split!r}: "
                    f"{_one_line(e)}") from None


class _ReopenedRecords:
  """A record reader that pickles without its open source (`_source`) and reopens it (`_open`) in
  the process that decodes: worker processes receive a path or a spec, never an open reader."""
  num_records: int
  _source = None

  def __getstate__(self) -> dict:
    return {**self.__dict__, "_source": None}

  def __len__(self) -> int:
    return self.num_records

  @property
  def source(self):
    if self._source is None:
      self._source = self._open()
    return self._source

  def _open(self):
    raise NotImplementedError


class TfdsRecords(_ReopenedRecords):
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


# ----------------------------------------------------------------------------------------------
# ArrayRecord files written by this project.


def _decode_bytes(encoded: bytes, where: str, resize: int, image_size: int) -> np.ndarray:
  import io  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(io.BytesIO(encoded)) as image:
      return resize_center_crop(image.convert("RGB"), resize, image_size)
  except Exception as e:  # PIL.UnidentifiedImageError, truncated data, ...
    raise DataError(f"cannot decode {where}: {_one_line(e)}") from None


class ArrayRecordImages(_ReopenedRecords):
  """Record i of an ArrayRecord file of `write_array_record`: its image bytes after the 4-byte label,
  RGB, `resize_center_crop`-ed to image_size² (an image already image_size² with resize equal to it
  is kept as stored). Pickles as the path; the reader opens in the process that decodes."""

  def __init__(self, path: str | os.PathLike, num_records: int, image_size: int, resize: int):
    self.path, self.num_records = str(path), num_records
    self.image_size, self.resize = image_size, resize
    self.image_shape = (image_size, image_size, 3)

  def _open(self):
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
  import struct  # pylint: disable=g-import-not-at-top
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
  _check_split(name, split)
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
    raise DataError(f"cannot read {meta}: {_one_line(e)}") from None
  records = ArrayRecordImages(path, len(labels), image_size, resize)
  return Split(LazyImages(records), labels, len(class_names), class_names, name)


def convert_to_array_record(name: str, data_dir, out_pattern: str,
                            splits: Sequence[str] = SPLITS) -> list[pathlib.Path]:
  """Copies every existing split of an image-file source ('imagenet_lt', 'places_lt', 'list:...',
  'inat2018') into `out_pattern` ('{split}' replaced), the files' bytes unchanged."""
  written = []
  for split in splits:
    try:
      source = load_split(name, split, data_dir, image_size=1, resize=1)
    except DataError:
      continue  # a split the source does not have
    records = source.images.records
    encoded = (pathlib.Path(records.root, records.paths[row]).read_bytes()
               for row in source.images.rows)
    written.append(write_array_record(out_pattern.replace("{split}", split), list(encoded),
                                      source.labels, source.class_names))
  return written


# The lazy sources, one entry each: a name, or a prefix followed by the source's own argument. Each
# loader is called as loader(name, split, data_dir, image_size, resize) (TFDS images keep their
# stored shape; the image-file sources decode with `resize_center_crop`).
LAZY_SOURCES = {
    IMAGENET_LT: load_image_list,
    PLACES_LT: load_image_list,
    INAT2018: lambda name, split, data_dir, image_size, resize: load_inat2018(
        split, data_dir, image_size, resize),
}
LAZY_PREFIXES = {
    LIST_PREFIX: load_image_list,
    TFDS_PREFIX: lambda name, split, data_dir, image_size, resize: load_tfds(name, split, data_dir),
    ARRAY_RECORD_PREFIX: load_array_record,
}
LAZY_SOURCE_NAMES = (*LAZY_SOURCES, *(f"{prefix}<...>" for prefix in LAZY_PREFIXES))


def _lazy_loader(name: str):
  if name in LAZY_SOURCES:
    return LAZY_SOURCES[name]
  return next((load for prefix, load in LAZY_PREFIXES.items() if name.startswith(prefix)), None)


def is_lazy_source(name: str) -> bool:
  """Whether `load_split` reads source `name` here (every split it returns holds `LazyImages`)."""
  return _lazy_loader(name) is not None


def load_split(name: str, split: str, data_dir=None, *, image_size: int = 224,
               resize: int = 256) -> Split:
  """Split `split` of a lazy source (`LAZY_SOURCES` / `LAZY_PREFIXES`); `image_size` and `resize`
  set the decode of image files (`resize_center_crop`), TFDS images keep their stored shape."""
  load = _lazy_loader(name)
  if load is None:
    raise DataError(f"{name!r} is not a lazy source; expected one of {LAZY_SOURCE_NAMES}")
  return load(name, split, data_dir, image_size, resize)


def main(argv=None) -> int:
  """`python -m experiments.data.sources --dataset=imagenet_lt --data_dir=/data/imagenet
  --out=/data/ar/imagenet_lt-{split}.array_record`: every split as one ArrayRecord file, then
  train with `--config.dataset=arrayrecord:/data/ar/imagenet_lt-{split}.array_record`."""
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
  parser.add_argument("--dataset", required=True)
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--out", required=True, help="output path with {split}")
  args = parser.parse_args(argv)
  for path in convert_to_array_record(args.dataset, args.data_dir, args.out):
    print(path)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
