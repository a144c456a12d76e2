"""Global and Local Mixture Consistency cumulative learning.

Du et al., "Global and Local Mixture Consistency Cumulative Learning for Long-tailed Visual
Recognitions", CVPR 2023, arXiv 2305.08661; reference code `ynu-yangpeng/GLMC`
(`GLMC-2023/Trainer.py` and `utils/util.py`). Wang et al. (ICML 2026, arXiv 2605.10047) report the
inverse reweighting inside it (`mixed_inverse_reweighted_loss`).

One GLMC step sees two batches of B rows paired row by row: an instance-balanced one (a shuffled
epoch) with labels a and a re-balanced one (drawn with replacement, P(row) ∝ n_y^(−r),
`glmc_rebalanced_indices`) with labels b, each with two crops per image. With one λ per step:

    x_g = λ x¹_a + (1 − λ) x¹_b                     global mixture (`mix_images`)
    x_l = x²_a with a box taken from x²_b           local mixture  (`cutmix_box`, `cutmix`)
    y   = λ e_a + (1 − λ) e_b                       for both       (`mixed_targets`)
    y^w = λ v_a e_a + (1 − λ) v_b e_b               v = `glmc_class_weights`

and the loss of the two forward passes (`glmc_loss`):

    L = α_e L_bal + (1 − α_e) L_reb + w_con L_con,   α_e = 1 − (e/E)²   (`glmc_alpha`)

λ is drawn by the caller, once per step and the same on every device: λ ~ Beta(1, 1) = U(0, 1), the
released code's actual draw (its `--beta 0.5` never reaches `GLMC_mixed`, a defect of the release;
there is no β option here). The CutMix targets use λ, not the fraction of the image the clipped box
actually replaces: that is the method's definition (as released), kept and not corrected.

Host-side (NumPy, once per step or epoch): the re-balanced sampling and the CutMix box. On the
device (jax, jittable): the mixtures, targets, the consistency term and the loss. Inference uses the
re-balanced head fc_cb.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_counts
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_unit_scalar
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import nan_where_negative
from mr2_reweight_core.checks import take_class_values

# ε of the cosine's norms, as torch's F.cosine_similarity (the reference's SimSiam loss).
_COSINE_EPS = 1e-8


class GLMCAux(NamedTuple):
  """The three terms of `glmc_loss`, each this device's share (as the loss: `lax.pmean` of a share
  is its value on the global batch).

  Attributes:
    balanced: L_bal = mean ce(fc(x_g), y) + mean ce(fc(x_l), y).
    rebalanced: L_reb = mean ce(fc_cb(x_g), y^w) + mean ce(fc_cb(x_l), y^w).
    consistency: L_con = mean [−cos(p_g, sg(z_l)) − cos(p_l, sg(z_g))].
  """
  balanced: jax.Array
  rebalanced: jax.Array
  consistency: jax.Array


# ------------------------------------------------------------------------------------------------
# Host side: re-balanced sampling and the CutMix box (NumPy)
# ------------------------------------------------------------------------------------------------

def _check_exponent(value: Any, name: str) -> float:
  if isinstance(value, bool) or np.ndim(value) != 0:
    raise TypeError(f"{name}: expected a real scalar exponent, got {type(value).__name__}.")
  value = float(value)
  if not (math.isfinite(value) and value >= 0):
    raise ValueError(f"{name}: expected a finite exponent ≥ 0, got {value}.")
  return value


def _check_positive_int(value: Any, name: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{name}: expected a Python int, got {type(value).__name__}.")
  if value < 1:
    raise ValueError(f"{name}: expected a positive integer, got {value}.")
  return int(value)


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
  """The re-balanced sampler's probability of each training row (host-side NumPy, float64 [N]).

  Du et al., CVPR 2023, arXiv 2305.08661 (the re-balanced branch's sampler):

      P(i) = n_{y_i}^(−r) / Σ_j n_{y_j}^(−r)

  (`main.py`'s `WeightedRandomSampler` weights; their per-class normalisation cancels here). The
  probability of class c is n_c^(1−r) / Σ_k n_k^(1−r): r = 0 is plain uniform sampling of rows (the
  reference's setting for CIFAR-100-LT IF 100, as released: the second loader is then no
  re-balancing at all), r = 1 samples classes uniformly. Computed in log space, so large counts and
  exponents neither overflow nor underflow.

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
    >>> print(reweight_jax.glmc_rebalanced_probabilities(labels, np.bincount(labels), r=1.0))
    [0.16666667 0.16666667 0.16666667 0.5       ]
  """
  labels, counts = _check_host_labels(labels, class_counts)
  r = _check_exponent(r, "r")
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
    >>> rows = reweight_jax.glmc_rebalanced_indices(labels, np.bincount(labels), 1.0, size=6,
    ...                                             rng=np.random.default_rng(0))
    >>> print(rows.shape, rows.dtype)
    (6,) int64
  """
  probabilities = glmc_rebalanced_probabilities(labels, class_counts, r)
  size = _check_positive_int(size, "size")
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}.")
  return rng.choice(probabilities.size, size=size, replace=True,
                    p=probabilities).astype(np.int64)


def _check_host_lam(lam: Any) -> float:
  if isinstance(lam, bool) or np.ndim(lam) != 0:
    raise ValueError(f"lam: expected a real scalar λ, got {type(lam).__name__} of shape "
                     f"{np.shape(lam)}.")
  lam = float(lam)
  if not 0 <= lam <= 1:
    raise ValueError(f"lam: expected a mixing weight λ in [0, 1], got {lam}.")
  return lam


def cutmix_box(lam: float, height: int, width: int,
               rng: np.random.Generator) -> tuple[int, int, int, int]:
  """The CutMix box of one step (host-side; `utils/util.py`, `rand_bbox`), (y0, y1, x0, x1).

  Yun et al., "CutMix", ICCV 2019, arXiv 1905.04899, as Du et al., CVPR 2023, arXiv 2305.08661 draw
  it:

      h = ⌊⌈H·√(1 − λ)⌉ / 2⌋,  w = ⌊⌈W·√(1 − λ)⌉ / 2⌋
      c_y ~ U{0, …, H − 1},  c_x ~ U{0, …, W − 1}          (drawn in this order from `rng`)
      rows [c_y − h, c_y + h) ∩ [0, H),  columns [c_x − w, c_x + w) ∩ [0, W)

  λ = 1 gives h = w = 0, an empty box; λ = 0 with even H, W and the centre at (H/2, W/2) covers the
  whole image. Near the border the box is clipped, so the fraction of the image it replaces,
  (y1 − y0)(x1 − x0)/(HW), is in general not 1 − λ; GLMC's targets use λ regardless (as released,
  kept: it is the method's definition).

  Args:
    lam: the step's λ in [0, 1].
    height: image height H, a positive int.
    width: image width W, a positive int.
    rng: `np.random.Generator` for the centre (two `integers` draws).

  Returns:
    Python ints 0 ≤ y0 ≤ y1 ≤ H, 0 ≤ x0 ≤ x1 ≤ W, for `cutmix`.

  Raises:
    ValueError: λ not a scalar in [0, 1], a non-positive height or width.
    TypeError: a non-int height or width, an `rng` that is not a Generator.

  Examples:
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.cutmix_box(0.75, 8, 8, np.random.default_rng(0)))
    (4, 8, 3, 7)
  """
  lam = _check_host_lam(lam)
  height = _check_positive_int(height, "height")
  width = _check_positive_int(width, "width")
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}.")
  cut = math.sqrt(1.0 - lam)
  half_h = math.ceil(height * cut) // 2
  half_w = math.ceil(width * cut) // 2
  centre_y = int(rng.integers(height))
  centre_x = int(rng.integers(width))
  return (max(centre_y - half_h, 0), min(centre_y + half_h, height),
          max(centre_x - half_w, 0), min(centre_x + half_w, width))


