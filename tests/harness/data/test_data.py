"""Tests for experiments/data: in-memory sources and loading, long-tailed subsets, the validation
hold-out, normalisation, batch iterators, threads, augmentation."""

import dataclasses
import importlib.util
import io
import itertools
import pathlib
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

from experiments.common.errors import DataError
from experiments.data import augmentations
from experiments.data import batches as batches_lib
from experiments.data import crop_flip as crop_flip_lib
from experiments.data import holdout
from experiments.data import in_memory_sources
from experiments.data import loading
from experiments.data import long_tail
from experiments.data import normalization
from experiments.data import resized_crop
from experiments.data import threaded_map
from experiments.data.split import Split

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# The published CIFAR-10-LT class sizes (Cui et al. 2019; Cao et al. 2019) for n_max = 5000.
CIFAR10_LT_COUNTS = {
    10: [5000, 3871, 2997, 2320, 1796, 1391, 1077, 834, 645, 500],
    100: [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50],
}


def balanced_labels(per_class=5000, num_classes=10, seed=0):
  return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def indexed_split(num_examples, num_classes=4, channels=1):
  """Image i is filled with the value i (< 256), so a batch tells which examples it holds."""
  images = np.broadcast_to(np.arange(num_examples, dtype=np.uint8)[:, None, None, None],
                           (num_examples, 2, 2, channels)).copy()
  labels = (np.arange(num_examples) % num_classes).astype(np.int32)
  return Split(images, labels, num_classes, tuple(map(str, range(num_classes))))


def example_ids(batch_images):
  """Inverts `normalize` for the default constants (mean = std = 0.5) of an unnamed split."""
  pixels = np.rint((batch_images * 0.5 + 0.5) * 255).astype(np.int64)
  assert (pixels == pixels[:, :1, :1, :1]).all()
  return pixels[:, 0, 0, 0]


def random_split(num_examples=64, size=8, seed=0, name=""):
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (num_examples, size, size, 3), dtype=np.uint8)
  labels = rng.integers(0, 10, num_examples).astype(np.int32)
  return Split(images, labels, 10, tuple(map(str, range(10))), name)


def jpeg_bytes(seed=0):
  pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, format="JPEG")
  return buffer.getvalue()


def write_jpeg_npz(path, encoded_images):
  offsets = np.cumsum([0] + [len(e) for e in encoded_images]).astype(np.int64)
  jpeg = np.frombuffer(b"".join(encoded_images), np.uint8)
  np.savez(path, jpeg=jpeg, offsets=offsets, labels=np.zeros(len(encoded_images), np.int32))


# --- Long-tailed subsets ---------------------------------------------------------------------------


@pytest.mark.parametrize("imbalance_factor", [10, 100])
def test_long_tail_counts_follow_formula(imbalance_factor):
  labels = balanced_labels()
  kept = long_tail.long_tail_indices(labels, 10, imbalance_factor, seed=0)
  counts = np.bincount(labels[kept], minlength=10)
  np.testing.assert_array_equal(counts, CIFAR10_LT_COUNTS[imbalance_factor])
  formula = 5000 * float(imbalance_factor) ** (-np.arange(10) / 9)
  assert np.all((counts <= formula + 1e-6) & (counts > formula - 1))
  assert len(np.unique(kept)) == len(kept) and np.all(np.diff(kept) > 0)


def test_long_tail_uses_the_largest_class_as_n_max_and_caps_at_availability():
  labels = np.concatenate([np.zeros(30, int), np.ones(100, int), np.full(5, 2)])
  counts = np.bincount(labels[long_tail.long_tail_indices(labels, 3, 4.0, seed=0)], minlength=3)
  # n_max = 100: class 0 → min(100, 30), class 1 → ⌊100 / 2⌋, class 2 → min(25, 5).
  np.testing.assert_array_equal(counts, [30, 50, 5])


def test_long_tail_is_deterministic_per_seed():
  labels = balanced_labels()
  first = long_tail.long_tail_indices(labels, 10, 100, seed=1)
  np.testing.assert_array_equal(first, long_tail.long_tail_indices(labels, 10, 100, seed=1))
  other = long_tail.long_tail_indices(labels, 10, 100, seed=2)
  assert not np.array_equal(first, other)
  np.testing.assert_array_equal(np.bincount(labels[first]), np.bincount(labels[other]))


