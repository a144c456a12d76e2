"""Tests for the lazy sources of experiments/data (sources.py, lazy_images.py, image_files.py,
tfds_source.py, array_records.py): image folders with OLTR split lists, iNaturalist 2018 JSON and
TFDS, all in their real file formats (tiny JPEGs in tmp_path, `tfds.testing.mock_data`), decoded on
index."""

import importlib.util
import json
import logging
import pickle
import sys

import numpy as np
import pytest
from PIL import Image

from experiments.common.errors import DataError
from experiments.data import array_records
from experiments.data import batches
from experiments.data import holdout
from experiments.data import image_files
from experiments.data import lazy_images
from experiments.data import loading
from experiments.data import long_tail
from experiments.data import normalization
from experiments.data import sources

IMAGE_SIZE, RESIZE = 16, 20
WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361")
TRAIN_COUNTS = (6, 3, 2, 1)  # Long-tailed; val and test hold one image per class.
# With many=4, few=2: 6 > 4 is Many, 3 and 2 Medium, 1 < 2 Few.
GROUPS = (long_tail.MANY, long_tail.MEDIUM, long_tail.MEDIUM, long_tail.FEW)


def write_jpeg(path, seed, portrait=False):
  """A 40×30 JPEG (30×40 when portrait), red = 37·seed mod 256, green / blue ramps along x / y."""
  height, width = (40, 30) if portrait else (30, 40)
  y, x = np.mgrid[:height, :width]
  pixels = np.stack([np.full_like(x, 37 * seed % 256), 6 * x, 6 * y], axis=-1).astype(np.uint8)
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.fromarray(pixels).save(path, quality=95)


