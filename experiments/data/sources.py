"""The lazy sources by name (`LAZY_SOURCES`, `LAZY_PREFIXES`): random-access image sources whose
rows are decoded only when indexed (`experiments.data.lazy_images.LazyImages`); and
`python -m experiments.data.sources`, which copies an image-file source into ArrayRecord files.

The long-tailed benchmarks of Liu et al. (2019, OLTR) and iNaturalist 2018 do not fit in host memory
as decoded uint8 (ImageNet-LT train alone is 115,846 · 224² · 3 bytes = 17 GB), so their
`Split.images` is a `LazyImages`, which decodes the rows asked for when indexed.

Sources (`experiments.data.loading.load_split` names), and the module that reads each:
  'imagenet_lt', 'places_lt'  `image_files`: the OLTR split lists `ImageNet_LT_{split}.txt`,
                              `Places_LT_{split}.txt` (one `<relative path> <label>` per line) in
                              `data_dir`, the image root; splits 'train', 'val', 'test'.
  'list:<path>'               `image_files`: the same format from any list files: `{split}` in the
                              path is replaced by the split name ('list:/data/lists/my_{split}.txt';
                              a relative path is relative to `data_dir`); the image paths are
                              relative to `data_dir`.
  'inat2018'                  `image_files`: `data_dir`/train2018.json, val2018.json (iNaturalist
                              2018's COCO-style annotations, paths relative to `data_dir`); split
                              'test' reads val2018, as is customary (the test labels were never
                              released).
  'arrayrecord:<path>'        `array_records`: ArrayRecord files written by this project
                              (`write_array_record`, `python -m experiments.data.sources` from any
                              of the above): one record per image, its encoded bytes (JPEG / PNG)
                              after a 4-byte label, and `<file>.json` beside it with the labels and
                              class names (so labels never read the records); `{split}` in the
                              path as for 'list:', relative to `data_dir`. One file per split
                              instead of a million small ones.
  'tfds:<name>'               `tfds_source`: a TFDS dataset prepared in ArrayRecord format, read
                              through `tfds.data_source` (random access; TensorFlow is not needed).

Image files are decoded with Pillow to RGB, their shorter side resized to `resize` (bilinear) and
centre-cropped to `image_size`² (torchvision's Resize(256) + CenterCrop(224), the evaluation
transform of these benchmarks), so every row has one shape.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence

from absl import flags

from experiments.common import cli
from experiments.common.errors import DataError
from experiments.data.array_records import (ARRAY_RECORD_PREFIX, load_array_record,
                                            write_array_record)
from experiments.data.image_files import (IMAGENET_LT, INAT2018, LIST_PREFIX, PLACES_LT, SPLITS,
                                          load_image_list, load_inat2018)
from experiments.data.split import Split
from experiments.data.tfds_source import TFDS_PREFIX, load_tfds


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


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_string("dataset", None, "The image-file source to copy: imagenet_lt, places_lt, "
                      "inat2018 or list:<path>.", required=True, flag_values=flag_values)
  flags.DEFINE_string("data_dir", None, "Its data_dir (the image root).", required=True,
                      flag_values=flag_values)
  flags.DEFINE_string("out", None, "Output path of each split's file, with {split}.",
                      required=True, flag_values=flag_values)


def convert_command(args: flags.FlagValues) -> None:
  """Copies every split and prints the paths written."""
  for path in convert_to_array_record(args.dataset, args.data_dir, args.out):
    print(path)


def main(argv=None) -> int:
  """`python -m experiments.data.sources --dataset=imagenet_lt --data_dir=/data/imagenet
  --out=/data/ar/imagenet_lt-{split}.array_record`: every split as one ArrayRecord file, then
  train with `--config.dataset=arrayrecord:/data/ar/imagenet_lt-{split}.array_record`."""
  return cli.run_command(define_flags, convert_command, argv)


if __name__ == "__main__":
  sys.exit(main())