# ------------------------------------------------------------------------------------------------
# Device side: mixtures, targets, losses (jax)
# ------------------------------------------------------------------------------------------------

def _check_images(images_a: ArrayLike, images_b: ArrayLike) -> tuple[jax.Array, jax.Array]:
  images_a = jnp.asarray(images_a)
  images_b = jnp.asarray(images_b)
  if images_b.shape != images_a.shape:
    raise ValueError(f"images_b: expected the shape {images_a.shape} of images_a, got "
                     f"{images_b.shape}.")
  if images_b.dtype != images_a.dtype:
    raise TypeError(f"images_b: expected the dtype {images_a.dtype} of images_a, got "
                    f"{images_b.dtype}.")
  return images_a, images_b


def _check_unit_scalar(value: ArrayLike, name: str, what: str) -> jax.Array:
  """`checks.check_unit_scalar` as a float array; under `jit` NaN when outside [0, 1]."""
  value = check_unit_scalar(value, name, what)
  value = value.astype(jnp.promote_types(value.dtype, jnp.float32))
  return jnp.where((value >= 0) & (value <= 1), value, jnp.nan)


def mix_images(images_a: ArrayLike, images_b: ArrayLike, lam: ArrayLike) -> jax.Array:
  """The global (mixup) mixture x_g = λ·a + (1 − λ)·b, in the images' dtype.

  Zhang et al., "mixup", ICLR 2018, arXiv 1710.09412; the global mixture of Du et al., CVPR 2023,
  arXiv 2305.08661.

  Args:
    images_a: floating images (e.g. [B, H, W, C]).
    images_b: images of the same shape and dtype.
    lam: scalar λ in [0, 1] (eagerly checked; NaN images under `jit` when outside).

  Returns:
    λ·a + (1 − λ)·b, shape and dtype of the images.

  Raises:
    ValueError: images of different shapes, λ not a scalar or (eagerly) outside [0, 1].
    TypeError: images of different or non-floating dtypes.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.mix_images(jnp.zeros((1, 2)), jnp.ones((1, 2)), 0.75))
    [[0.25 0.25]]
  """
  images_a, images_b = _check_images(images_a, images_b)
  if not jnp.issubdtype(images_a.dtype, jnp.floating):
    raise TypeError(f"images_a: expected a floating dtype, got {images_a.dtype}.")
  lam = _check_unit_scalar(lam, "lam", "mixing weight λ").astype(images_a.dtype)
  return lam * images_a + (1 - lam) * images_b


