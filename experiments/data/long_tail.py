"""Long-tailed subsets and class groups: the exponential class sizes of CIFAR-LT
(`long_tail_counts`), the examples a long-tailed subset keeps (`long_tail_indices`, by the selection
of one release or another), and the Many / Medium / Few groups of a training set's class counts
(`many_medium_few`)."""

from __future__ import annotations

import numpy as np

from experiments.common.errors import DataError

# Group ids returned by `many_medium_few`, and the groups' names in that order.
MANY, MEDIUM, FEW = 0, 1, 2
SHOT_NAMES = ("many", "medium", "few")


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


def many_medium_few(train_counts: np.ndarray, many: int = 100, few: int = 20) -> np.ndarray:
  """int32 [K]: MANY (0) if n_k > many, FEW (2) if n_k < few, else MEDIUM (1) (Liu et al. 2019)."""
  counts = np.asarray(train_counts)
  return np.where(counts > many, MANY, np.where(counts < few, FEW, MEDIUM)).astype(np.int32)
