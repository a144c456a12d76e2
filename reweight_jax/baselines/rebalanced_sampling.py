r"""GLMC's re-balanced sampling, host-side (NumPy): each row drawn with replacement,
:math:`P(\text{row}) \propto n_y^{-r}`.

Du et al., "Global and Local Mixture Consistency Cumulative Learning for Long-tailed Visual
Recognitions", CVPR 2023, arXiv 2305.08661 (reference code `ynu-yangpeng/GLMC`): the re-balanced
batch that is paired row by row with the instance-balanced one (see `reweight_jax.baselines.glmc`). Runs once
per step or epoch on the host, outside `jit`.
"""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_exponent
from mr2_reweight_core.checks import check_positive_int


def _check_host_labels(labels: ArrayLike, class_counts: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size < 1:
    raise ValueError(f"labels: expected a non-empty rank-1 [N] array, got shape {labels.shape}.")
  if not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(f"labels: expected an integer dtype, got {labels.dtype}.")
  counts = np.asarray(class_counts)
  if counts.ndim != 1 or counts.size < 1:
    raise ValueError(f"class_counts: expected a non-empty rank-1 [K] array, got shape "
                     f"{counts.shape}.")
  if not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype, np.floating)):
    raise TypeError(f"class_counts: expected an integer or floating dtype, got {counts.dtype}.")
  counts = counts.astype(np.float64)
  if not np.all(np.isfinite(counts) & (counts >= 0)):
    raise ValueError("class_counts: counts must be finite and non-negative.")
  num_classes = counts.size
  if labels.min() < 0 or labels.max() >= num_classes:
    raise ValueError(f"labels: class labels must lie in [0, {num_classes}); got values from "
                     f"{labels.min()} to {labels.max()}.")
  empty = np.unique(labels[counts[labels] == 0])
  if empty.size:
    raise ValueError(f"class_counts: classes {empty.tolist()} occur in labels but have n_c = 0.")
  return labels, counts


def glmc_rebalanced_probabilities(labels: ArrayLike, class_counts: ArrayLike, r: float
                                  ) -> np.ndarray:
  r"""The re-balanced sampler's probability of each training row (host-side NumPy, float64 [N]).

  Du et al., CVPR 2023, arXiv 2305.08661 (the re-balanced branch's sampler):

  .. math::

      P(i) = \frac{n_{y_i}^{-r}}{\sum_j n_{y_j}^{-r}}

  (`main.py`'s `WeightedRandomSampler` weights; their per-class normalisation cancels here). The
  probability of class c is :math:`n_c^{1-r} / \sum_k n_k^{1-r}`: r = 0 is plain uniform sampling of
  rows (the reference's setting for CIFAR-100-LT IF 100, as released: the second loader is then no
  re-balancing at all), r = 1 samples classes uniformly. Computed in log space, so large counts and
  exponents neither overflow nor underflow.

  N = 0: `ValueError` (no row to draw). K = 1: 1/N for every row.

  Args:
    labels: int [N] training labels in [0, K).
    class_counts: [K] training counts n_c (normally `np.bincount(labels, minlength=K)`); every class
      that occurs in `labels` needs n_c > 0.
    r: the exponent, finite and ≥ 0 (`--resample_weighting`: 0 or 0.2 in the recipes).

  Returns:
    float64 [N], non-negative, summing to 1.

  Raises:
    ValueError: labels not a non-empty [N] in [0, K), counts not a non-empty [K] of finite
      non-negative values, a class of `labels` with n_c = 0, r negative or not finite.
    TypeError: non-integer labels, counts neither integer nor floating, r not a real scalar.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> labels = np.array([0, 0, 0, 1])
    >>> print(reweight_jax.baselines.glmc_rebalanced_probabilities(labels, np.bincount(labels), r=1.0))
    [0.16666667 0.16666667 0.16666667 0.5       ]
  """
  labels, counts = _check_host_labels(labels, class_counts)
  r = check_exponent(r, "r")
  log_weights = -r * np.log(counts[labels])
  weights = np.exp(log_weights - log_weights.max())
  return weights / weights.sum()


def glmc_rebalanced_indices(labels: ArrayLike, class_counts: ArrayLike, r: float, size: int,
                            rng: np.random.Generator) -> np.ndarray:
  """`size` training-row indices drawn independently with replacement from
  `glmc_rebalanced_probabilities(labels, class_counts, r)` (host-side NumPy; Du et al., CVPR 2023,
  arXiv 2305.08661).

  The reference's re-balanced loader draws N rows with replacement per pass and restarts it when it
  runs out; since the draws are independent, drawing each step's B rows afresh is the same
  distribution. For batches that are a pure function of (seed, epoch, step), pass
  `rng = np.random.default_rng((seed, epoch, step))`. Each call costs O(N) (the probabilities and
  `choice`'s cumulative sum): negligible next to a training step at CIFAR or ImageNet-LT sizes.

  N = 0: `ValueError` (no row to draw). K = 1: uniform draws over the N rows.

  Args:
    labels: int [N] training labels in [0, K).
    class_counts: [K] training counts n_c.
    r: the exponent, finite and ≥ 0.
    size: number of draws, a positive int (the batch size B).
    rng: the `np.random.Generator` to draw from (advanced by one `choice`).

  Returns:
    int64 [size] row indices in [0, N).

  Raises:
    ValueError: as `glmc_rebalanced_probabilities`, or a non-positive `size`.
    TypeError: a non-int `size`, an `rng` that is not a Generator.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> labels = np.array([0, 0, 0, 1])
    >>> rows = reweight_jax.baselines.glmc_rebalanced_indices(labels, np.bincount(labels), 1.0, size=6,
    ...                                             rng=np.random.default_rng(0))
    >>> print(rows.shape, rows.dtype)
    (6,) int64
  """
  probabilities = glmc_rebalanced_probabilities(labels, class_counts, r)
  size = check_positive_int(size, "size")
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}.")
  return rng.choice(probabilities.size, size=size, replace=True,
                    p=probabilities).astype(np.int64)