def cutmix(images_a: ArrayLike, images_b: ArrayLike, box: ArrayLike) -> jax.Array:
  """The local (CutMix) mixture: `images_a` with rows [y0, y1) × columns [x0, x1) of every image
  taken from `images_b`; one box for the whole batch (`cutmix_box`). The local mixture of
  Du et al., CVPR 2023, arXiv 2305.08661.

  The box is applied as a mask, so it may be traced (one compile for every box); under `jit` a box
  reaching outside the image acts as its intersection with the image.

  Args:
    images_a: [B, H, W, C] images.
    images_b: [B, H, W, C] images of the same dtype, the box's source.
    box: (y0, y1, x0, x1) integers with 0 ≤ y0 ≤ y1 ≤ H and 0 ≤ x0 ≤ x1 ≤ W (checked when
      concrete).

  Returns:
    [B, H, W, C] in the images' dtype.

  Raises:
    ValueError: images not of rank 4 or of different shapes, a box that is not 4 integers or (when
      concrete) outside the image.
    TypeError: images of different dtypes.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> a, b = jnp.zeros((1, 4, 4, 1)), jnp.ones((1, 4, 4, 1))
    >>> print(reweight_jax.cutmix(a, b, (1, 3, 0, 2))[0, :, :, 0])
    [[0. 0. 0. 0.]
     [1. 1. 0. 0.]
     [1. 1. 0. 0.]
     [0. 0. 0. 0.]]
  """
  images_a, images_b = _check_images(images_a, images_b)
  if images_a.ndim != 4:
    raise ValueError(f"images_a: expected rank 4 [batch, height, width, channels], got shape "
                     f"{images_a.shape}.")
  height, width = images_a.shape[1:3]
  box = jnp.asarray(box)
  if box.shape != (4,) or not jnp.issubdtype(box.dtype, jnp.integer):
    raise ValueError(f"box: expected 4 integers (y0, y1, x0, x1), got {box.dtype} of shape "
                     f"{box.shape}.")
  if is_concrete(box):
    y0, y1, x0, x1 = (int(v) for v in np.asarray(box))
    if not (0 <= y0 <= y1 <= height and 0 <= x0 <= x1 <= width):
      raise ValueError(f"box: expected 0 ≤ y0 ≤ y1 ≤ {height} and 0 ≤ x0 ≤ x1 ≤ {width}, got "
                       f"{(y0, y1, x0, x1)}.")
  rows = jnp.arange(height)
  cols = jnp.arange(width)
  inside = (((rows >= box[0]) & (rows < box[1]))[:, None]
            & ((cols >= box[2]) & (cols < box[3]))[None, :])
  return jnp.where(inside[None, :, :, None], images_b, images_a)


