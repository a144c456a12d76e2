r"""Image mixing: the mixup mixture and the CutMix box and paste.

Zhang et al., "mixup: Beyond Empirical Risk Minimization", ICLR 2018, arXiv 1710.09412 (the global
mixture :math:`x = \lambda a + (1 - \lambda) b`) and Yun et al., "CutMix", ICCV 2019, arXiv
1905.04899 (a box of b pasted into a), as GLMC uses them (Du et al., CVPR 2023, arXiv 2305.08661;
`utils/util.py`, `rand_bbox`). `cutmix_box` draws the box on the host (NumPy, once per step);
`mix_images` and `cutmix` run on the device (jittable).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_positive_int
from mr2_reweight_core.checks import is_concrete
from mr2_reweight_core.checks import unit_scalar_or_nan


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
  r"""The CutMix box of one step (host-side; `utils/util.py`, `rand_bbox`), (y0, y1, x0, x1).

  Yun et al., "CutMix", ICCV 2019, arXiv 1905.04899, as Du et al., CVPR 2023, arXiv 2305.08661 draw
  it, with :math:`c_y` and :math:`c_x` drawn in this order from `rng`:

  .. math::

      \begin{aligned}
        h &= \bigl\lfloor \lceil H \sqrt{1 - \lambda} \rceil / 2 \bigr\rfloor, \qquad
          w = \bigl\lfloor \lceil W \sqrt{1 - \lambda} \rceil / 2 \bigr\rfloor, \\
        c_y &\sim U\{0, \ldots, H - 1\}, \qquad c_x \sim U\{0, \ldots, W - 1\}, \\
        \text{rows } &[c_y - h,\ c_y + h) \cap [0, H), \qquad
          \text{columns } [c_x - w,\ c_x + w) \cap [0, W).
      \end{aligned}

  λ = 1 gives h = w = 0, an empty box; λ = 0 with even H, W and the centre at (H/2, W/2) covers the
  whole image. Near the border the box is clipped, so the fraction of the image it replaces,
  :math:`(y_1 - y_0)(x_1 - x_0) / (H W)`, is in general not 1 − λ; GLMC's targets use λ regardless
  (as released, kept: it is the method's definition).

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
    >>> print(reweight_jax.baselines.cutmix_box(0.75, 8, 8, np.random.default_rng(0)))
    (4, 8, 3, 7)
  """
  lam = _check_host_lam(lam)
  height = check_positive_int(height, "height")
  width = check_positive_int(width, "width")
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}.")
  cut = math.sqrt(1.0 - lam)
  half_h = math.ceil(height * cut) // 2
  half_w = math.ceil(width * cut) // 2
  centre_y = int(rng.integers(height))
  centre_x = int(rng.integers(width))
  return (max(centre_y - half_h, 0), min(centre_y + half_h, height),
          max(centre_x - half_w, 0), min(centre_x + half_w, width))


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


def mix_images(images_a: ArrayLike, images_b: ArrayLike, lam: ArrayLike) -> jax.Array:
  """The global (mixup) mixture x_g = λ·a + (1 − λ)·b, in the images' dtype.

  Zhang et al., "mixup", ICLR 2018, arXiv 1710.09412; the global mixture of Du et al., CVPR 2023,
  arXiv 2305.08661.

  B = 0: an empty batch of the images' shape.

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
    >>> print(reweight_jax.baselines.mix_images(jnp.zeros((1, 2)), jnp.ones((1, 2)), 0.75))
    [[0.25 0.25]]
  """
  images_a, images_b = _check_images(images_a, images_b)
  if not jnp.issubdtype(images_a.dtype, jnp.floating):
    raise TypeError(f"images_a: expected a floating dtype, got {images_a.dtype}.")
  lam = unit_scalar_or_nan(lam, "lam", "mixing weight λ").astype(images_a.dtype)
  return lam * images_a + (1 - lam) * images_b


def cutmix(images_a: ArrayLike, images_b: ArrayLike, box: ArrayLike) -> jax.Array:
  """The local (CutMix) mixture: `images_a` with rows [y0, y1) × columns [x0, x1) of every image
  taken from `images_b`; one box for the whole batch (`cutmix_box`). The local mixture of
  Du et al., CVPR 2023, arXiv 2305.08661.

  The box is applied as a mask, so it may be traced (one compile for every box); under `jit` a box
  reaching outside the image acts as its intersection with the image.

  B = 0: an empty batch of the images' shape.

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
    >>> print(reweight_jax.baselines.cutmix(a, b, (1, 3, 0, 2))[0, :, :, 0])
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
