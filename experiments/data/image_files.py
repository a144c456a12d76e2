"""Sources of image files decoded on index (a `LazyImages` of `ImageFiles`): the OLTR split lists
('imagenet_lt', 'places_lt', 'list:<path>') and iNaturalist 2018's JSON annotations ('inat2018');
`experiments.data.sources` describes the files expected. An image is decoded with Pillow to RGB,
its shorter side resized to `resize` (bilinear) and centre-cropped to `image_size`²
(`resize_center_crop`: torchvision's Resize(256) + CenterCrop(224), the evaluation transform of
these benchmarks), so every row has one shape."""

from __future__ import annotations

import json
import logging
import operator
import os
import pathlib

import numpy as np
from PIL import Image

from experiments.common.errors import DataError
from experiments.data.lazy_images import LazyImages
from experiments.data.split import Split, one_line

IMAGENET_LT = "imagenet_lt"
PLACES_LT = "places_lt"
INAT2018 = "inat2018"
LIST_PREFIX = "list:"
SPLITS = ("train", "val", "test")

# Split-list file names of the OLTR release, and the class counts of the two benchmarks.
OLTR_LISTS = {IMAGENET_LT: ("ImageNet_LT_{split}.txt", 1000),
              PLACES_LT: ("Places_LT_{split}.txt", 365)}
INAT2018_FILES = {"train": "train2018.json", "val": "val2018.json", "test": "val2018.json"}

log = logging.getLogger(__name__)


def resize_center_crop(image, resize: int, image_size: int) -> np.ndarray:
  """uint8 [image_size, image_size, C]: a PIL image with its shorter side resized to `resize`
  (bilinear, the longer side to ⌊resize · long / short⌋) and centre-cropped, as torchvision's
  Resize(resize) + CenterCrop(image_size) on PIL images (top-left corner rounded to nearest)."""
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
    path = os.path.join(self.root, self.paths[i])
    try:
      with Image.open(path) as image:
        return resize_center_crop(image.convert("RGB"), self.resize, self.image_size)
    except Exception as e:  # FileNotFoundError, PIL.UnidentifiedImageError, truncated data, ...
      raise DataError(f"cannot decode example {i} ({path}): {one_line(e)}") from None


def read_image_list(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  """(relative paths str [N], labels int64 [N]) of a split list: line i+1 is
  `<relative path> <label>` (the OLTR release format; the label follows the last space)."""
  try:
    lines = np.array(path.read_text().splitlines() or [""])
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f"cannot read split list {path}: {one_line(e)}") from None
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


def check_split(name: str, split: str):
  if split not in SPLITS:
    raise DataError(f"unknown split {split!r} for dataset {name!r}; expected one of {SPLITS}")


def load_image_list(name: str, split: str, data_dir, image_size: int = 224,
                    resize: int = 256) -> Split:
  """Split `split` of an OLTR-format source ('imagenet_lt', 'places_lt' or 'list:<path>').

  Every existing list of the source (train, val, test, in that order) is read, so that the splits
  agree on K (the benchmark's 1000 / 365; for 'list:' 1 + the largest label listed) and on the class
  names (`_class_folders`: ImageNet's wnids, Places' scene folders).
  """
  check_split(name, split)
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
  check_split(INAT2018, split)
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
                    f"{one_line(e)})") from None
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