def soft_cross_entropy(logits: ArrayLike, targets: ArrayLike, *, where: ArrayLike | None = None
                       ) -> jax.Array:
  """Per-example cross-entropy against soft targets [B].

  The ce of Du et al., CVPR 2023, arXiv 2305.08661, against mixed (and weighted) targets:

      ce(z_i, t_i) = −Σ_k t_ik · log softmax(z_i)_k

  with the stable log-softmax (`jax.nn.log_softmax`); a term with t_ik = 0 is 0 even where
  z_ik = −inf. Targets need not sum to 1 (GLMC's y^w does not). Computed in at least float32.

  Args:
    logits: [B, K] floating.
    targets: [B, K] floating (e.g. `mixed_targets`).
    where: optional bool [B]; False marks padding, which gives 0 and no gradient (its logits and
      targets may be anything, NaN included).

  Returns:
    float [B]; NaN for a row whose targets hold NaN (a bad label under `jit`).

  Raises:
    ValueError: logits not rank 2, targets of another shape, a `where` of another shape.
    TypeError: non-floating logits or targets.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    >>> targets = jnp.array([[0.7, 0.3, 0.0], [0.0, 0.0, 1.0]])
    >>> print(np.asarray(reweight_jax.soft_cross_entropy(logits, targets), float).round(4))
    [0.7698 1.0986]
  """
  logits = check_floating(logits, 2, "logits")
  targets = check_floating(targets, 2, "targets")
  if targets.shape != logits.shape:
    raise ValueError(f"targets: expected the shape {logits.shape} of logits, got "
                     f"{targets.shape}.")
  real = check_where(where, logits.shape[0])
  dtype = jnp.promote_types(jnp.promote_types(logits.dtype, targets.dtype), jnp.float32)
  logits = jnp.where(real[:, None], logits, 0).astype(dtype)
  targets = jnp.where(real[:, None], targets, 0).astype(dtype)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  terms = jnp.where(targets == 0, 0, targets * log_probs)
  return jnp.where(real, -jnp.sum(terms, axis=-1), 0)


def glmc_class_weights(class_counts: ArrayLike, exponent: float) -> jax.Array:
  """The re-balanced head's label weights (`Trainer.update_weight`), float32 [K].

  Du et al., CVPR 2023, arXiv 2305.08661, the weights of the re-balanced branch:

      v_c = n_c^(−ℓw) / mean_{k: n_k > 0} n_k^(−ℓw)   for n_c > 0,     v_c = 0 for n_c = 0

  so the weights average 1 over the classes that have training examples (over all K classes when
  every class has some, as in the reference). A class without examples never occurs as a label; it
  gets weight 0 and is left out of the mean (the reference would divide by 0^ℓw). Computed in log
  space. ℓw = 0 gives 1 for every class with examples.

  Args:
    class_counts: [K] non-negative training counts n_c, at least one positive.
    exponent: ℓw, finite and ≥ 0 (`--label_weighting`: 1.2 for CIFAR-LT, 1 for ImageNet-LT).

  Returns:
    float32 [K]; NaN everywhere under `jit` when a count is negative or none is positive.

  Raises:
    ValueError: counts not rank 1, (eagerly) negative or all 0, ℓw negative or not finite.
    TypeError: counts neither integer nor floating, ℓw not a real scalar.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.glmc_class_weights(jnp.array([100, 10, 0]), 1.0), float).round(4))
    [0.1818 1.8182 0.    ]
  """
  counts = check_counts(class_counts, "class_counts")
  exponent = _check_exponent(exponent, "exponent")
  if is_concrete(counts) and not np.any(np.asarray(counts) > 0):
    raise ValueError("class_counts: expected at least one class with n_c > 0.")
  present = counts > 0
  log_weights = -exponent * jnp.log(jnp.where(present, counts, 1.0))
  log_weights = log_weights - jnp.max(jnp.where(present, log_weights, -jnp.inf))
  weights = jnp.where(present, jnp.exp(log_weights), 0.0)
  weights = weights * jnp.sum(present) / jnp.sum(weights)
  return nan_where_negative(weights, counts)


