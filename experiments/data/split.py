"""The `Split` type: one split of a classification data set (uint8 images, int32 labels, the class
names), what every source returns and every batch reads; and `one_line`, the one-line message of
the errors a source reports as `DataError` (`experiments.common.errors`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments.common.errors import DataError


def one_line(error: BaseException) -> str:
  """`error`'s message on one line (its type's name when the message is empty)."""
  return " ".join(str(error).split()) or type(error).__name__


@dataclasses.dataclass
class Split:
  """One split of a classification data set.

  Attributes:
    images: uint8 [N, H, W, C], in host memory (ndarray) or decoded on index
      (`experiments.data.lazy_images.LazyImages`: same shape, dtype, ndim, len and row indexing);
      or float32 [N, d], the cached features of a frozen encoder (`experiments.data.cached_features`:
      a model such as the linear head reads them as they are, neither normalised nor augmented).
    labels: int32 [N], values in [0, num_classes).
    num_classes: K.
    class_names: K names, index = label.
    name: the `load_split` source name; selects the normalisation constants.
    extra_views: features only: float32 [N, V − 1, d] further stored views of each example (the
      features of its horizontally flipped image, for a loss on two views), or None.
  """
  images: np.ndarray  # Or a lazy_images.LazyImages.
  labels: np.ndarray
  num_classes: int
  class_names: tuple[str, ...]
  name: str = ""
  extra_views: np.ndarray | None = None

  def __post_init__(self):
    if not ((self.images.dtype == np.uint8 and self.images.ndim == 4)
            or (self.images.dtype == np.float32 and self.images.ndim == 2)):
      raise DataError(f"Split {self.name!r}: images must be uint8 [N, H, W, C] (pixels) or "
                      f"float32 [N, d] (features), got {self.images.dtype} {self.images.shape}")
    if self.labels.ndim != 1 or len(self.labels) != len(self.images):
      raise DataError(f"Split {self.name!r}: labels shape {self.labels.shape} does not match "
                      f"{len(self.images)} images")
    if self.extra_views is not None and (
        not self.is_features or self.extra_views.dtype != np.float32
        or self.extra_views.shape[::2] != self.images.shape):
      raise DataError(f"Split {self.name!r}: extra views must be float32 [N, V - 1, d] beside "
                      f"features {self.images.shape}")
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

  @property
  def is_features(self) -> bool:
    """Whether the rows are features (float32 [N, d]), which no pipeline normalises or augments."""
    return self.images.ndim == 2

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
    return dataclasses.replace(
        self, images=self.images.take(indices, axis=0), labels=self.labels[indices],
        extra_views=None if self.extra_views is None else self.extra_views[indices])