def test_imbalance_factor_one_keeps_everything():
  labels = balanced_labels(per_class=50)
  np.testing.assert_array_equal(long_tail.long_tail_indices(labels, 10, 1, seed=0),
                                np.arange(len(labels)))


@pytest.mark.parametrize("imbalance_factor", [0.5, 0.0, -3.0, float("nan")])
def test_imbalance_factor_below_one_raises(imbalance_factor):
  with pytest.raises(DataError, match="imbalance_factor"):
    long_tail.long_tail_indices(balanced_labels(per_class=10), 10, imbalance_factor, seed=0)


def test_validation_split_is_stratified_and_disjoint():
  split = indexed_split(200, num_classes=4)
  split = split.subset(long_tail.long_tail_indices(split.labels, 4, 10, seed=0))  # 50, 23, 10, 5.
  train, val = holdout.validation_split(split, 0.2, seed=0)
  np.testing.assert_array_equal(val.class_counts, [10, 5, 2, 1])
  np.testing.assert_array_equal(train.class_counts + val.class_counts, split.class_counts)
  train_ids, val_ids = example_ids(normalization.normalize(train.images, "")), example_ids(
      normalization.normalize(val.images, ""))
  assert not set(train_ids) & set(val_ids)
  assert set(train_ids) | set(val_ids) == set(
      example_ids(normalization.normalize(split.images, "")))
  again, _ = holdout.validation_split(split, 0.2, seed=0)
  np.testing.assert_array_equal(again.images, train.images)
  with pytest.raises(DataError, match="fraction"):
    holdout.validation_split(split, 1.0, seed=0)


def test_many_medium_few():
  groups = long_tail.many_medium_few(np.array([5000, 101, 100, 20, 19, 0]))
  np.testing.assert_array_equal(groups, [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(long_tail.many_medium_few([50, 10], many=40, few=11), [0, 2])


# --- Training and evaluation batches -------------------------------------------------------------


def collect_ids(split, batch_size, **kwargs):
  batches = list(batches_lib.train_batches(split, batch_size, augment=False, **kwargs))
  for batch in batches:
    assert batch["image"].shape == (batch_size, 2, 2, 1) and batch["image"].dtype == np.float32
    assert batch["label"].shape == (batch_size,) and batch["label"].dtype == np.int32
  ids = np.concatenate([example_ids(b["image"]) for b in batches])
  np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]),
                                split.labels[ids])
  return ids, len(batches)


@pytest.mark.parametrize("epoch", [0, 1])
def test_train_batches_shard_the_epoch_permutation_over_processes(epoch):
  split, batch_size = indexed_split(103), 8
  steps = batches_lib.steps_per_epoch(split, batch_size, process_count=2)
  assert steps == 6  # ⌊⌊103 / 2⌋ / 8⌋
  shards = [collect_ids(split, batch_size, seed=3, epoch=epoch, process_index=p, process_count=2)
            for p in range(2)]
  assert [num_batches for _, num_batches in shards] == [steps, steps]
  (ids0, _), (ids1, _) = shards
  assert not set(ids0) & set(ids1)
  permutation = np.random.default_rng([3, epoch]).permutation(103)
  used = permutation[:steps * batch_size * 2]
  np.testing.assert_array_equal(ids0, used[0::2])
  np.testing.assert_array_equal(ids1, used[1::2])
  assert set(ids0) | set(ids1) == set(used)


def test_the_epoch_order_is_the_recorded_one_and_read_only():
  """The harness's one epoch order (both training pipelines and the linear probe call it) against
  recorded values: a change of the code or of NumPy's generator would change every run's batches.
  Read-only: it is cached and shared by the pipeline's threads."""
  order = batches_lib.epoch_order(20, 16, seed=3, epoch=1)
  np.testing.assert_array_equal(order, [7, 17, 16, 2, 13, 6, 4, 9, 0, 3, 11, 12, 1, 10, 5, 14])
  np.testing.assert_array_equal(batches_lib.epoch_order(12406, 12288, seed=0, epoch=199)[:8],
                                [10149, 11310, 3538, 10048, 195, 1107, 4954, 7316])
  with pytest.raises(ValueError, match="read-only"):
    order[0] = 1


