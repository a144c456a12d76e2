r"""Just Train Twice (Liu et al., "Just Train Twice: Improving Group Robustness without Training
Group Information", ICML 2021, arXiv 2107.09044, Algorithm 1; reference code `anniesch/jtt`; one of
MR2's comparison methods).

JTT is two ERM runs and a data-set edit between them, so there is no loss function here:

  1. Stage 1: ERM for T epochs (short; the README uses 1–60 by data set).
  2. Error set E = the training examples the stage-1 model misclassifies (`jtt_error_set`).
     Default here: the logits of an eval-mode pass over the training set without augmentation,
     after stage 1. The reference instead logs the predictions made during epoch T's training pass
     (train mode, augmented, each before its update); the trainer offers that as an option, and
     this function takes the logits of either pass.
  3. Stage 2: a fresh model trained by ERM on the training set in which every example of E appears
     1 + λ_up times (`jtt_upsampled_indices`), so the epoch grows to
     :math:`N + \lambda_\mathrm{up} |E|` examples (`jtt_epoch_length`). λ_up grid {20, 50, 100}
     (4–6 for text); T and λ_up are chosen on the validation split's worst-class (or Hard) accuracy.

State: the stage-1 checkpoint, the error mask (N,) and the host-side index list of each epoch. The
upsampled list is drawn once per epoch on the host (NumPy), not per step, so it costs nothing on the
device and is a pure function of (error set, λ_up, seed).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_where


def jtt_error_set(logits: ArrayLike, labels: ArrayLike, *, where: ArrayLike | None = None
                  ) -> jax.Array:
  r"""The error set of JTT's stage-1 model as a mask, bool [N].

  Liu et al., ICML 2021, arXiv 2107.09044, Algorithm 1 (the examples the identification model
  misclassifies), False for rows with `where` False:

  .. math::

      E_i = \mathbf{1}\bigl[\operatorname*{argmax}_k z_{ik} \ne y_i\bigr]

  Ties: `argmax` returns the first maximal index, so an example whose label ties for the largest
  logit is correctly classified only if no smaller class index ties with it. A row with a NaN logit
  predicts the first NaN's class (NumPy's `argmax` convention).

  B = 0: an empty [0]. K = 1: False on every row (every prediction is the one class).

  Args:
    logits: [N, K] logits of the stage-1 model over the training set (or a batch of it; the masks
      of consecutive batches concatenate).
    labels: int [N] in [0, K).
    where: optional bool [N]; False marks padding, which is never in the error set.

  Returns:
    bool [N]. Eagerly an out-of-range label raises `ValueError`; under `jit` no prediction can
    equal it, so it is in the error set (use `traced_checks()` with `checkify` for the error).

  Raises:
    ValueError: logits not [N, K], labels not [N], a `where` of another shape, or (eagerly) a real
      row's label outside [0, K).
    TypeError: non-floating logits or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> print(reweight_jax.baselines.jtt_error_set(logits, labels))
    [False False False False]
    >>> print(reweight_jax.baselines.jtt_error_set(logits, jnp.array([0, 1, 2, 0])))  # row 3 predicts 1
    [False False False  True]
  """
  logits = check_floating(logits, 2, "logits")
  labels = jnp.asarray(labels)
  check_labels(labels, logits.shape[1], where=where)
  check_batch_dim(logits, labels.shape[0], "logits")
  real = check_where(where, labels.shape[0])
  return real & (jnp.argmax(logits, axis=-1) != labels)


def _check_error_set(error_set: ArrayLike) -> np.ndarray:
  error_set = np.asarray(error_set)
  if error_set.ndim != 1:
    raise ValueError(f"error_set: expected rank 1 [N], got shape {error_set.shape}.")
  if error_set.dtype != np.bool_:
    raise TypeError(f"error_set: expected a boolean mask, got {error_set.dtype}.")
  return error_set


def _check_upweight(upweight: int) -> int:
  if isinstance(upweight, bool) or not isinstance(upweight, (int, np.integer)):
    raise TypeError(f"upweight: expected a non-negative Python int λ_up, got "
                    f"{type(upweight).__name__}.")
  if upweight < 0:
    raise ValueError(f"upweight: expected a non-negative integer λ_up, got {upweight}.")
  return int(upweight)


def jtt_epoch_length(error_set: ArrayLike, upweight: int) -> int:
  """Examples in one stage-2 epoch: N + λ_up·|E|.

  Liu et al., ICML 2021, arXiv 2107.09044: each error-set example appears 1 + λ_up times.

  N = 0: 0.

  Args:
    error_set: bool [N] mask of the error set E.
    upweight: λ_up, a non-negative int.

  Returns:
    int, the epoch's length.

  Raises:
    ValueError: `error_set` not rank 1, a negative `upweight`.
    TypeError: a non-boolean `error_set`, a non-int `upweight`.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.jtt_epoch_length(np.array([False, True, False, True]), upweight=20))
    44
  """
  error_set = _check_error_set(error_set)
  return int(error_set.shape[0] + _check_upweight(upweight) * np.count_nonzero(error_set))


def jtt_upsampled_indices(error_set: ArrayLike, upweight: int, *, seed: Any = None,
                          rng: np.random.Generator | None = None) -> np.ndarray:
  """Dataset indices of one stage-2 epoch, shuffled: example i appears 1 + λ_up·1[i ∈ E] times.

  Liu et al., ICML 2021, arXiv 2107.09044, Algorithm 1 (the up-sampled training set of the final
  model). Host-side NumPy, drawn once per epoch. Give exactly one of `seed` (an int or a sequence of
  ints, e.g. `(seed, epoch)`, for a list that is a pure function of its arguments) or `rng` (a
  `np.random.Generator`, advanced by one permutation).

  N = 0: an empty index array.

  Args:
    error_set: bool [N], e.g. `jtt_error_set(...)` of the stage-1 model (a jax or NumPy array).
    upweight: λ_up, a non-negative integer (20, 50 or 100 in the reference grid); 0 gives a
      permutation of range(N).
    seed: seed of a fresh `np.random.default_rng`.
    rng: a generator to draw the permutation from.

  Returns:
    int64 [jtt_epoch_length(error_set, upweight)].

  Raises:
    ValueError: both or neither of `seed` and `rng`, `error_set` not rank 1, a negative `upweight`.
    TypeError: a non-boolean `error_set`, a non-int `upweight`, an `rng` that is not a Generator.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> error_set = np.array([False, True, False])
    >>> indices = reweight_jax.baselines.jtt_upsampled_indices(error_set, 2, seed=(0, 1))
    >>> print(sorted(indices.tolist()))  # example 1 three times
    [0, 1, 1, 1, 2]
  """
  error_set = _check_error_set(error_set)
  upweight = _check_upweight(upweight)
  if (seed is None) == (rng is None):
    raise ValueError("seed, rng: give exactly one (a seed such as (seed, epoch), or a Generator).")
  if rng is None:
    rng = np.random.default_rng(seed)
  elif not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}.")
  repeats = 1 + upweight * error_set.astype(np.int64)
  return rng.permutation(np.repeat(np.arange(error_set.shape[0], dtype=np.int64), repeats))
