"""experiments/data/batches.py's batches for methods beyond a per-batch loss: the dataset position
of every row ('index'), several augmented views per example (SupCon) and an epoch drawn from an
edited list of positions with repeats (JTT's up-sampled training set)."""

import numpy as np
import pytest

from experiments.common.errors import DataError
from experiments.data import augmentations
from experiments.data import autoaugment
from experiments.data import batches as batches_lib
from experiments.data import crop_flip
from experiments.data import normalization
from experiments.data.split import Split

SEED, EPOCH = 7, 3


def random_split(num_examples=70, size=8, seed=0):
  """Random uint8 images, so that two crops of one image differ (almost surely)."""
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (num_examples, size, size, 3), dtype=np.uint8)
  labels = rng.integers(0, 10, num_examples).astype(np.int32)
  return Split(images, labels, 10, tuple(map(str, range(10))))


def epoch_batches(split, batch_size, **kwargs):
  kwargs.setdefault("seed", SEED)
  kwargs.setdefault("epoch", EPOCH)
  return list(batches_lib.train_batches(split, batch_size, **kwargs))


def test_index_rows_point_at_the_images_and_labels_of_the_split():
  """Without augmentation every row's image is the normalised image of the split at its 'index',
  its label the split's label there; 'index' is int32 and one epoch covers distinct positions."""
  split = random_split()
  batches = epoch_batches(split, 8, augment=False)
  assert len(batches) == 70 // 8
  for batch in batches:
    assert batch["index"].dtype == np.int32 and batch["index"].shape == (8,)
    np.testing.assert_array_equal(
        batch["image"], normalization.normalize(split.images[batch["index"]], split.name))
    np.testing.assert_array_equal(batch["label"], split.labels[batch["index"]])
  indices = np.concatenate([b["index"] for b in batches])
  assert len(np.unique(indices)) == len(indices) == 8 * (70 // 8)
  expected = batches_lib.epoch_permutation(70, SEED, EPOCH)[:len(indices)]
  np.testing.assert_array_equal(indices, expected)


def test_index_with_augmentation_and_two_processes_matches_the_rows():
  """With augmentation (two processes) the labels still follow 'index', and the two shards' indices
  are the two halves of the epoch's permutation (positions p, p + 2, ...)."""
  split = random_split()
  shards = [epoch_batches(split, 4, augment=True, process_index=p, process_count=2)
            for p in range(2)]
  used = batches_lib.epoch_permutation(70, SEED, EPOCH)[:2 * 4 * (70 // 2 // 4)]
  for p, batches in enumerate(shards):
    for batch in batches:
      np.testing.assert_array_equal(batch["label"], split.labels[batch["index"]])
    np.testing.assert_array_equal(np.concatenate([b["index"] for b in batches]), used[p::2])


def test_two_views_view_0_is_the_single_view_batch_and_view_1_its_own_draw():
  """views=2: image [B, 2, H, W, C]; view 0 equals the single-view batch bit for bit, view 1 is the
  crop + flip drawn from rng [seed, epoch, b, 1] (so it differs from view 0 for some rows); labels
  and indices are those of the single-view batch."""
  split = random_split()
  single = epoch_batches(split, 8, augment=True)
  double = epoch_batches(split, 8, augment=True, views=2)
  assert len(single) == len(double) == 70 // 8
  differs = 0
  for b, (one, two) in enumerate(zip(single, double)):
    assert two["image"].shape == (8, 2, 8, 8, 3) and two["image"].dtype == np.float32
    np.testing.assert_array_equal(two["image"][:, 0], one["image"])
    np.testing.assert_array_equal(two["label"], one["label"])
    np.testing.assert_array_equal(two["index"], one["index"])
    raw = split.images[one["index"]]
    view_1 = normalization.normalize(
        crop_flip.random_crop_flip(raw, np.random.default_rng([SEED, EPOCH, b, 1])), split.name)
    np.testing.assert_array_equal(two["image"][:, 1], view_1)
    differs += int(np.sum(np.any(two["image"][:, 0] != two["image"][:, 1], axis=(1, 2, 3))))
  assert differs > 0
  # View 0 is itself an augmentation (not the raw image) for some rows.
  raw_0 = normalization.normalize(split.images[single[0]["index"]], split.name)
  assert np.any(single[0]["image"] != raw_0)


def test_two_views_without_augmentation_repeat_the_image():
  """views=2, augment=False: both views are the normalised image at 'index'."""
  split = random_split()
  for batch in epoch_batches(split, 8, augment=False, views=2):
    expected = normalization.normalize(split.images[batch["index"]], split.name)
    np.testing.assert_array_equal(batch["image"][:, 0], expected)
    np.testing.assert_array_equal(batch["image"][:, 1], expected)


def upsampled(num_examples, seed=0):
  """Every position once, a random third of them 1 + 3 times (JTT's list with λ_up = 3)."""
  error = np.random.default_rng(seed).random(num_examples) < 1 / 3
  return np.repeat(np.arange(num_examples), 1 + 3 * error), error


def test_sample_with_repeats_draws_the_permuted_sample_and_sets_the_epoch_length():
  """An epoch over `sample` yields, in order, the first steps · B entries of the sample permuted by
  the epoch's permutation of len(sample); steps = len(sample) // B; the multiset of indices is that
  of those entries (repeats included) and rows follow their indices."""
  split = random_split(40)
  sample, error = upsampled(40)
  assert len(sample) > len(split)
  batch_size = 8
  steps = batches_lib.steps_per_epoch(split, batch_size, sample=sample)
  assert steps == len(sample) // batch_size != batches_lib.steps_per_epoch(split, batch_size)
  batches = epoch_batches(split, batch_size, augment=False, sample=sample)
  assert len(batches) == steps
  indices = np.concatenate([b["index"] for b in batches])
  permuted = sample[batches_lib.epoch_permutation(len(sample), SEED, EPOCH)][:steps * batch_size]
  np.testing.assert_array_equal(indices, permuted)
  np.testing.assert_array_equal(np.bincount(indices, minlength=40),
                                np.bincount(permuted, minlength=40))
  assert np.bincount(indices, minlength=40).max() > 1  # repeats are yielded
  for batch in batches:
    np.testing.assert_array_equal(
        batch["image"], normalization.normalize(split.images[batch["index"]], split.name))
    np.testing.assert_array_equal(batch["label"], split.labels[batch["index"]])
  # A sample that drops every position but a few: those few are all that is read.
  few = np.array([3, 3, 5, 5, 5, 9, 9, 9], np.int64)
  (only,) = epoch_batches(split, 8, augment=False, sample=few)
  np.testing.assert_array_equal(np.sort(only["index"]), few)


def test_sample_is_sharded_over_processes_like_the_split():
  """With two processes each shard takes positions p, p + 2, ... of the permuted sample and
  steps_per_epoch counts len(sample) // 2 // B."""
  split = random_split(40)
  sample, _ = upsampled(40, seed=1)
  steps = batches_lib.steps_per_epoch(split, 4, process_count=2, sample=sample)
  assert steps == len(sample) // 2 // 4
  permuted = sample[batches_lib.epoch_permutation(len(sample), SEED, EPOCH)][:steps * 4 * 2]
  for p in range(2):
    batches = epoch_batches(split, 4, augment=True, views=2, process_index=p, process_count=2,
                            sample=sample)
    assert len(batches) == steps
    np.testing.assert_array_equal(np.concatenate([b["index"] for b in batches]), permuted[p::2])


@pytest.mark.parametrize("bad", [[0, 1, 40], [-1, 0, 1], [0, 1, 2 ** 40]])
def test_out_of_range_sample_positions_raise_data_error(bad):
  split = random_split(40)
  with pytest.raises(DataError, match=r"positions must lie in \[0, 40\)"):
    next(batches_lib.train_batches(split, 2, seed=0, epoch=0, augment=False, sample=np.array(bad)))
  with pytest.raises(DataError, match=r"positions must lie in \[0, 40\)"):
    batches_lib.check_sample(split, np.array(bad))


def test_non_integer_sample_raises_data_error():
  split = random_split(40)
  with pytest.raises(DataError, match="int dataset positions"):
    batches_lib.check_sample(split, np.array([0.0, 1.0]))
  with pytest.raises(DataError, match="int dataset positions"):
    batches_lib.check_sample(split, np.zeros((2, 2), np.int64))


def test_a_sample_too_short_for_one_batch_raises_data_error():
  split = random_split(40)
  with pytest.raises(DataError, match="do not fill one batch"):
    batches_lib.steps_per_epoch(split, 8, sample=np.arange(7))


def test_start_batch_resumes_exactly_with_views_and_sample():
  """Batch b of an epoch is a pure function of (seed, epoch, b, process) with views and a sample:
  resuming at start_batch gives the later batches of the full epoch bit for bit."""
  split = random_split(40)
  sample, _ = upsampled(40, seed=2)
  kwargs = dict(augment=True, views=2, sample=sample, process_index=1, process_count=2)
  full = epoch_batches(split, 4, **kwargs)
  start = 3
  resumed = epoch_batches(split, 4, start_batch=start, **kwargs)
  assert (len(full) == batches_lib.steps_per_epoch(split, 4, 2, sample)
          and len(resumed) == len(full) - start)
  for expected, actual in zip(full[start:], resumed):
    assert set(actual) == {"image", "label", "index"}
    for key in ("image", "label", "index"):
      np.testing.assert_array_equal(expected[key], actual[key])


def test_released_recipe_views_are_the_reference_transforms_with_their_draws():
  """augmentation='released', views=3: view 0 is crop + flip (the single-view draw) → AutoAugment →
  Cutout with the batch generator [seed, epoch, b, 0, 1, process, processes]; views 1 and 2 are
  SimCLR views with [seed, epoch, b, v, 2, process, processes]; a resumed epoch repeats them."""
  rng = np.random.default_rng(0)
  split = Split(rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8),
                rng.integers(0, 10, 64), 10, tuple("abcdefghij"), "cifar10")
  batches = list(batches_lib.train_batches(split, 16, seed=5, epoch=2, augment=True, views=3,
                                           augmentation="released"))
  b = 1
  raw = split.images[batches[b]["index"]]
  view0 = crop_flip.random_crop_flip(raw, np.random.default_rng([5, 2, b]))
  rng = np.random.default_rng([5, 2, b, 0, 1, 0, 1])
  view0 = autoaugment.cutout(autoaugment.autoaugment(view0, rng), rng)
  np.testing.assert_array_equal(batches[b]["image"][:, 0],
                                normalization.normalize(view0, split.name))
  for v in (1, 2):
    expected = augmentations.simclr_view(raw, np.random.default_rng([5, 2, b, v, 2, 0, 1]))
    np.testing.assert_array_equal(batches[b]["image"][:, v],
                                  normalization.normalize(expected, split.name))
  resumed = next(batches_lib.train_batches(split, 16, seed=5, epoch=2, augment=True, views=3,
                                           augmentation="released", start_batch=b))
  np.testing.assert_array_equal(resumed["image"], batches[b]["image"])
  with pytest.raises(DataError, match="augmentation"):
    next(batches_lib.train_batches(split, 16, seed=5, epoch=2, augment=True,
                                   augmentation="autoaug"))