def test_train_batches_single_process_covers_each_kept_index_once_and_reshuffle_per_epoch():
  split = indexed_split(100)
  ids0, steps = collect_ids(split, 16, seed=0, epoch=0)
  assert steps == 6 and len(set(ids0)) == 96 == len(ids0)
  ids0_again, _ = collect_ids(split, 16, seed=0, epoch=0)
  np.testing.assert_array_equal(ids0, ids0_again)
  ids1, _ = collect_ids(split, 16, seed=0, epoch=1)
  assert not np.array_equal(ids0, ids1)


def test_start_batch_resumes_exactly():
  split = random_split(100)
  kwargs = dict(seed=5, epoch=2, augment=True, process_index=1, process_count=2)
  full = list(batches_lib.train_batches(split, 8, **kwargs))
  resumed = list(batches_lib.train_batches(split, 8, start_batch=4, **kwargs))
  assert len(full) == 6 and len(resumed) == 2
  for expected, actual in zip(full[4:], resumed):
    np.testing.assert_array_equal(expected["image"], actual["image"])
    np.testing.assert_array_equal(expected["label"], actual["label"])


def test_train_batches_reject_bad_arguments():
  split = indexed_split(10)
  with pytest.raises(DataError, match="batch"):
    list(batches_lib.train_batches(split, 16, seed=0, epoch=0, augment=False))
  with pytest.raises(DataError, match="process_index"):
    list(batches_lib.train_batches(split, 2, seed=0, epoch=0, augment=False, process_index=2,
                                   process_count=2))
  with pytest.raises(DataError, match="start_batch"):
    list(batches_lib.train_batches(split, 2, seed=0, epoch=0, augment=False, start_batch=6))


def test_eval_batches_cover_every_example_once_in_order_with_mask():
  split = indexed_split(103)
  batches = list(batches_lib.eval_batches(split, 8))
  assert len(batches) == 13
  for batch in batches:
    assert batch["image"].shape == (8, 2, 2, 1) and batch["mask"].dtype == np.bool_
    assert batch["label"].shape == (8,) and batch["mask"].shape == (8,)
  mask = np.concatenate([b["mask"] for b in batches])
  assert mask.sum() == 103 and mask[:103].all() and not mask[103:].any()
  ids = np.concatenate([example_ids(b["image"]) for b in batches])[mask]
  np.testing.assert_array_equal(ids, np.arange(103))
  np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches])[mask], split.labels)
  assert all(b["mask"].all() for b in batches_lib.eval_batches(indexed_split(16), 8))


# --- Augmentation ---------------------------------------------------------------------------------


def test_random_crop_flip_is_a_padded_crop_or_its_mirror():
  images = random_split(64).images
  augmented = crop_flip_lib.random_crop_flip(images, np.random.default_rng(0))
  assert augmented.shape == images.shape and augmented.dtype == np.uint8
  padded = np.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  flips, offsets = [], set()
  for image, out in zip(padded, augmented):
    matches = [(top, left, flip) for top in range(9) for left in range(9) for flip in (0, 1)
               if np.array_equal(out, (lambda c: c[:, ::-1] if flip else c)(
                   image[top:top + 8, left:left + 8]))]
    assert matches, "augmented image is not a crop of the padded image"
    flips.append(matches[0][2])
    offsets.add(matches[0][:2])
  assert 0 < sum(flips) < 64 and len(offsets) > 10


def test_augmentation_is_deterministic_per_seed_epoch_batch_and_changes_images():
  split = random_split(64, size=32, name="cifar10_jpeg")

  def batches(seed, epoch, augment):
    return list(batches_lib.train_batches(split, 16, seed=seed, epoch=epoch, augment=augment))

  augmented = batches(0, 0, True)
  plain = batches(0, 0, False)
  for a, b, p in zip(augmented, batches(0, 0, True), plain):
    assert a["image"].shape == p["image"].shape == (16, 32, 32, 3)
    np.testing.assert_array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(a["label"], p["label"])
    assert not np.array_equal(a["image"], p["image"])
  assert not np.array_equal(batches(1, 0, True)[0]["image"], augmented[0]["image"])
  # With every image identical, batches differ only through their crops: each batch index (and each
  # process) must draw its own.
  same = Split(np.repeat(split.images[:1], 64, axis=0), split.labels, 10, split.class_names)
  drawn = [b["image"] for p in range(2) for b in batches_lib.train_batches(
      same, 16, seed=0, epoch=0, augment=True, process_index=p, process_count=2)]
  assert len(drawn) == 4
  assert all(not np.array_equal(a, b) for i, a in enumerate(drawn) for b in drawn[i + 1:])