def mixed_targets(labels_a: ArrayLike, labels_b: ArrayLike, lam: ArrayLike, num_classes: int,
                  class_weights: ArrayLike | None = None) -> jax.Array:
  """GLMC's mixed targets [B, K] (Du et al., CVPR 2023, arXiv 2305.08661):

      y_i   = λ e_{a_i} + (1 − λ) e_{b_i}                      (class_weights None)
      y^w_i = λ v_{a_i} e_{a_i} + (1 − λ) v_{b_i} e_{b_i}      (class_weights v)

  used for both the mixup and the CutMix pass (GLMC's CutMix targets use λ, not the clipped box's
  area). Without weights each row sums to 1. `class_weights` enter as given, so a caller passing
  weights that carry a gradient (the inverse reweighting's ŵ under gradient flow,
  `mixed_inverse_reweighted_loss`) keeps it.

  Args:
    labels_a: int [B] labels of the instance-balanced rows, in [0, K).
    labels_b: int [B] labels of the paired re-balanced rows, in [0, K).
    lam: scalar λ in [0, 1] (eagerly checked; NaN targets under `jit` when outside).
    num_classes: K, the number of classes.
    class_weights: optional [K] v (e.g. `glmc_class_weights`).

  Returns:
    float [B, K] (float32, or the weights' dtype if wider). A row with an out-of-range label a_i or
    b_i is NaN under `jit` (never a clipped class); eagerly it raises `ValueError`.

  Raises:
    ValueError: labels not [B] of one length, λ not a scalar or (eagerly) outside [0, 1],
      `class_weights` not [K], or (eagerly) a label outside [0, K).
    TypeError: non-integer labels, non-floating weights.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.mixed_targets(jnp.array([0, 1]), jnp.array([2, 1]), 0.75, 3))
    [[0.75 0.   0.25]
     [0.   1.   0.  ]]
  """
  num_classes = check_num_classes(num_classes)
  labels_a = jnp.asarray(labels_a)
  ok_a = check_labels(labels_a, num_classes, "labels_a")
  labels_b = jnp.asarray(labels_b)
  ok_b = check_labels(labels_b, num_classes, "labels_b")
  check_batch_dim(labels_b, labels_a.shape[0], "labels_b", "labels_a")
  lam = _check_unit_scalar(lam, "lam", "mixing weight λ")
  dtype = lam.dtype
  if class_weights is None:
    weight_a = weight_b = jnp.ones(labels_a.shape, dtype)
  else:
    class_weights = check_class_vector(class_weights, num_classes, "class_weights")
    dtype = jnp.promote_types(dtype, class_weights.dtype)
    weight_a = take_class_values(class_weights, labels_a, ok_a).astype(dtype)
    weight_b = take_class_values(class_weights, labels_b, ok_b).astype(dtype)
  lam = lam.astype(dtype)
  onehot_a = jax.nn.one_hot(index_labels(labels_a, ok_a), num_classes, dtype=dtype)
  onehot_b = jax.nn.one_hot(index_labels(labels_b, ok_b), num_classes, dtype=dtype)
  targets = (lam * weight_a)[:, None] * onehot_a + ((1 - lam) * weight_b)[:, None] * onehot_b
  return jnp.where((ok_a & ok_b)[:, None], targets, jnp.nan)


def _safe_norm(x: jax.Array) -> jax.Array:
  """max(‖x‖, ε) per row, with a finite (zero) gradient at x = 0."""
  return jnp.sqrt(jnp.maximum(jnp.sum(x * x, axis=-1), _COSINE_EPS ** 2))


def _cosine(p: jax.Array, z: jax.Array) -> jax.Array:
  return jnp.sum(p * z, axis=-1) / (_safe_norm(p) * _safe_norm(z))


