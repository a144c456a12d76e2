"""MR2 logit margin: class-dependent temperature cross-entropy (Zhu et al.,
ICLR 2026, arXiv 2602.00205: the logit margin)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core import checks
from mr2_jax.class_stats import ClassStats
from mr2_jax.class_stats import check_class_stats
from mr2_reweight_core.cross_entropy import check_logits_and_labels
from mr2_reweight_core.cross_entropy import finish_per_example
from mr2_reweight_core.cross_entropy import label_log_softmax


def class_margins(stats: ClassStats, c_bar: ArrayLike = 1.0, *,
                  min_margin: float = 1e-6) -> jax.Array:
  r"""Per-class margins γ [K] from the class statistics.

  Zhu et al., ICLR 2026, arXiv 2602.00205, Corollary 1 (the logit margin): the class-dependent
  temperature that minimises the complexity term of their class-sensitive bound (Proposition 1).

  .. math::

      \gamma_k =
      \begin{cases}
        \bar c \, K_\mathrm{seen} \,
          \dfrac{(A_k + V_k)^{1/3}}{\sum_{j \text{ seen}} (A_j + V_j)^{1/3}}
          & \text{for seen classes } k, \\
        \bar c & \text{for unseen classes,}
      \end{cases}

  so the mean of γ over seen classes is c̄ and equal statistics give :math:`\gamma \equiv \bar c`
  (plain cross-entropy for :math:`\bar c = 1`). The 1/3 power minimises
  :math:`\sum_k (A_k + V_k) / \gamma_k^2` subject to :math:`\sum_k \gamma_k = K \bar c`.
  Normalising over the classes seen so far (not all K with zeros, as the released code does) keeps
  γ unbiased early in training. γ is a constant for back-propagation (stop-gradient). A class whose
  statistics are exactly zero would get γ = 0 and infinite logits; γ is floored at
  `min_margin`·c̄ for that case only. Non-finite statistics give γ = NaN for every class (never a
  silent fall-back to c̄).

  K = 1: γ = (c̄,) once the class is seen (and before: c̄ for an unseen class).

  Args:
    stats: `ClassStats` with K classes.
    c_bar: the mean margin c̄ > 0.
    min_margin: the floor of γ relative to c̄, for a class whose statistics are exactly 0.

  Returns:
    float32 [K] margins.

  Raises:
    ValueError: `c_bar` ≤ 0 (traced: NaN margins, and a `checkify` check inside
      `traced_checks()`).

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(3), features, labels)
    >>> gamma = mr2_jax.class_margins(stats, c_bar=1.0)
    >>> print(np.asarray(gamma, float).round(4))  # class 2 unseen: c̄; the seen ones average c̄
    [1.0372 0.9628 1.    ]
  """
  check_class_stats(stats)
  c_bar, c_bar_ok = checks.check_hyperparameter(c_bar, "c_bar", 0.0, low_closed=False,
                                                 what="a positive mean margin")
  stats = jax.lax.stop_gradient(stats)
  seen = stats.seen
  cube_root = jnp.cbrt(jnp.maximum(stats.sq_mean_norm + stats.mean_sq_deviation, 0.0))
  cube_root = jnp.where(seen, cube_root, 0.0)
  # Relative to the largest class, so that equal statistics give ratios of exactly 1 and a sum of
  # exactly K_seen: γ ≡ c̄ bit for bit, hence plain cross-entropy.
  largest = jnp.max(cube_root)
  ratio = cube_root / jnp.where(largest > 0, largest, 1.0)
  total = jnp.sum(ratio)
  num_seen = jnp.sum(seen).astype(cube_root.dtype)
  gamma = c_bar * (ratio * (num_seen / jnp.where(total > 0, total, 1.0)))
  gamma = jnp.maximum(gamma, min_margin * c_bar)
  gamma = jnp.where(seen & (total > 0), gamma, jnp.asarray(c_bar, cube_root.dtype))
  # Non-finite statistics (a NaN feature reached them) make every margin NaN, so the loss shows it,
  # instead of silently falling back to plain cross-entropy.
  finite = jnp.isfinite(total)
  return jnp.where(finite if c_bar_ok is True else finite & c_bar_ok, gamma, jnp.nan)


def margin_cross_entropy(logits: ArrayLike, labels: ArrayLike, gamma: ArrayLike, *,
                         where: ArrayLike | None = None) -> jax.Array:
  r"""Per-example class-dependent temperature cross-entropy.

  Zhu et al., ICLR 2026, arXiv 2602.00205, the logit margin:

  .. math::

      \ell_{\gamma,\mathrm{ce}}(x, y) = -\log \operatorname{softmax}(z / \gamma_y)_y

  The whole logit vector of an example is divided by the margin of its label.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K] logits z.
    labels: int [B] in [0, K).
    gamma: float [K] margins from `class_margins` (treated as constants).
    where: optional bool [B]; False marks padding, which gives 0 and no gradient (its logits may
      be anything, inf and NaN included).

  Returns:
    float [B] losses: 0 where `where` is False, NaN for an out-of-range label under `jit` (never a
    clipped class) and for a real row that holds a non-finite logit (−inf too).

  Raises:
    ValueError: logits not [B, K], labels not [B], gamma not [K], or (eagerly) a real row's label
      outside [0, K).
    TypeError: a non-floating logits or gamma or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> gamma = jnp.array([1.0, 2.0, 0.5])
    >>> print(np.asarray(mr2_jax.margin_cross_entropy(logits, labels, gamma), float).round(4))
    [0.1698 0.8693 0.0049 0.7318]
    >>> print(np.asarray(mr2_jax.margin_cross_entropy(logits, labels, jnp.ones(3)), float).round(4))  # γ ≡ 1: CE
    [0.1698 0.6803 0.0949 0.4644]
  """
  logits, labels, in_range = check_logits_and_labels(logits, labels, where)
  num_classes = logits.shape[1]
  gamma = checks.check_class_vector(gamma, num_classes, "gamma")
  # γ_y is the temperature of `label_log_softmax`, which holds it constant (stop-gradient).
  loss = -label_log_softmax(logits, checks.index_labels(labels, in_range),
                            temperature=checks.take_class_values(gamma, labels, in_range),
                            flag_non_finite=True)
  return finish_per_example(loss, labels, in_range, where, None, num_classes)