def test_normalize_uses_dataset_constants():
  np.testing.assert_allclose(normalization.normalize(np.full((1, 1, 1, 1), 255, np.uint8), "mnist"),
                             (1 - 0.1307) / 0.3081, rtol=1e-6)
  cifar = normalization.normalize(np.zeros((1, 1, 1, 3), np.uint8), "tfds:cifar10")
  np.testing.assert_allclose(cifar[0, 0, 0], -np.array([0.4914, 0.4822, 0.4465]) /
                             np.array([0.2470, 0.2435, 0.2616]), rtol=1e-6)
  assert (normalization.normalize(np.zeros((1, 1, 1, 3), np.uint8), "cifar10_jpeg").dtype
          == np.float32)


# --- Sources ----------------------------------------------------------------------------------------


def test_digits_load_without_external_files():
  train, test = loading.load_split("digits", "train"), loading.load_split("digits", "test")
  assert train.images.shape == (1198, 8, 8, 1) and test.images.shape == (599, 8, 8, 1)
  assert train.images.dtype == np.uint8 and train.images.max() == 255
  assert train.num_classes == 10 and len(train.class_names) == 10
  assert np.abs(test.class_counts - 59.9).max() <= 2  # Stratified: 1/3 of each class.
  np.testing.assert_array_equal(loading.load_split("digits", "test").images, test.images)
  rows = {r.tobytes() for r in train.images}
  assert sum(r.tobytes() in rows for r in test.images) < 10  # Disjoint up to duplicate images.


def test_source_errors_are_data_errors(tmp_path):
  with pytest.raises(DataError, match="unknown dataset 'imagenet'") as error:
    loading.load_split("imagenet", "train")
  # The message lists every registered source, in-memory and lazy.
  for name in ("digits", "mnist", "cifar10_jpeg", "imagenet_lt", "places_lt", "inat2018",
               "list:<...>", "tfds:<...>", "arrayrecord:<...>"):
    assert repr(name) in str(error.value), name
  with pytest.raises(DataError, match="unknown split 'validation'"):
    loading.load_split("digits", "validation")
  with pytest.raises(DataError, match="needs data_dir"):
    loading.load_split("mnist", "train")
  with pytest.raises(DataError, match="not found.*no_such_folder"):
    loading.load_split("cifar10_jpeg", "train", tmp_path / "no_such_folder")
  with pytest.raises(DataError, match="test.npz"):
    loading.load_split("mnist", "test", tmp_path)
  (tmp_path / "train.npz").write_bytes(b"not a zip file")
  with pytest.raises(DataError, match="cannot read"):
    loading.load_split("mnist", "train", tmp_path)