def glmc_consistency(pred_g: ArrayLike, proj_g: ArrayLike, pred_l: ArrayLike, proj_l: ArrayLike, *,
                     where: ArrayLike | None = None) -> jax.Array:
  """The cumulative (SimSiam) consistency of the two mixtures, per example [B].

  Du et al., CVPR 2023, arXiv 2305.08661 (a SimSiam loss: Chen & He, "Exploring Simple Siamese
  Representation Learning", CVPR 2021, arXiv 2011.10566):

      c_i = −cos(p_g,i, sg(z_l,i)) − cos(p_l,i, sg(z_g,i)),
      cos(p, z) = ⟨p, z⟩ / (max(‖p‖, ε) · max(‖z‖, ε)),   ε = 1e-8

  z = projector(h), p = predictor(z) of the global (g) and local (l) pass. The projections are
  stop-gradient targets (`SimSiamLoss` detaches z), so no gradient flows into `proj_g`, `proj_l`
  from here; the projector still learns through the predictor's input. The clamped norms (torch's
  `F.cosine_similarity`) keep a zero row finite, with a zero gradient. Computed in at least float32.

  Args:
    pred_g: float [B, D] predictor output p_g of the global (mixup) pass.
    proj_g: float [B, D] projection z_g of the global pass.
    pred_l: float [B, D] predictor output p_l of the local (CutMix) pass.
    proj_l: float [B, D] projection z_l of the local pass.
    where: optional bool [B]; padding rows give 0 and no gradient.

  Returns:
    float [B] in [−2, 2].

  Raises:
    ValueError: arrays not rank 2 or of different shapes, a `where` of another shape.
    TypeError: non-floating arrays.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> p, z = jnp.array([[1.0, 0.0], [0.6, 0.8]]), jnp.array([[1.0, 0.0], [1.0, 0.0]])
    >>> print(reweight_jax.glmc_consistency(p, z, p, z))  # −2 cos(p, z): −2 and −1.2
    [-2.  -1.2]
  """
  pred_g = check_floating(pred_g, 2, "pred_g")
  arrays = [pred_g]
  for name, value in (("proj_g", proj_g), ("pred_l", pred_l), ("proj_l", proj_l)):
    value = check_floating(value, 2, name)
    if value.shape != pred_g.shape:
      raise ValueError(f"{name}: expected the shape {pred_g.shape} of pred_g, got {value.shape}.")
    arrays.append(value)
  real = check_where(where, pred_g.shape[0])
  dtype = jnp.promote_types(jnp.result_type(*arrays), jnp.float32)
  pred_g, proj_g, pred_l, proj_l = (jnp.where(real[:, None], x, 0).astype(dtype) for x in arrays)
  consistency = (-_cosine(pred_g, jax.lax.stop_gradient(proj_l))
                 - _cosine(pred_l, jax.lax.stop_gradient(proj_g)))
  return jnp.where(real, consistency, 0)


def glmc_alpha(epoch: ArrayLike, num_epochs: int) -> jax.Array:
  """The cumulative-learning weight of the balanced branch, float32 scalar (jittable in `epoch`).

  Du et al., CVPR 2023, arXiv 2305.08661, the cumulative learning schedule:

      α_e = 1 − (e / E)²

  with e the 0-based epoch, as the reference (`alpha = 1 - (epoch / epochs) ** 2`): 1 at e = 0, and
  1 − ((E − 1)/E)² > 0 in the last epoch; e = E gives 0.

  Args:
    epoch: scalar e in [0, E] (integer or floating; may be traced). Eagerly outside → ValueError;
      under `jit` NaN (never a clipped value, which would silently flip the branch weights).
    num_epochs: E, a positive Python int.

  Returns:
    float32 scalar α_e in [0, 1].

  Raises:
    ValueError: `epoch` not a real scalar or (eagerly) outside [0, E].
    TypeError: `num_epochs` not an int.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.glmc_alpha(0, 200), reweight_jax.glmc_alpha(100, 200))
    1.0 0.75
  """
  num_epochs = _check_positive_int(num_epochs, "num_epochs")
  epoch = jnp.asarray(epoch)
  if epoch.ndim != 0 or not (jnp.issubdtype(epoch.dtype, jnp.integer)
                             or jnp.issubdtype(epoch.dtype, jnp.floating)):
    raise ValueError(f"epoch: expected a real scalar, got {epoch.dtype} of shape {epoch.shape}.")
  if is_concrete(epoch) and not 0 <= float(epoch) <= num_epochs:
    raise ValueError(f"epoch: expected 0 ≤ e ≤ num_epochs = {num_epochs}, got {float(epoch)}.")
  epoch = epoch.astype(jnp.float32)
  # (E − e)(E + e)/E²: exact products for integer epochs, so α keeps its relative accuracy near
  # e = E, where 1 − (e/E)² would cancel.
  alpha = (num_epochs - epoch) * (num_epochs + epoch) / float(num_epochs) ** 2
  return jnp.where((epoch >= 0) & (epoch <= num_epochs), alpha, jnp.nan)


