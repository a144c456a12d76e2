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
      (`experiments.data.lazy_images.LazyImages`: same shape, dtype, ndim, len and row indexing).
    labels: int32 [N], values in [0, num_classes).
    num_classes: K.
    class_names: K names, index = label.
    name: the `load_split` source name; selects the normalisation constants.
  """
  images: np.ndarray  # Or a lazy_images.LazyImages.
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