def test_corrupt_jpeg_names_the_index(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  write_jpeg_npz(tmp_path / "train.npz", [jpeg_bytes(0), jpeg_bytes(1), b"\xff\xd8garbage bytes"])
  with pytest.raises(DataError, match=r"corrupt JPEG at index 2 in .*train\.npz") as error:
    loading.load_split("cifar10_jpeg", "train", tmp_path)
  assert "\n" not in str(error.value)
  truncated = jpeg_bytes(2)[:200]
  write_jpeg_npz(tmp_path / "test.npz", [truncated, jpeg_bytes(0)])
  with pytest.raises(DataError, match="index 0"):
    loading.load_split("cifar10_jpeg", "test", tmp_path)


def test_jpeg_decode_is_cached_by_file_size_and_mtime(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  folder = tmp_path / "cifar"
  folder.mkdir()
  write_jpeg_npz(folder / "train.npz", [jpeg_bytes(0), jpeg_bytes(1)])
  first = loading.load_split("cifar10_jpeg", "train", folder)
  assert first.images.shape == (2, 32, 32, 3)
  assert len(list((tmp_path / "cache").glob("*.npy"))) == 1

  def no_decoding(*args, **kwargs):
    raise AssertionError("decoded although a cache entry exists")

  monkeypatch.setattr(in_memory_sources, "decode_jpegs", no_decoding)
  np.testing.assert_array_equal(loading.load_split("cifar10_jpeg", "train", folder).images,
                                first.images)
  monkeypatch.undo()
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  write_jpeg_npz(folder / "train.npz", [jpeg_bytes(2), jpeg_bytes(3), jpeg_bytes(4)])
  assert loading.load_split("cifar10_jpeg", "train", folder).images.shape == (3, 32, 32, 3)


def shared_folder(name):
  folder = SHARED_DATA / name
  if not folder.is_dir():
    pytest.skip(f"shared data not found at {folder} (expected ../shared/data/{name} "
                f"next to the repository)")
  return folder


def test_mnist_loads_from_shared_data():
  test = loading.load_split("mnist", "test", shared_folder("mnist"))
  assert test.images.shape == (10000, 28, 28, 1) and test.images.dtype == np.uint8
  assert test.labels.dtype == np.int32 and test.class_counts.sum() == 10000
  np.testing.assert_array_equal(test.class_counts,
                                [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])


def test_cifar10_jpeg_loads_from_shared_data(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path))
  folder = shared_folder("cifar10_jpeg")
  test = loading.load_split("cifar10_jpeg", "test", folder)
  assert test.images.shape == (10000, 32, 32, 3) and test.images.dtype == np.uint8
  np.testing.assert_array_equal(test.class_counts, np.full(10, 1000))
  assert test.class_names[0] == "airplane" and test.class_names[9] == "truck"
  with np.load(folder / "test.npz") as npz:
    start, stop = npz["offsets"][1234:1236]
    encoded = npz["jpeg"][start:stop].tobytes()
  np.testing.assert_array_equal(test.images[1234], np.asarray(Image.open(io.BytesIO(encoded))))
  assert len(list(tmp_path.glob("cifar10_jpeg-test-*.npy"))) == 1


def test_tfds_source_with_mock_data_without_tensorflow():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=12):
    cifar = loading.load_split("tfds:cifar10", "train")
    mnist = loading.load_split("tfds:mnist", "test")
  assert cifar.images.shape == (12, 32, 32, 3) and cifar.images.dtype == np.uint8
  assert cifar.num_classes == 10 and cifar.labels.dtype == np.int32
  assert mnist.images.shape == (12, 28, 28, 1)
  batch = next(batches_lib.train_batches(cifar, 4, seed=0, epoch=0, augment=True))
  assert batch["image"].shape == (4, 32, 32, 3)
  if importlib.util.find_spec("tensorflow") is None:
    assert "tensorflow" not in sys.modules
  with pytest.raises(DataError, match="not_a_tfds_dataset"):
    loading.load_split("tfds:not_a_tfds_dataset", "train")


# --- Utilities --------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers,ahead", [(1, None), (3, None), (4, 1), (2, 50)])
def test_threaded_map_is_map_in_order(workers, ahead):
  delays = np.random.default_rng(workers).uniform(0, 2e-3, 40)

  def slow_square(i):  # finishes out of order across the threads
    time.sleep(delays[i])
    return i * i

  assert list(threaded_map.threaded_map(slow_square, range(40), workers, ahead)) == [
      i * i for i in range(40)]
  assert list(threaded_map.threaded_map(slow_square, [], workers, ahead)) == []


def test_threaded_map_keeps_at_most_ahead_calls_started():
  started = []
  lock = threading.Lock()

  def record(i):
    with lock:
      started.append(i)
    return i

  stream = threaded_map.threaded_map(record, itertools.count(), workers=2, ahead=5)
  assert [next(stream) for _ in range(3)] == [0, 1, 2]
  time.sleep(0.05)
  with lock:  # 3 taken + 5 in flight or ready: the endless input is not drained
    assert sorted(started) == list(range(8))
  stream.close()


def test_threaded_map_reraises_in_order_and_refuses_bad_sizes():
  def failing(i):
    if i == 3:
      raise RuntimeError(f"item {i} failed")
    return i

  stream = threaded_map.threaded_map(failing, range(10), workers=3)
  assert [next(stream) for _ in range(3)] == [0, 1, 2]
  with pytest.raises(RuntimeError, match="item 3 failed"):
    next(stream)
  with pytest.raises(ValueError, match="workers >= 1"):
    next(threaded_map.threaded_map(failing, range(3), workers=0))
  with pytest.raises(ValueError, match="ahead >= 1"):
    next(threaded_map.threaded_map(failing, range(3), workers=2, ahead=0))