def glmc_loss(logits_fc_g: ArrayLike, logits_fc_l: ArrayLike, logits_cb_g: ArrayLike,
              logits_cb_l: ArrayLike, pred_g: ArrayLike, proj_g: ArrayLike, pred_l: ArrayLike,
              proj_l: ArrayLike, labels_a: ArrayLike, labels_b: ArrayLike, lam: ArrayLike,
              class_weights: ArrayLike, alpha: ArrayLike, w_con: ArrayLike, *,
              axis_name: str | None = None, where: ArrayLike | None = None
              ) -> tuple[jax.Array, GLMCAux]:
  """GLMC's loss of one step (`Trainer.train`), returns `(loss, GLMCAux)`.

  Du et al., CVPR 2023, arXiv 2305.08661: the global and local mixture losses of the two heads and
  the cumulative consistency:

      y   = λ e_a + (1 − λ) e_b,   y^w = λ v_a e_a + (1 − λ) v_b e_b          (`mixed_targets`)
      L_bal = mean_i ce(fc(x_g)_i, y_i)    + mean_i ce(fc(x_l)_i, y_i)
      L_reb = mean_i ce(fc_cb(x_g)_i, y^w_i) + mean_i ce(fc_cb(x_l)_i, y^w_i)
      L_con = mean_i [−cos(p_g,i, sg(z_l,i)) − cos(p_l,i, sg(z_g,i))]       (`glmc_consistency`)
      L     = α L_bal + (1 − α) L_reb + w_con L_con

  ce is `soft_cross_entropy`; g is the mixup pass (x_g), l the CutMix pass (x_l); both passes use
  the same targets. The gradient flows into the four logits and the two predictions, not into the
  projections (stop-gradient); `class_weights` enter as given (v is a constant; the inverse
  reweighting's ŵ (`mixed_inverse_reweighted_loss`) may be passed in its place, with or without its
  gradient).

  Data parallel (`axis_name`): the means run over the real rows of the global batch (their count
  psum-ed), λ, v, α and w_con must be the same on every device, and the loss and each aux term are
  this device's share N_devices · (Σ_{local i} …) / B_global: `lax.pmean` of it, and of the
  parameter gradients, is the value (gradient) of the concatenated batch on one device. Under
  `jax.shard_map`'s default `check_vma=True` the loss is still this share and so are the aux terms;
  take the gradient of `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself (the
  share's own gradient is N_devices times the global one). Without `axis_name`, `jax.jit` over a
  batch laid out with `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss
  is the global value, and so are the aux terms.

  Args:
    logits_fc_g: float [B, K] logits of the instance-balanced head fc on x_g.
    logits_fc_l: float [B, K] logits of fc on x_l.
    logits_cb_g: float [B, K] logits of the re-balanced head fc_cb on x_g.
    logits_cb_l: float [B, K] logits of fc_cb on x_l.
    pred_g: float [B, D] predictor output p of the global pass.
    proj_g: float [B, D] projection z of the global pass.
    pred_l: float [B, D] predictor output p of the local pass.
    proj_l: float [B, D] projection z of the local pass.
    labels_a: int [B] labels of the instance-balanced rows.
    labels_b: int [B] labels of the paired re-balanced rows.
    lam: scalar λ of the step in [0, 1].
    class_weights: [K] v (`glmc_class_weights`), or ŵ.
    alpha: scalar α in [0, 1] (`glmc_alpha`; NaN loss under `jit` when outside).
    w_con: scalar consistency weight w_con ≥ 0 (1–10 in the recipes).
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding (e.g. a short last batch), which counts nowhere
      and gets no gradient. Its inputs may be anything under `jit`; eagerly its labels are
      range-checked with the others, as by every loss of the package.

  Returns:
    (loss, GLMCAux). A real row with an out-of-range label makes the loss (and L_bal, L_reb) NaN
    under `jit`; eagerly it raises `ValueError` naming labels_a or labels_b.

  Raises:
    ValueError: logits of different shapes, labels not [B], arrays of mismatched batch sizes, α or λ
      not a scalar in [0, 1] (eagerly), `w_con` negative or not a real scalar, or (eagerly) a label
      outside [0, K).
    TypeError: non-floating logits or projections, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0]])
    >>> pred, proj = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 0.1], [0.1, 1.0]])
    >>> loss, aux = reweight_jax.glmc_loss(
    ...     logits, logits, logits, logits, pred, proj, pred, proj, jnp.array([0, 1]),
    ...     jnp.array([2, 2]), 0.6, jnp.array([0.5, 1.0, 1.5]), alpha=0.75, w_con=1.0)
    >>> print(f"{loss:.4f}", f"{aux.balanced:.4f}", f"{aux.rebalanced:.4f}", f"{aux.consistency:.4f}")
    0.6898 2.4501 3.3692 -1.9901
  """
  logits_fc_g = check_floating(logits_fc_g, 2, "logits_fc_g")
  for name, value in (("logits_fc_l", logits_fc_l), ("logits_cb_g", logits_cb_g),
                      ("logits_cb_l", logits_cb_l)):
    value = check_floating(value, 2, name)
    if value.shape != logits_fc_g.shape:
      raise ValueError(f"{name}: expected the shape {logits_fc_g.shape} of logits_fc_g, got "
                       f"{value.shape}.")
  batch, num_classes = logits_fc_g.shape
  labels_a = jnp.asarray(labels_a)
  if labels_a.ndim != 1:
    raise ValueError(f"labels_a: expected rank 1 [batch], got shape {labels_a.shape}.")
  check_batch_dim(logits_fc_g, labels_a.shape[0], "logits_fc_g", "labels_a")
  pred_g = check_floating(pred_g, 2, "pred_g")
  check_batch_dim(pred_g, batch, "pred_g", "labels_a")
  real = check_where(where, batch)
  alpha = _check_unit_scalar(alpha, "alpha", "branch weight α")
  w_con = jnp.asarray(w_con)
  if w_con.ndim != 0 or not (jnp.issubdtype(w_con.dtype, jnp.floating)
                             or jnp.issubdtype(w_con.dtype, jnp.integer)):
    raise ValueError(f"w_con: expected a real scalar, got {w_con.dtype} of shape {w_con.shape}.")
  if is_concrete(w_con) and not (math.isfinite(float(w_con)) and float(w_con) >= 0):
    raise ValueError(f"w_con: expected a finite weight ≥ 0, got {float(w_con)}.")

  targets = mixed_targets(labels_a, labels_b, lam, num_classes)
  weighted_targets = mixed_targets(labels_a, labels_b, lam, num_classes, class_weights)
  balanced = (soft_cross_entropy(logits_fc_g, targets, where=real)
              + soft_cross_entropy(logits_fc_l, targets, where=real))
  rebalanced = (soft_cross_entropy(logits_cb_g, weighted_targets, where=real)
                + soft_cross_entropy(logits_cb_l, weighted_targets, where=real))
  consistency = glmc_consistency(pred_g, proj_g, pred_l, proj_l, where=real)

  count = jnp.sum(real.astype(jnp.float32))
  if axis_name is not None:
    count = jax.lax.psum(count, axis_name)
  scale = class_sums.num_devices(axis_name) / jnp.maximum(count, 1.0)
  aux = GLMCAux(scale * jnp.sum(balanced), scale * jnp.sum(rebalanced),
                scale * jnp.sum(consistency))
  loss = alpha * aux.balanced + (1 - alpha) * aux.rebalanced + w_con * aux.consistency
  return loss, aux
