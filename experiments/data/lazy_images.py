"""`LazyImages`: an array-like uint8 [N, H, W, C] whose rows are decoded only when indexed, over a
picklable record reader (`Records`) that holds file paths or a data-source spec, never pixels.

The long-tailed benchmarks of Liu et al. (2019, OLTR) and iNaturalist 2018 do not fit in host memory
as decoded uint8 (ImageNet-LT train alone is 115,846 · 224² · 3 bytes = 17 GB), so their
`Split.images` is a `LazyImages` (the sources: `experiments.data.sources`). Indexing it decodes the
rows asked for; `take` (hence `Split.subset`: long-tailed subsets, validation hold-outs) selects
rows without decoding any, and labels, class counts and Many / Medium / Few groups never decode.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


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


class ReopenedRecords:
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