def test_measure_throughput_on_digits():
  assert batches_lib.measure_throughput(loading.load_split("digits", "train"), 64, True, 20) > 0


def test_multi_process_batches_are_the_single_process_global_batch_with_the_same_crops():
  """Process p's batch b holds positions p, p + P, ... of the single-process global batch b, with the
  same augmentation, so P processes together compute exactly what one process computes."""
  split = random_split(96, size=32, name="cifar10_jpeg")
  single = list(batches_lib.train_batches(split, 32, seed=4, epoch=1, augment=True))
  shards = [list(batches_lib.train_batches(split, 16, seed=4, epoch=1, augment=True,
                                           process_index=p, process_count=2)) for p in range(2)]
  assert len(single) == len(shards[0]) == len(shards[1]) == 3
  for b, global_batch in enumerate(single):
    for p in range(2):
      np.testing.assert_array_equal(shards[p][b]["image"], global_batch["image"][p::2])
      np.testing.assert_array_equal(shards[p][b]["label"], global_batch["label"][p::2])


def test_max_count_gives_a_balanced_or_long_tailed_subset_of_that_size():
  labels = np.repeat(np.arange(4), 50)
  balanced = long_tail.long_tail_indices(labels, 4, 1.0, seed=0, max_count=20)
  np.testing.assert_array_equal(np.bincount(labels[balanced], minlength=4), [20, 20, 20, 20])
  tailed = long_tail.long_tail_indices(labels, 4, 8.0, seed=0, max_count=40)
  np.testing.assert_array_equal(np.bincount(labels[tailed], minlength=4), [40, 20, 10, 5])
  with pytest.raises(DataError, match="max_count"):
    long_tail.long_tail_indices(labels, 4, 1.0, seed=0, max_count=0)


def test_split_rejects_labels_that_would_wrap_or_truncate():
  images = np.zeros((2, 2, 2, 1), np.uint8)
  with pytest.raises(DataError, match="labels must lie in"):
    Split(images, np.array([0, 2**32 + 1], np.int64), 10, tuple("abcdefghij"))
  with pytest.raises(DataError, match="labels must be integers"):
    Split(images, np.array([0.0, 1.7]), 10, tuple("abcdefghij"))


def _reference_selection(labels, counts, kind, seed):
  """The released selections transcribed from their code, on NumPy's global legacy generator
  (state saved and restored): LDAM's `gen_imbalanced_data` (np.random.seed(0); per class
  np.random.shuffle of its indices, the first n_c) and GLMC's `produce_imbanlance_data`
  (np.random.seed(seed); per class np.random.choice(members, n_c, replace=...))."""
  saved = np.random.get_state()
  try:
    np.random.seed(0 if kind == "ldam" else seed)
    kept = []
    for c, n in enumerate(counts):
      idx = np.where(labels == c)[0]
      if kind == "ldam":
        np.random.shuffle(idx)
        kept.append(idx[:n])
      else:
        kept.append(idx[np.random.choice(len(idx), n, replace=kind == "glmc_paper")])
    return np.sort(np.concatenate(kept))
  finally:
    np.random.set_state(saved)


@pytest.mark.parametrize("kind", ["ldam", "glmc", "glmc_paper"])
def test_long_tail_selections_equal_the_released_code(kind):
  """'ldam' is the standard seed-0 CIFAR-LT subset whatever `seed`; 'glmc' draws without and
  'glmc_paper' with replacement (duplicates kept); all with the counts n_max·IF^(−i/(K−1))."""
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(10), 500)[rng.permutation(5000)]
  counts = long_tail.long_tail_counts(500, 10, 100.0)
  for seed in (0, 3):
    got = long_tail.long_tail_indices(labels, 10, 100.0, seed, selection=kind)
    np.testing.assert_array_equal(got, _reference_selection(labels, counts, kind, seed))
    np.testing.assert_array_equal(np.bincount(labels[got], minlength=10), counts)
  assert (len(np.unique(long_tail.long_tail_indices(labels, 10, 100.0, 0, selection="glmc_paper")))
          < counts.sum())  # with replacement: the paper's split repeats examples
  ldam = [long_tail.long_tail_indices(labels, 10, 100.0, s, selection="ldam") for s in (0, 5)]
  np.testing.assert_array_equal(ldam[0], ldam[1])
  with pytest.raises(DataError, match="selection"):
    long_tail.long_tail_indices(labels, 10, 100.0, 0, selection="random")


