"""The validation hold-out: a stratified share of every class (`stratified_holdout`) carved from a
training split (`validation_split`) for model selection, never from the test set."""

from __future__ import annotations

import numpy as np

from experiments.common.errors import DataError
from experiments.data.split import Split


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
