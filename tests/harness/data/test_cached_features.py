"""experiments/data/cached_features.py: cached features as a data source (files, checks, the
stored flipped view) and how the batches read a features split (as they are: not normalised, not
augmented)."""

import json

import numpy as np
import pytest

from experiments.common.errors import DataError
from experiments.data import batches, cached_features, loading
from experiments.data.split import Split

NAMES = tuple(f"c{k}" for k in range(4))


def write(folder, n=40, d=6, flip=True, seed=0):
  rng = np.random.default_rng(seed)
  labels = np.arange(n) % len(NAMES)
  features = rng.normal(size=(n, d)).astype(np.float32)
  cached_features.write_split(folder, "toy", "train", features, labels, NAMES)
  cached_features.write_split(folder, "toy", "test", features[:8] + 1, labels[:8], NAMES)
  if flip:
    cached_features.write_split(folder, "toy", "train-flip", -features, labels, NAMES)
  return features, labels


def test_features_round_trip_through_load_split(tmp_path):
  features, labels = write(tmp_path)
  train = loading.load_split("features:toy", "train", tmp_path)
  assert train.is_features and train.extra_views is None and train.name == "features:toy"
  np.testing.assert_array_equal(train.images, features)
  np.testing.assert_array_equal(train.labels, labels)
  assert train.class_names == NAMES and train.num_classes == 4
  assert json.loads((tmp_path / "toy-classes.json").read_text())["class_names"] == list(NAMES)
  test = loading.load_split("features:toy", "test", tmp_path)
  np.testing.assert_array_equal(test.images, features[:8] + 1)


def test_flip_source_stores_the_second_view_row_for_row(tmp_path):
  features, labels = write(tmp_path)
  train = loading.load_split("features:toy+flip", "train", tmp_path)
  assert train.extra_views.shape == (40, 1, 6)
  np.testing.assert_array_equal(train.extra_views[:, 0], -features)
  sub = train.subset(np.array([5, 2, 9]))
  np.testing.assert_array_equal(sub.images, features[[5, 2, 9]])
  np.testing.assert_array_equal(sub.extra_views[:, 0], -features[[5, 2, 9]])
  # The test split has no flipped view: it is read as one view.
  assert loading.load_split("features:toy+flip", "test", tmp_path).extra_views is None


def test_bad_files_are_data_errors_naming_them(tmp_path):
  with pytest.raises(DataError, match="toy-train-features.npy"):
    loading.load_split("features:toy", "train", tmp_path)
  features, labels = write(tmp_path, flip=False)
  with pytest.raises(DataError, match="toy-train-flip-features.npy"):
    loading.load_split("features:toy+flip", "train", tmp_path)
  bad = features.copy()
  bad[7, 2] = np.nan
  cached_features.write_split(tmp_path, "nan", "train", bad, labels, NAMES)
  with pytest.raises(DataError, match="1 rows hold non-finite values \\(first: 7\\)"):
    loading.load_split("features:nan", "train", tmp_path)
  np.save(tmp_path / "ints-train-features.npy", np.zeros((4, 3), np.int64))
  np.save(tmp_path / "ints-train-labels.npy", np.zeros(4, np.int64))
  (tmp_path / "ints-classes.json").write_text(json.dumps({"class_names": list(NAMES)}))
  with pytest.raises(DataError, match="must be float32 \\[N, d\\]"):
    loading.load_split("features:ints", "train", tmp_path)
  cached_features.write_split(tmp_path, "mismatch", "train", features, labels, NAMES)
  cached_features.write_split(tmp_path, "mismatch", "train-flip", features, labels[::-1], NAMES)
  with pytest.raises(DataError, match="do not match"):
    loading.load_split("features:mismatch+flip", "train", tmp_path)


def test_split_refuses_other_shapes_and_mismatched_views():
  labels = np.zeros(3, np.int32)
  with pytest.raises(DataError, match="uint8 \\[N, H, W, C\\] \\(pixels\\) or float32 \\[N, d\\]"):
    Split(np.zeros((3, 4), np.float64), labels, 1, ("a",))
  with pytest.raises(DataError, match="extra views"):
    Split(np.zeros((3, 4), np.float32), labels, 1, ("a",), extra_views=np.zeros((3, 1, 5),
                                                                               np.float32))


def test_batches_read_features_as_they_are(tmp_path):
  features, labels = write(tmp_path)
  train = loading.load_split("features:toy+flip", "train", tmp_path)
  (one,) = list(batches.train_batches(train, 40, seed=3, epoch=1, augment=False))
  order = batches.epoch_permutation(40, 3, 1)
  np.testing.assert_array_equal(one["image"], features[order])  # no normalisation
  np.testing.assert_array_equal(one["index"], order)
  (two,) = list(batches.train_batches(train, 40, seed=3, epoch=1, augment=False, views=2))
  assert two["image"].shape == (40, 2, 6)
  np.testing.assert_array_equal(two["image"][:, 1], -features[order])  # the stored view
  plain = loading.load_split("features:toy", "train", tmp_path)
  (copies,) = list(batches.train_batches(plain, 40, seed=3, epoch=1, augment=False, views=2))
  np.testing.assert_array_equal(copies["image"][:, 1], copies["image"][:, 0])
  with pytest.raises(DataError, match="not augmented"):
    next(batches.train_batches(train, 40, seed=3, epoch=1, augment=True))
  *_, last = batches.eval_batches(loading.load_split("features:toy", "test", tmp_path), 5)
  assert last["image"].dtype == np.float32 and not last["mask"][3:].any()
  np.testing.assert_array_equal(last["image"][:3], features[5:8] + 1)
  np.testing.assert_array_equal(last["image"][3:], 0)


def test_synthetic_features_have_the_asked_shape_and_read_as_a_features_source(tmp_path):
  cached_features.write_synthetic(tmp_path, "synthetic", 50, 7, test_rows=20)
  train = loading.load_split("features:synthetic", "train", tmp_path)
  test = loading.load_split("features:synthetic", "test", tmp_path)
  assert train.images.shape == (50, 7) and train.images.dtype == np.float32
  assert test.images.shape == (20, 7) and train.is_features and train.num_classes == 10
  assert np.bincount(train.labels).tolist() == [5] * 10
