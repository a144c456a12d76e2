"""Input pipeline: image classification splits, long-tailed subsets, NumPy batch iterators.

The small sources are held in host memory as uint8 ([N, H, W, C]); the large ones (TFDS, the
long-tailed image-file benchmarks) as `experiments.data.sources.LazyImages`, rows decoded when indexed.
Either way the pipeline is plain NumPy: a per-epoch permutation from (seed, epoch) — of the split or
of a sample of its positions (JTT's up-sampled set) —, sharded over processes, cut into full
batches, augmented (`augment_view`: crop + flip vectorised over the batch, or the released recipe's
AutoAugment / Cutout / SimCLR views of `experiments.data.augment`) with random numbers drawn from (seed,
epoch, batch), in one or more views per example, with each row's dataset position and, for GLMC, a
re-balanced partner row. A batch is therefore a pure function of (seed, epoch, batch index,
process): training resumes mid-epoch exactly from the step alone (the grain pipeline checkpoints its
iterator state too and checks it against the step: `experiments.data.input_pipeline`).

Sources (`load_split`; one entry each in `LOCAL_SOURCES`, `sources.LAZY_SOURCES` or `LAZY_PREFIXES`):
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
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import io
import logging
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from experiments.common.errors import DataError

DIGITS = "digits"
MNIST = "mnist"
CIFAR10_JPEG = "cifar10_jpeg"
TFDS_PREFIX = "tfds:"
LOCAL_SPLITS = ("train", "test")

CIFAR10_CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                       "ship", "truck")
DIGIT_CLASS_NAMES = tuple(str(d) for d in range(10))

# Channel mean / std of pixel values in [0, 1]. CIFAR-10: the per-channel statistics of the training
# set (std of pixels, not the often-copied 0.2023/0.1994/0.2010, which is a mean of per-image stds).
# CIFAR-100: the same statistics of its training set.
# Digits: statistics of all 1,797 scikit-learn images after scaling 0..16 to 0..255.
# Datasets not listed use 0.5 / 0.5, which maps [0, 1] to [-1, 1].
NORMALIZATION = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    CIFAR10_JPEG: ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    MNIST: ((0.1307,), (0.3081,)),
    DIGITS: ((0.3053,), (0.3759,)),
    # The long-tailed image benchmarks use ImageNet's (as torchvision and the OLTR release do).
    "imagenet_lt": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "places_lt": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "inat2018": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
DEFAULT_NORMALIZATION = ((0.5,), (0.5,))

# Group ids returned by `many_medium_few`.
MANY, MEDIUM, FEW = 0, 1, 2

CROP_PADDING = 4

log = logging.getLogger(__name__)


def _one_line(error: BaseException) -> str:
  return " ".join(str(error).split()) or type(error).__name__


@dataclasses.dataclass
class Split:
  """One split of a classification data set.

  Attributes:
    images: uint8 [N, H, W, C], in host memory (ndarray) or decoded on index
      (`experiments.data.sources.LazyImages`: same shape, dtype, ndim, len and row indexing).
    labels: int32 [N], values in [0, num_classes).
    num_classes: K.
    class_names: K names, index = label.
    name: the `load_split` source name; selects the normalisation constants.
  """
  images: np.ndarray  # Or a sources.LazyImages.
  labels: np.ndarray
  num_classes: int
  class_names: tuple[str, ...]
  name: str = ""

  def __post_init__(self):
    if self.images.dtype != np.uint8 or self.images.ndim != 4:
      raise DataError(f"Split {self.name!r}: images must be uint8 [N, H, W, C], got "
                      f"{self.images.dtype} {self.images.shape}")
    if self.labels.ndim != 1 or len(self.labels) != len(self.images):
      raise DataError(f"Split {self.name!r}: labels shape {self.labels.shape} does not match "
                      f"{len(self.images)} images")
    if not np.issubdtype(self.labels.dtype, np.integer):
      raise DataError(f"Split {self.name!r}: labels must be integers, got {self.labels.dtype}")
    # Range first, then the cast: an int64 label cast to int32 first could wrap into range.
    if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
      raise DataError(f"Split {self.name!r}: labels must lie in [0, {self.num_classes}), got "
                      f"[{self.labels.min()}, {self.labels.max()}]")
    self.labels = self.labels.astype(np.int32, copy=False)
    if len(self.class_names) != self.num_classes:
      raise DataError(f"Split {self.name!r}: {len(self.class_names)} class names for "
                      f"{self.num_classes} classes")

  def __len__(self) -> int:
    return len(self.labels)

  @property
  def class_counts(self) -> np.ndarray:
    """int64 [K]: examples per class (zero for absent classes)."""
    return np.bincount(self.labels, minlength=self.num_classes)

  def subset(self, indices: np.ndarray) -> Split:
    """The examples at `indices` (in that order), e.g. `split.subset(long_tail_indices(...))`;
    lazy images stay lazy (`LazyImages.take` decodes nothing)."""
    indices = np.asarray(indices, dtype=np.int64)
    return dataclasses.replace(self, images=self.images.take(indices, axis=0),
                               labels=self.labels[indices])


# ----------------------------------------------------------------------------------------------
# Sources.


def load_split(name: str, split: str, data_dir: str | os.PathLike | None = None, *,
               image_size: int = 224, resize: int = 256) -> Split:
  """Loads split `split` of source `name` (the module docstring's list).

  `image_size` and `resize` apply to the image-file sources only: shorter side resized to `resize`,
  centre crop image_size² (`sources.resize_center_crop`).
  """
  from experiments.data import sources  # pylint: disable=g-import-not-at-top (it imports this module)
  if sources.is_lazy_source(name):
    return sources.load_split(name, split, data_dir, image_size=image_size, resize=resize)
  if name not in LOCAL_SOURCES:
    raise DataError(f"unknown dataset {name!r}; expected one of "
                    f"{(*LOCAL_SOURCES, *sources.LAZY_SOURCE_NAMES)}")
  if split not in LOCAL_SPLITS:
    raise DataError(f"unknown split {split!r} for dataset {name!r}; expected one of {LOCAL_SPLITS}")
  return LOCAL_SOURCES[name](split, data_dir)


def _npz_path(name: str, split: str, data_dir) -> pathlib.Path:
  if data_dir is None:
    raise DataError(f"dataset {name!r} needs data_dir (the shared copy is at "
                    f"../shared/data/{name} relative to the repository root)")
  folder = pathlib.Path(data_dir).expanduser()
  if not folder.is_dir():
    raise DataError(f"data folder for {name!r} not found: {folder}")
  path = folder / f"{split}.npz"
  if not path.is_file():
    raise DataError(f"data file for {name!r} split {split!r} not found: {path}")
  return path


def _read_npz(path: pathlib.Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
  try:
    with np.load(path, allow_pickle=False) as npz:
      missing = [k for k in keys if k not in npz.files]
      if missing:
        raise DataError(f"{path} lacks array(s) {missing}; it holds {npz.files}")
      return {k: npz[k] for k in keys}
  except DataError:
    raise
  except Exception as e:  # zipfile.BadZipFile, ValueError, OSError, ...
    raise DataError(f"cannot read {path}: {_one_line(e)}") from None


def _load_digits(split: str) -> Split:
  """scikit-learn digits; 1/3 held out as test, stratified, seed 0 (a fixed, documented split)."""
  from sklearn.datasets import load_digits
  from sklearn.model_selection import train_test_split
  digits = load_digits()
  images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
  labels = digits.target.astype(np.int32)
  train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=1 / 3,
                                         stratify=labels, random_state=0)
  idx = np.sort(train_idx if split == "train" else test_idx)
  return Split(images[idx], labels[idx], 10, DIGIT_CLASS_NAMES, DIGITS)


def _load_mnist(path: pathlib.Path, split: str) -> Split:
  arrays = _read_npz(path, ("images", "labels"))
  images, labels = arrays["images"], arrays["labels"]
  if images.dtype != np.uint8 or images.ndim != 3:
    raise DataError(f"{path}: 'images' must be uint8 [N, 28, 28], got {images.dtype} "
                    f"{images.shape}")
  return Split(images[..., None], labels, 10, DIGIT_CLASS_NAMES, MNIST)


def cache_dir() -> pathlib.Path:
  """Where decoded arrays are cached: $MR2_JAX_CACHE, else ~/.cache/mr2_jax."""
  return pathlib.Path(os.environ.get("MR2_JAX_CACHE") or "~/.cache/mr2_jax").expanduser()


def _load_cifar10_jpeg(path: pathlib.Path, split: str) -> Split:
  arrays = _read_npz(path, ("jpeg", "offsets", "labels"))
  jpeg, offsets, labels = arrays["jpeg"], arrays["offsets"], arrays["labels"]
  if offsets.ndim != 1 or len(offsets) != len(labels) + 1:
    raise DataError(f"{path}: {len(offsets)} offsets for {len(labels)} labels (need N + 1)")
  images = _decode_cached(path, split, jpeg, offsets)
  return Split(images, labels, 10, CIFAR10_CLASS_NAMES, CIFAR10_JPEG)


def _decode_cached(path: pathlib.Path, split: str, jpeg: np.ndarray,
                   offsets: np.ndarray) -> np.ndarray:
  """Decodes once; the cache key is the source file's path, size and mtime, so a new file re-decodes."""
  stat = path.stat()
  path_hash = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
  cached = cache_dir() / (f"{CIFAR10_JPEG}-{split}-{path_hash}-{stat.st_size}-"
                          f"{stat.st_mtime_ns}.npy")
  expected_shape = (len(offsets) - 1, 32, 32, 3)
  if cached.is_file():
    try:
      images = np.load(cached, allow_pickle=False)
      if images.shape == expected_shape and images.dtype == np.uint8:
        return images
    except (OSError, ValueError):
      pass
    log.warning("Ignoring unusable cache file %s; decoding again.", cached)
  start = time.perf_counter()
  images = decode_jpegs(jpeg, offsets, source=str(path))
  log.info("Decoded %d JPEG images from %s in %.1f s.", len(images), path,
           time.perf_counter() - start)
  try:
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    with open(partial, "wb") as f:
      np.save(f, images)
    os.replace(partial, cached)  # Atomic: a concurrent reader sees no file or a complete one.
  except OSError as e:
    log.warning("Could not write decode cache %s (%s); continuing without it.", cached,
                _one_line(e))
  return images


def decode_jpegs(jpeg: np.ndarray, offsets: np.ndarray, source: str = "<array>",
                 shape: tuple[int, int, int] = (32, 32, 3)) -> np.ndarray:
  """Decodes image i = jpeg[offsets[i]:offsets[i+1]] with Pillow into uint8 [N, *shape]."""
  from PIL import Image
  num_images = len(offsets) - 1
  images = np.empty((num_images, *shape), np.uint8)
  mode = "RGB" if shape[-1] == 3 else "L"
  for i in range(num_images):
    encoded = jpeg[offsets[i]:offsets[i + 1]].tobytes()
    try:
      with Image.open(io.BytesIO(encoded)) as image:
        pixels = np.asarray(image.convert(mode))
    except Exception as e:  # PIL raises OSError, SyntaxError, ValueError, ... on corrupt data.
      raise DataError(f"corrupt JPEG at index {i} in {source}: {_one_line(e)}") from None
    pixels = pixels.reshape(pixels.shape[:2] + (-1,))
    if pixels.shape != shape:
      raise DataError(f"image at index {i} in {source} has shape {pixels.shape}, expected {shape}")
    images[i] = pixels
  return images


# The in-memory sources, one entry each: loader(split, data_dir) → Split (the lazy ones are
# `experiments.data.sources.LAZY_SOURCES` / `LAZY_PREFIXES`).
LOCAL_SOURCES: dict[str, Callable[[str, str | os.PathLike | None], Split]] = {
    DIGITS: lambda split, data_dir: _load_digits(split),
    MNIST: lambda split, data_dir: _load_mnist(_npz_path(MNIST, split, data_dir), split),
    CIFAR10_JPEG: lambda split, data_dir: _load_cifar10_jpeg(
        _npz_path(CIFAR10_JPEG, split, data_dir), split),
}


# ----------------------------------------------------------------------------------------------
# Subsets.


def long_tail_counts(max_count: int, num_classes: int, imbalance_factor: float) -> np.ndarray:
  """n_i = ⌊n_max · IF^(−i/(K−1))⌋ for class index i (Cui et al. 2019, CIFAR-LT), int64 [K].

  Written as n_max · (1/IF)^(i/(K−1)), the exact float expression of the CIFAR-LT reference code, so
  that IF = 100 gives the published counts 5000, 2997, ..., 50 on CIFAR-10.
  """
  if not imbalance_factor >= 1:  # Also rejects NaN.
    raise DataError(f"imbalance_factor must be >= 1 (1 = balanced), got {imbalance_factor}")
  if num_classes == 1:
    return np.array([max_count], np.int64)
  return np.array([int(max_count * (1.0 / imbalance_factor) ** (i / (num_classes - 1.0)))
                   for i in range(num_classes)], np.int64)


LT_SELECTIONS = ("seeded", "ldam", "glmc", "glmc_paper")


def long_tail_indices(labels: np.ndarray, num_classes: int, imbalance_factor: float,
                      seed: int, max_count: int | None = None,
                      selection: str = "seeded") -> np.ndarray:
  """Sorted indices of an exponentially long-tailed subset (see `long_tail_counts`).

  n_max is `max_count`, or the count of the largest class when None (IF = 1 with a `max_count` gives a
  balanced subset of max_count per class); a class with fewer than n_i examples keeps all of them.
  Which examples are kept (`selection`):

    'seeded': a permutation of each class from `np.random.default_rng(seed)`, its first n_i — a
      subset reproducible from (IF, seed), different per seed;
    'ldam': the standard CIFAR-LT selection (Cao et al. 2019, `IMBALANCECIFAR10`): the legacy
      generator seeded with 0 (whatever `seed`), each class in label order shuffled
      (`RandomState.shuffle` of its indices in dataset order), its first n_i;
    'glmc', 'glmc_paper': GLMC's released selection, each class in label order drawing n_i of its
      members with `RandomState(seed).choice` without replacement ('glmc', the release's fix) or
      with replacement ('glmc_paper', the split of the paper's numbers: duplicates are kept, so
      the subset may repeat an index).
  """
  if max_count is not None and max_count < 1:
    raise DataError(f"max_count must be >= 1, got {max_count}")
  if selection not in LT_SELECTIONS:
    raise DataError(f"selection: unknown {selection!r}; expected one of {LT_SELECTIONS}")
  labels = np.asarray(labels)
  counts = np.bincount(labels, minlength=num_classes)
  if len(counts) != num_classes:
    raise DataError(f"labels reach {len(counts) - 1} but num_classes = {num_classes}")
  n_max = int(counts.max()) if max_count is None else int(max_count)
  keep = np.minimum(long_tail_counts(n_max, num_classes, imbalance_factor), counts)
  members = [np.flatnonzero(labels == k) for k in range(num_classes)]
  if selection == "seeded":
    rng = np.random.default_rng(seed)
    kept = [rng.permutation(m)[:n] for m, n in zip(members, keep)]
  elif selection == "ldam":
    legacy = np.random.RandomState(0)
    kept = []
    for m, n in zip(members, keep):
      shuffled = m.copy()
      legacy.shuffle(shuffled)
      kept.append(shuffled[:n])
  else:
    legacy = np.random.RandomState(seed)
    kept = [m[legacy.choice(len(m), n, replace=selection == "glmc_paper")]
            for m, n in zip(members, keep)]
  return np.sort(np.concatenate(kept))


def stratified_holdout(labels: np.ndarray, num_classes: int, fraction: float, seed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
  """(kept, held-out) sorted indices: round(fraction · n_k) examples of every class k held out.

  Stratified, so a long-tailed set gives an equally long-tailed hold-out; every class with at least
  two examples keeps at least one in each part.
  """
  if not 0 < fraction < 1:
    raise DataError(f"validation fraction must lie in (0, 1), got {fraction}")
  rng = np.random.default_rng(seed)
  train_parts, val_parts = [], []
  for k in range(num_classes):
    members = rng.permutation(np.flatnonzero(labels == k))
    num_val = int(np.floor(fraction * len(members) + 0.5))
    num_val = min(max(num_val, 1), len(members) - 1) if len(members) >= 2 else 0
    val_parts.append(members[:num_val])
    train_parts.append(members[num_val:])
  return np.sort(np.concatenate(train_parts)), np.sort(np.concatenate(val_parts))


def validation_split(split: Split, fraction: float, seed: int) -> tuple[Split, Split]:
  """(train, validation) splits from `stratified_holdout`, for model selection. Never carve this
  from the test set."""
  kept, held_out = stratified_holdout(split.labels, split.num_classes, fraction, seed)
  return split.subset(kept), split.subset(held_out)


def many_medium_few(train_counts: np.ndarray, many: int = 100, few: int = 20) -> np.ndarray:
  """int32 [K]: MANY (0) if n_k > many, FEW (2) if n_k < few, else MEDIUM (1) (Liu et al. 2019)."""
  counts = np.asarray(train_counts)
  return np.where(counts > many, MANY, np.where(counts < few, FEW, MEDIUM)).astype(np.int32)


# ----------------------------------------------------------------------------------------------
# Batches.


def normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """The channel (mean, std) of data set `name` (NORMALIZATION, else DEFAULT_NORMALIZATION)."""
  base_name = name.removeprefix(TFDS_PREFIX).split(":")[0].split("/")[0]
  return NORMALIZATION.get(base_name, DEFAULT_NORMALIZATION)


def normalization_table(name_or_constants) -> np.ndarray:
  """float32 [256, C]: entry [v, c] = v · (1 / (255 · std_c)) − mean_c / std_c = (v / 255 − mean_c)
  / std_c, with the constants of data set `name` (`normalization`) or given (mean, std)."""
  mean, std = (normalization(name_or_constants) if isinstance(name_or_constants, str)
               else name_or_constants)
  mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
  return np.arange(256, dtype=np.float32)[:, None] * (1 / (255 * std)) - mean / std


def normalize(images_uint8, name_or_constants, xp=np):
  """float32 (x / 255 − mean) / std per channel of uint8 images [..., C], looked up in
  `normalization_table`: `xp` = np on the host, jnp on the device (the grain pipeline sends
  uint8), bit for bit the same values either way (no fused multiply-add can differ)."""
  table = xp.asarray(normalization_table(name_or_constants))
  channels = images_uint8.shape[-1]
  column = xp.arange(channels) if table.shape[1] > 1 else xp.zeros(channels, np.int32)
  return table[images_uint8, column]


def random_crop_flip(images: np.ndarray, rng: np.random.Generator,
                     padding: int = CROP_PADDING, process_index: int = 0,
                     process_count: int = 1) -> np.ndarray:
  """Zero-pad by `padding`, crop back to H x W at a random offset, flip half horizontally.

  The CIFAR augmentation of He et al. (2016), one gather for the whole batch [B, H, W, C]. The random
  offsets are drawn for the whole global batch (B·process_count examples) and this process takes
  positions process_index, process_index + P, ... (its examples' positions in the global batch), so
  every example gets the same crop whatever the number of processes.
  """
  batch, height, width, _ = images.shape
  padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
  global_batch = batch * process_count
  top = rng.integers(0, 2 * padding + 1, size=global_batch)[process_index::process_count]
  left = rng.integers(0, 2 * padding + 1, size=global_batch)[process_index::process_count]
  flip = (rng.random(global_batch) < 0.5)[process_index::process_count]
  rows = top[:, None] + np.arange(height)
  cols = left[:, None] + np.where(flip[:, None], np.arange(width)[::-1], np.arange(width))
  return padded[np.arange(batch)[:, None, None], rows[:, :, None], cols[:, None, :]]


def steps_per_epoch(split: Split, batch_size: int, process_count: int = 1,
                    sample: np.ndarray | None = None) -> int:
  """Full batches per epoch and process; `batch_size` is per process. An epoch draws from `sample`
  (dataset positions, repeats allowed: JTT's up-sampled set) when given, else from the whole split."""
  if batch_size < 1 or process_count < 1:
    raise DataError(f"batch_size and process_count must be >= 1, got {batch_size}, {process_count}")
  size = len(split) if sample is None else len(sample)
  steps = size // process_count // batch_size
  if steps == 0:
    raise DataError(f"{size} examples do not fill one batch of {batch_size} on each of "
                    f"{process_count} process(es)")
  return steps


def check_sample(split: Split, sample: np.ndarray) -> np.ndarray:
  """`sample` as int64 dataset positions of `split`, refused (DataError) when outside [0, N)."""
  sample = np.asarray(sample)
  if sample.ndim != 1 or not np.issubdtype(sample.dtype, np.integer):
    raise DataError(f"sample: expected int dataset positions [M], got {sample.dtype} {sample.shape}")
  if len(sample) and (sample.min() < 0 or sample.max() >= len(split)):
    raise DataError(f"sample: positions must lie in [0, {len(split)}), got "
                    f"[{sample.min()}, {sample.max()}]")
  return sample.astype(np.int64)


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The example order of one epoch, shared by all processes."""
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def _crop_flip(images, view, key, process_index, process_count):
  """'crop_flip': pad-4 random crop + flip for every view (view 0 draws with `key`, view v > 0 with
  [*key, v]), drawn for the global batch: an example gets the same crop whatever the number of
  processes."""
  return random_crop_flip(images, np.random.default_rng(key + [view] if view > 0 else key),
                          process_index=process_index, process_count=process_count)


def _batch_rng(key, view, tag, process_index, process_count) -> np.random.Generator:
  """The per-process-batch generator of the vectorised augmentations (`tag` tells them apart)."""
  return np.random.default_rng([*key, view, tag, process_index, process_count])


def _released(images, view, key, process_index, process_count):
  """'released': the reweighting paper's released recipe (PIPELINES spec §1): view 0 crop + flip →
  AutoAugment (CIFAR-10 policy) → Cutout 16×16, views ≥ 1 the SimCLR transform."""
  from experiments.data import augment  # pylint: disable=g-import-not-at-top
  if view > 0:
    return _simclr(images, view, key, process_index, process_count)
  images = _crop_flip(images, view, key, process_index, process_count)
  rng = _batch_rng(key, view, 1, process_index, process_count)
  return augment.cutout(augment.autoaugment(images, rng), rng)


def _simclr(images, view, key, process_index, process_count):
  """'simclr': the SimCLR transform (random resized crop, flip, colour jitter, grayscale) for every
  view (SupCon's reference views)."""
  from experiments.data import augment  # pylint: disable=g-import-not-at-top
  return augment.simclr_view(images, _batch_rng(key, view, 2, process_index, process_count))


def _inception(images, view, key, process_index, process_count):
  """'inception': Inception's random-resized crop (area U(0.08, 1), aspect exp U(log 3/4, log 4/3),
  back to H × W bilinear) + flip, for ImageNet-scale training. The crop is taken from the image as
  the pipeline decoded it (ImageNet-LT: the 224² centre crop of the shorter side resized to 256),
  not from the full-resolution file."""
  from experiments.data import augment  # pylint: disable=g-import-not-at-top
  rng = _batch_rng(key, view, 3, process_index, process_count)
  return augment.random_flip(augment.random_resized_crop(images, rng, scale=(0.08, 1.0)), rng)


# The training augmentations, one entry each: fn(images, view, key, process_index, process_count).
AUGMENTATION_FNS = {"crop_flip": _crop_flip, "released": _released, "simclr": _simclr,
                    "inception": _inception}
AUGMENTATIONS = tuple(AUGMENTATION_FNS)


def augment_view(images: np.ndarray, augmentation: str, view: int, key: list[int], *,
                 process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """View `view` of a batch of uint8 images under `augmentation` (an `AUGMENTATION_FNS` entry, whose
  docstring says what it draws), a pure function of `key` ([seed, epoch, batch]) and the process.

  The AutoAugment / Cutout / SimCLR / Inception draws are made per process batch ([*key, view, tag,
  process index, process count]), vectorised over it (≈ 5× the throughput of per-example
  generators), so unlike crop + flip they depend on how the global batch is split over processes.
  """
  if augmentation not in AUGMENTATION_FNS:
    raise DataError(f"augmentation: unknown {augmentation!r}; expected one of {AUGMENTATIONS}")
  return AUGMENTATION_FNS[augmentation](images, view, key, process_index, process_count)


def train_batches(split: Split, batch_size: int, *, seed: int, epoch: int, augment: bool,
                  process_index: int = 0, process_count: int = 1, start_batch: int = 0,
                  views: int = 1, sample: np.ndarray | None = None,
                  augmentation: str = "crop_flip",
                  pair: Callable[..., dict] | None = None,
                  normalized: bool = True) -> Iterator[dict[str, np.ndarray]]:
  """One epoch of full training batches for this process.

  The epoch's permutation (of the split, or of `sample`) is cut to steps · batch_size ·
  process_count examples (the remainder is dropped, so every batch is full and every process runs
  the same number of steps) and process p takes positions p, p + P, p + 2P, ... Batch b of that
  shard is a pure function of (seed, epoch, b, process), so `start_batch=b` resumes an interrupted
  epoch exactly.

  Args:
    augment: whether to augment at all; `augmentation` names how (`augment_view`).
    views: augmented views per example (SupCon's two, the released recipe's three); each view is
      augmented with its own draws (`augment_view`).
    sample: dataset positions an epoch draws from, repeats allowed (JTT's up-sampled training set:
      the epoch grows); default every position once.
    pair: a paired batch (GLMC's re-balanced partner rows, mixup's permuted global batch):
      pair(rng, global rows, H, W) → {'rows': partner positions [global batch], 'lam': the step's
      λ, 'box': its CutMix box (y0, y1, x0, x1)}, drawn with rng [seed, epoch, b, 1000] for the
      global batch (`global rows`: its dataset positions, every process's rows; this process takes
      its rows' partners), adds 'image_b' (augmented like 'image', key [seed, epoch, b, 1001]),
      'label_b', 'index_b', and 'lam' float32 [B] and 'box' int32 [B, 4] (the step's values on
      every row).
    normalized: images as float32 `normalize`d here (the in-memory pipeline), or as the uint8
      pixels, normalised on the device (`normalize(..., xp=jnp)`, the grain pipeline): 4× fewer
      bytes to the device.

  Yields:
    {'image': float32 [batch_size, H, W, C] normalised, or uint8 ([batch_size, views, H, W, C]
     when views > 1), 'label': int32 [batch_size], 'index': int32 [batch_size] the examples'
     positions in `split` (LfF's per-example state is indexed by them)}.
  """
  if not 0 <= process_index < process_count:
    raise DataError(f"process_index {process_index} not in [0, {process_count})")
  if views < 1:
    raise DataError(f"views must be >= 1, got {views}")
  if augmentation not in AUGMENTATIONS:
    raise DataError(f"augmentation: unknown {augmentation!r}; expected one of {AUGMENTATIONS}")
  sample = np.arange(len(split)) if sample is None else check_sample(split, sample)
  steps = steps_per_epoch(split, batch_size, process_count, sample)
  if not 0 <= start_batch <= steps:
    raise DataError(f"start_batch {start_batch} not in [0, {steps}]")
  order = epoch_order(len(sample), steps * batch_size * process_count, seed=seed, epoch=epoch)
  for b in range(start_batch, steps):
    rows = sample[global_batch_positions(order, b, batch_size * process_count)]
    yield train_batch(split, rows[process_index::process_count], key=[seed, epoch, b],
                      augment=augment, process_index=process_index, process_count=process_count,
                      views=views, augmentation=augmentation, pair=pair, normalized=normalized,
                      global_indices=rows)


def epoch_order(num_examples: int, kept: int, *, seed: int, epoch: int) -> np.ndarray:
  """One epoch's positions (into `sample`, or the split), the permutation cut to `kept` = steps ·
  global batch: global batch b is the block [b·G, (b + 1)·G), and process p takes its rows p,
  p + P, p + 2P, ... (`global_batch_positions`)."""
  return epoch_permutation(num_examples, seed, epoch)[:kept]


def global_batch_positions(order: np.ndarray, b: int, global_batch: int) -> np.ndarray:
  """Global batch b of an epoch's `epoch_order`."""
  return order[b * global_batch:(b + 1) * global_batch]


def train_batch(split: Split, indices: np.ndarray, *, key: list[int], augment: bool,
                process_index: int = 0, process_count: int = 1, views: int = 1,
                augmentation: str = "crop_flip", pair: Callable[..., dict] | None = None,
                normalized: bool = True,
                global_indices: np.ndarray | None = None) -> dict[str, np.ndarray]:
  """The training batch of the split's rows `indices` (this process's rows of the global batch
  `global_indices`) with the draws of `key` ([seed, epoch, batch]); one element of
  `train_batches` (which documents the arguments and the result)."""
  batch_size = len(indices)
  raw = split.images[indices]
  batch = {"image": _views(split, raw, views, augment, augmentation, key, process_index,
                           process_count, normalized),
           "label": split.labels[indices], "index": indices.astype(np.int32)}
  if pair is not None:
    # Keys apart from the views' ([seed, epoch, b, v ...], v < 1000).
    if global_indices is None or len(global_indices) != batch_size * process_count:
      raise DataError("a paired batch needs the global batch's positions (global_indices)")
    drawn = pair(np.random.default_rng([*key, 1000]), np.asarray(global_indices),
                 *split.images.shape[1:3])
    partners = np.asarray(drawn["rows"])[process_index::process_count]
    batch.update(image_b=_views(split, split.images[partners], views, augment, augmentation,
                                [*key, 1001], process_index, process_count, normalized),
                 label_b=split.labels[partners], index_b=partners.astype(np.int32),
                 lam=np.full(batch_size, drawn["lam"], np.float32),
                 box=np.tile(np.asarray(drawn["box"], np.int32), (batch_size, 1)))
  return batch


def _views(split: Split, raw: np.ndarray, views: int, augment: bool, augmentation: str,
           key: list[int], process_index: int, process_count: int,
           normalized: bool = True) -> np.ndarray:
  """The views of raw uint8 images, normalised (float32) or not (uint8): [B, H, W, C], or
  [B, V, H, W, C] for V > 1."""
  crops = [augment_view(raw, augmentation, v, key, process_index=process_index,
                        process_count=process_count) if augment else raw for v in range(views)]
  if normalized:
    crops = [normalize(crop, split.name) for crop in crops]
  return crops[0] if views == 1 else np.stack(crops, axis=1)


def threaded_map(fn: Callable, items: Iterable, workers: int, ahead: int | None = None) -> Iterator:
  """`map(fn, items)` computed in `workers` threads, yielded in the order of `items`.

  At most `ahead` calls (default 2·workers) are in flight or done but not yet taken, so memory
  stays bounded on an endless `items`. `fn` must be safe to call from several threads at once
  (`input_pipeline.BatchAt` is: a pure function of its step). An exception raised by `fn` is
  re-raised when its item's turn comes; closing the returned generator cancels the calls not yet
  started and does not wait for the running ones.
  """
  if workers < 1:
    raise ValueError(f"threaded_map needs workers >= 1, got {workers}")
  ahead = 2 * workers if ahead is None else ahead
  if ahead < 1:
    raise ValueError(f"threaded_map needs ahead >= 1, got {ahead}")
  items = iter(items)
  executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="threaded_map")
  pending: collections.deque = collections.deque()
  try:
    for item in items:
      pending.append(executor.submit(fn, item))
      if len(pending) == ahead:
        break
    while pending:
      result = pending.popleft().result()
      for item in items:  # refill before handing the result over, so the threads stay busy
        pending.append(executor.submit(fn, item))
        break
      yield result
  finally:
    executor.shutdown(wait=False, cancel_futures=True)


def eval_batches(split: Split, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
  """All examples in order; the last batch is zero-padded to `batch_size`.

  Yields:
    {'image': float32 [batch_size, H, W, C], 'label': int32 [batch_size],
     'mask': bool [batch_size] (False on padding; reduce metrics with it)}.
  """
  if batch_size < 1:
    raise DataError(f"batch_size must be >= 1, got {batch_size}")
  for start in range(0, len(split), batch_size):
    images = split.images[start:start + batch_size]
    labels = split.labels[start:start + batch_size]
    num_real = len(labels)
    num_pad = batch_size - num_real
    if num_pad:
      images = np.concatenate([images, np.zeros((num_pad, *images.shape[1:]), np.uint8)])
      labels = np.concatenate([labels, np.zeros(num_pad, np.int32)])
    yield {"image": normalize(images, split.name), "label": labels,
           "mask": np.arange(batch_size) < num_real}


def measure_throughput(split: Split, batch_size: int, augment: bool, n_batches: int) -> float:
  """Images per second that `train_batches` alone produces (no model), over `n_batches` batches."""
  produced = 0
  epoch = 0
  start = time.perf_counter()
  while produced < n_batches:
    for batch in train_batches(split, batch_size, seed=0, epoch=epoch, augment=augment):
      produced += 1
      if produced == n_batches:
        break
    epoch += 1
  return n_batches * batch_size / (time.perf_counter() - start)

def load_data(config):
  """(train, validation or None, test) splits; the training set long-tailed by `imbalance_factor`."""
  size = dict(image_size=config.image_size, resize=config.resize)  # image-file sources only
  train = load_split(config.dataset, "train", config.data_dir, **size)
  test = load_split(config.dataset, "test", config.data_dir, **size)
  keep = long_tail_indices(train.labels, train.num_classes, config.imbalance_factor,
                                    config.seed, max_count=config.max_train_per_class or None,
                                    selection=config.lt_selection)
  train = train.subset(keep)
  validation = None
  if config.validation_fraction > 0:
    train, validation = validation_split(train, config.validation_fraction, config.seed)
  return train, validation, test