def reference(path):
  """Pillow RGB decode, shorter side → RESIZE (bilinear, longer side floored), centre crop (the
  fixture's size differences are even, so the centre is exact)."""
  with Image.open(path) as image:
    image = image.convert("RGB")
  width, height = image.size
  short = min(width, height)
  image = image.resize((RESIZE * width // short, RESIZE * height // short), Image.BILINEAR)
  pixels = np.asarray(image)
  top, left = (pixels.shape[0] - IMAGE_SIZE) // 2, (pixels.shape[1] - IMAGE_SIZE) // 2
  return pixels[top:top + IMAGE_SIZE, left:left + IMAGE_SIZE]


@pytest.fixture
def tree(tmp_path):
  """An ImageNet-LT-style image root: train/<wnid>/*.JPEG (class-interleaved list order, one
  portrait image), val/<wnid>/*.JPEG for the val and test lists, and ImageNet_LT_{split}.txt.
  Returns (root, {split: (relative paths, labels)})."""
  train = [(f"train/{WNIDS[k]}/{WNIDS[k]}_{j}.JPEG", k)
           for j in range(max(TRAIN_COUNTS)) for k in range(4) if j < TRAIN_COUNTS[k]]
  lists = {"train": train,
           "val": [(f"val/{WNIDS[k]}/ILSVRC2012_val_{k}.JPEG", k) for k in range(4)],
           "test": [(f"val/{WNIDS[k]}/ILSVRC2012_val_{4 + k}.JPEG", k) for k in reversed(range(4))]}
  seed = 0
  for split, rows in lists.items():
    for path, _ in rows:
      write_jpeg(tmp_path / path, seed, portrait=seed == 2)
      seed += 1
    (tmp_path / f"ImageNet_LT_{split}.txt").write_text(
        "".join(f"{path} {label}\n" for path, label in rows))
  return tmp_path, {s: ([p for p, _ in rows], np.array([k for _, k in rows]))
                    for s, rows in lists.items()}


def load(name, split, root):
  return loading.load_split(name, split, root, image_size=IMAGE_SIZE, resize=RESIZE)


def references(root, paths):
  return np.stack([reference(root / p) for p in paths])


def test_imagenet_lt_labels_rows_and_groups(tree):
  root, lists = tree
  for split, (paths, labels) in lists.items():
    loaded = load("imagenet_lt", split, root)
    assert isinstance(loaded.images, lazy_images.LazyImages)
    assert loaded.images.shape == (len(paths), IMAGE_SIZE, IMAGE_SIZE, 3)
    assert (loaded.images.dtype, loaded.images.ndim, len(loaded)) == (np.uint8, 4, len(paths))
    np.testing.assert_array_equal(loaded.labels, labels)
    assert loaded.num_classes == 1000 and loaded.class_names[:4] == WNIDS
    np.testing.assert_array_equal(loaded.images[:], references(root, paths))  # Slice: all rows.
  train = load("imagenet_lt", "train", root)
  paths = lists["train"][0]
  expected = references(root, paths)
  np.testing.assert_array_equal(train.images[2], expected[2])  # The portrait image.
  np.testing.assert_array_equal(train.images[-1], expected[-1])
  np.testing.assert_array_equal(train.images[np.array([5, 0, 5])], expected[[5, 0, 5]])
  np.testing.assert_array_equal(train.images[[1, 3]], expected[[1, 3]])
  assert train.images[4:4].shape == (0, IMAGE_SIZE, IMAGE_SIZE, 3)
  np.testing.assert_array_equal(train.class_counts[:4], TRAIN_COUNTS)
  np.testing.assert_array_equal(long_tail.many_medium_few(train.class_counts[:4], many=4, few=2),
                                GROUPS)
  batch = next(batches.eval_batches(train, 8))
  assert batch["image"].shape == (8, IMAGE_SIZE, IMAGE_SIZE, 3)


def test_places_lt_and_list_sources_read_the_same_format(tree):
  root, lists = tree
  (root / "lists").mkdir()
  for split in lists:
    text = (root / f"ImageNet_LT_{split}.txt").read_text()
    (root / f"Places_LT_{split}.txt").write_text(text)
    (root / "lists" / f"mine_{split}.txt").write_text(text)
  places = load("places_lt", "train", root)
  assert places.num_classes == 365 and places.class_names[:4] == WNIDS
  custom = load(f"list:{root}/lists/mine_{{split}}.txt", "test", root)
  assert custom.num_classes == 4 and custom.class_names == WNIDS
  np.testing.assert_array_equal(custom.labels, lists["test"][1])
  np.testing.assert_array_equal(custom.images[:], references(root, lists["test"][0]))
  for split in ("train", "val"):
    (root / f"Places_LT_{split}.txt").unlink()
  with pytest.raises(DataError, match=r"not found: .*Places_LT_val\.txt \(expected "
                     r".*Places_LT_train\.txt, .*Places_LT_test\.txt"):
    load("places_lt", "val", root)
  test = load("places_lt", "test", root)  # The remaining list alone.
  assert test.num_classes == 365 and len(test) == 4
  for train in (places, load(f"list:{root}/lists/mine_{{split}}.txt", "train", root)):
    np.testing.assert_array_equal(long_tail.many_medium_few(train.class_counts[:4], many=4, few=2),
                                  GROUPS)
  with pytest.raises(DataError, match=r"must contain '\{split\}'"):
    load(f"list:{root}/lists/mine_train.txt", "train", root)


def test_subsets_stay_lazy_and_only_indexed_rows_are_decoded(tree):
  root, lists = tree
  paths = lists["train"][0]
  kept = np.array([7, 2])
  expected = references(root, [paths[i] for i in kept])
  for i in set(range(len(paths))) - set(kept.tolist()):
    (root / paths[i]).unlink()
  train = load("imagenet_lt", "train", root)  # Labels and counts open no image.
  np.testing.assert_array_equal(train.class_counts[:4], TRAIN_COUNTS)
  subset = train.subset(kept)
  assert isinstance(subset.images, lazy_images.LazyImages) and subset.images.shape[0] == 2
  np.testing.assert_array_equal(subset.labels, lists["train"][1][kept])
  np.testing.assert_array_equal(subset.images[:], expected)
  np.testing.assert_array_equal(subset.subset([1]).images[0], expected[1])
  kept_part, held_out = holdout.validation_split(train, 0.5, seed=0)
  assert isinstance(kept_part.images, lazy_images.LazyImages)
  assert isinstance(held_out.images, lazy_images.LazyImages)
  with pytest.raises(DataError, match=rf"example 0 \(.*{paths[0]}\)"):
    train.images[0]


def test_out_of_range_and_unsupported_indices_are_refused(tree):
  images = load("imagenet_lt", "val", tree[0]).images
  for key in (4, -5, np.array([0, 4]), [-5]):
    with pytest.raises(IndexError):
      images[key]
  with pytest.raises(IndexError):
    images.take([4])
  with pytest.raises(IndexError):
    lazy_images.LazyImages(images.records, np.array([0, 4]))
  for key in ((0, 1), np.array([True, False, True, False]), 1.0):
    with pytest.raises(TypeError):
      images[key]


def test_unreadable_image_names_the_file_and_example(tree):
  root, lists = tree
  paths = lists["train"][0]
  (root / paths[3]).write_bytes(b"not a JPEG")
  (root / paths[5]).unlink()
  train = load("imagenet_lt", "train", root)
  with pytest.raises(DataError, match=rf"example 3 \(.*{paths[3]}\)"):
    train.images[np.array([0, 3])]
  with pytest.raises(DataError, match=rf"example 5 \(.*{paths[5]}\).*No such file"):
    train.images[5]


def test_bad_split_lists_are_refused_with_the_line(tree):
  root, _ = tree
  train_list = root / "ImageNet_LT_train.txt"
  good = train_list.read_text().splitlines()
  for lines, line_number in (([good[0], "train/a/b.JPEG zero"], 2),
                             ([good[0], good[1], "train/a/b.JPEG"], 3),
                             ([good[0], "train/a/b.JPEG -1"], 2),
                             ([], 1)):
    train_list.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(DataError, match=rf"ImageNet_LT_train\.txt: line {line_number}: "):
      load("imagenet_lt", "val", root)  # Every list of the source is read.
  train_list.write_text("train/a/b.JPEG 1000\n")
  with pytest.raises(DataError, match=r"label 1000 outside \[0, 1000\)"):
    load("imagenet_lt", "train", root)
  with pytest.raises(DataError, match="needs data_dir"):
    loading.load_split("imagenet_lt", "train")
  with pytest.raises(DataError, match="unknown split 'validation'"):
    load("imagenet_lt", "validation", root)


def test_lazy_images_pickle_as_paths(tree):
  root, lists = tree
  images = load("imagenet_lt", "train", root).images.take([3, 1])
  images[0]  # Decoding caches nothing that pickles.
  blob = pickle.dumps(images)
  assert len(blob) < 2048
  np.testing.assert_array_equal(pickle.loads(blob)[:],
                                references(root, [lists["train"][0][i] for i in (3, 1)]))


def test_inat2018_json_labels_names_and_rows(tree, caplog):
  root, lists = tree
  category_ids = (42, 3, 10, 7)  # Not 0..K−1 and listed out of order: ranks are the labels.
  by_rank = sorted(category_ids)
  for split, file_name in (("train", "train2018.json"), ("val", "val2018.json")):
    paths, labels = lists[split]
    image_ids = 1000 + 7 * np.arange(len(paths))
    (root / file_name).write_text(json.dumps({
        "images": [{"id": int(i), "file_name": p, "width": 40, "height": 30}
                   for i, p in zip(image_ids, paths)],
        "annotations": [{"id": n, "image_id": int(i), "category_id": by_rank[k]}
                        for n, (i, k) in enumerate(zip(image_ids[::-1], labels[::-1]))],
        "categories": [{"id": c, "name": f"species {c}", "supercategory": "Plantae"}
                       for c in category_ids]}))
  with caplog.at_level(logging.WARNING):
    train = load("inat2018", "train", root)
  assert "category ids are not 0..3" in caplog.text
  assert train.num_classes == 4 and train.class_names == tuple(f"species {c}" for c in by_rank)
  np.testing.assert_array_equal(train.labels, lists["train"][1])
  np.testing.assert_array_equal(train.images[[0, 2]],
                                references(root, [lists["train"][0][i] for i in (0, 2)]))
  np.testing.assert_array_equal(long_tail.many_medium_few(train.class_counts, many=4, few=2),
                                GROUPS)
  test = load("inat2018", "test", root)  # val2018.json.
  np.testing.assert_array_equal(test.labels, lists["val"][1])
  np.testing.assert_array_equal(test.images[:], references(root, lists["val"][0]))
  annotations = json.loads((root / "val2018.json").read_text())
  annotations["annotations"].pop()
  (root / "val2018.json").write_text(json.dumps(annotations))
  with pytest.raises(DataError, match="exactly one annotation per image"):
    load("inat2018", "val", root)
  (root / "train2018.json").unlink()
  with pytest.raises(DataError,
                     match=r"not found: .*train2018\.json \(expected train2018\.json, val2018"):
    load("inat2018", "train", root)


def test_tfds_cifar100_is_lazy_and_ldam_subset_stays_lazy():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=64):
    train = loading.load_split("tfds:cifar100", "train")
    mock = tfds.data_source("cifar100", split="train", download=False)
    expected = np.stack([mock[i]["image"] for i in range(64)])
    np.testing.assert_array_equal(train.labels, [mock[i]["label"] for i in range(64)])
    assert isinstance(train.images, lazy_images.LazyImages)
    assert train.images.shape == (64, 32, 32, 3) and train.num_classes == 100
    np.testing.assert_array_equal(train.images[np.array([63, 0, 7])], expected[[63, 0, 7]])
    kept = long_tail.long_tail_indices(train.labels, 100, 10.0, seed=3, selection="ldam")
    long_tailed = train.subset(kept)
    assert isinstance(long_tailed.images, lazy_images.LazyImages) and 0 < len(kept) < 64
    np.testing.assert_array_equal(long_tailed.images[:], expected[kept])
    blob = pickle.dumps(long_tailed.images)  # The spec, not the opened source.
    assert len(blob) < 2048
    np.testing.assert_array_equal(pickle.loads(blob)[:], expected[kept])
  assert long_tail.many_medium_few(train.class_counts).shape == (100,)
  np.testing.assert_allclose(
      normalization.normalize(np.zeros((1, 1, 1, 3), np.uint8), "tfds:cifar100"),
      -np.divide((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))[None, None, None], rtol=1e-6)
  if importlib.util.find_spec("tensorflow") is None:
    assert "tensorflow" not in sys.modules


def test_array_record_files_written_here_read_as_the_image_list(tree):
  root, lists = tree
  written = sources.convert_to_array_record(image_files.IMAGENET_LT, root,
                                            str(root / "ar" / "lt-{split}.array_record"))
  assert [p.name for p in written] == [f"lt-{s}.array_record" for s in image_files.SPLITS]
  name = "arrayrecord:ar/lt-{split}.array_record"  # relative to data_dir
  for split in image_files.SPLITS:
    from_files, from_records = load(image_files.IMAGENET_LT, split, root), load(name, split, root)
    assert isinstance(from_records.images, lazy_images.LazyImages)
    np.testing.assert_array_equal(from_records.labels, from_files.labels)
    assert from_records.class_names == from_files.class_names  # K = 1000: the benchmark's
    np.testing.assert_array_equal(from_records.images[:], references(root, lists[split][0]))
  train = load(name, "train", root)
  np.testing.assert_array_equal(long_tail.many_medium_few(train.class_counts, many=4, few=2)[:4],
                                GROUPS)
  again = pickle.loads(pickle.dumps(train.subset(np.array([3, 0]))))  # the path, not a reader
  np.testing.assert_array_equal(again.images[:], train.images[np.array([3, 0])])
  with pytest.raises(DataError, match=r"must contain '\{split\}'"):
    load("arrayrecord:ar/lt-train.array_record", "train", root)
  with pytest.raises(DataError, match="not found"):
    load("arrayrecord:nowhere/{split}.array_record", "train", root)
  bad = array_records.write_array_record(root / "bad-train.array_record", [b"not an image"], [0],
                                         ["a"])
  with pytest.raises(DataError, match=f"cannot decode record 0 of {bad}"):
    load("arrayrecord:bad-{split}.array_record", "train", root).images[0]
  with pytest.raises(DataError, match=r"labels must lie in \[0, 1\)"):
    array_records.write_array_record(root / "x.array_record", [b"a"], [1], ["a"])


def test_the_conversion_command_writes_every_split(tree, capsys):
  root, lists = tree
  out = str(root / "cli" / "lt-{split}.array_record")
  assert sources.main(["--dataset", image_files.IMAGENET_LT, "--data_dir", str(root),
                       "--out", out]) == 0
  printed = capsys.readouterr().out.split()
  assert printed == [out.replace("{split}", s) for s in image_files.SPLITS]
  test = load("arrayrecord:" + out, "test", root)
  np.testing.assert_array_equal(test.labels, lists["test"][1])