def test_a_source_is_one_registry_entry(monkeypatch):
  """A new data source is one entry of `LOCAL_SOURCES` (or of `sources.LAZY_SOURCES` /
  `LAZY_PREFIXES`), found by `load_split` without another branch."""
  from experiments.data import sources  # pylint: disable=g-import-not-at-top
  digits = loading.load_split("digits", "test")
  monkeypatch.setitem(in_memory_sources.LOCAL_SOURCES, "digits_copy",
                      lambda split, data_dir: dataclasses.replace(digits, name="digits_copy"))
  assert loading.load_split("digits_copy", "test").name == "digits_copy"
  calls = []
  monkeypatch.setitem(sources.LAZY_PREFIXES, "mine:",
                      lambda *args: calls.append(args) or digits)
  assert sources.is_lazy_source("mine:x") and not sources.is_lazy_source("digits")
  assert loading.load_split("mine:x", "val", "/d", image_size=32, resize=36) is digits
  assert calls == [("mine:x", "val", "/d", 32, 36)]


def test_inception_augmentation_crops_at_random_scales():
  """'inception': per-key deterministic; each view a bilinear resize of one box (a constant image
  stays constant), boxes from 0.08 to all of the image (a crop + flip keeps ≥ (W − 8) / W)."""
  width = 32
  ramp = np.broadcast_to(np.linspace(0, 248, width).astype(np.uint8)[None, None, :, None],
                         (64, width, width, 3)).copy()  # pixel value = 8 · x
  out = augmentations.augment_view(ramp, "inception", 0, [0, 1, 2])
  assert out.shape == ramp.shape and out.dtype == np.uint8
  np.testing.assert_array_equal(out, augmentations.augment_view(ramp, "inception", 0, [0, 1, 2]))
  assert not np.array_equal(out, augmentations.augment_view(ramp, "inception", 1, [0, 1, 2]))
  assert not np.array_equal(out, augmentations.augment_view(ramp, "inception", 0, [0, 1, 3]))
  # Rows of one image are equal (the ramp is horizontal), and the x-span an image covers is its
  # box's width: boxes of every size occur.
  assert (out == out[:, :1]).all()
  spans = (out[:, 0, :, 0].astype(int).max(1) - out[:, 0, :, 0].astype(int).min(1)) / 248
  # SimCLR's scale (0.2, 1) gives no span below 0.38 on this key; 0.08 reaches 0.26 ≈ √(0.08 · 3/4).
  assert spans.min() < 0.35 and spans.max() > 0.8 and spans.min() > 0.2, spans
  crop_flip = augmentations.augment_view(ramp, "crop_flip", 0, [0, 1, 2])
  middle = crop_flip[:, width // 2, :, 0].astype(int)  # row 0 may be the crop's zero padding
  assert (np.ptp(middle, axis=1) >= 8 * (width - 9)).all()
  # Flips: the ramp rises to the right in some views and to the left in others.
  rising = out[:, 0, -1, 0].astype(int) > out[:, 0, 0, 0]
  assert 0 < rising.sum() < len(rising)
  constant = np.full((4, 16, 16, 3), 77, np.uint8)
  np.testing.assert_array_equal(augmentations.augment_view(constant, "inception", 0, [5]), constant)


def test_inception_augmentation_is_the_same_whatever_the_process_split():
  """Each example of the global batch gets the same 'inception' crop and flip on 1, 2 or 4
  processes (process p holds rows p, p + P, ...), and one process draws as before the split was
  drawn globally (the generator [*key, view, 3, 0, 1], crop then flip)."""
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (16, 20, 24, 3), dtype=np.uint8)
  key = [3, 1, 4]
  whole = augmentations.augment_view(images, "inception", 1, key)
  for count in (2, 4):
    for index in range(count):
      part = augmentations.augment_view(images[index::count], "inception", 1, key,
                                        process_index=index, process_count=count)
      np.testing.assert_array_equal(part, whole[index::count])
  before = np.random.default_rng([*key, 1, 3, 0, 1])
  expected = crop_flip_lib.random_flip(
      resized_crop.random_resized_crop(images, before, scale=(0.08, 1.0)), before)
  np.testing.assert_array_equal(whole, expected)
