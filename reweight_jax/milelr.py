r"""MiLeLR: the Mittag-Leffler learning-rate schedule of the reweighting's released recipe.

The learning-rate schedule of the released code of Wang et al., ICML 2026, arXiv 2605.10047
(`tongzixin716716/Inverse-Loss-Reweighting`). With training counts :math:`n_c`,
:math:`p_c = n_c / N`, the normalised entropy :math:`H = -\sum_c p_c \log p_c / \log K` sets the
order :math:`a = 0.25 + 0.75\, H` (a = 1 for balanced counts). With
:math:`S_e = \lceil N / B \rceil` steps per epoch, :math:`U = 10\, S_e` warm-up steps,
:math:`T = 200\, S_e - U`, :math:`S = 160\, S_e - U` (the reweighting's switch) and ε = 1e-6,
update k (0-based) uses base·f(k), with t = k − U:

.. math::

    f(k) =
    \begin{cases}
      (k + 1) / U & k < U, \\
      E_a\bigl(-(1 - \epsilon)\, t / S\bigr) & k \ge U,\ t < S, \\
      1 / \bigl(z_2\, \Gamma(1 - a)\bigr) & t \ge S,
    \end{cases}
    \qquad
    \begin{aligned}
      s_2 &= \min\bigl((t - S) / (T - S),\ 1 - \epsilon\bigr), \\
      z_2 &= 1 + s_2 / (1 - s_2 + \epsilon),
    \end{aligned}

and with no switch (S ≤ 0 or S ≥ T) the same warm-up, then

.. math::

    f(k) = E_a\bigl(-s / (1 - s)\bigr), \qquad s = \min(t / T,\ 1 - \epsilon),

with the Mittag-Leffler function as the released code evaluates it (`mittag_leffler_neg`). The
schedule is a pure function of the step (an `optax.Schedule`, jittable). The jump of f at the switch
(:math:`E_a(-1) \to 1 / \Gamma(1 - a)`) is the released recipe's and kept. a = 1 puts Γ(1 − a) at
its pole: the switch branch would be f ≡ 0, so a schedule with a switch refuses a = 1 (balanced
counts); without a switch the asymptotic term uses 1/Γ(0) = 0 (the reciprocal Gamma function is
entire).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_counts

SERIES_TERMS = 32


def reciprocal_gamma(x: float) -> float:
  """1/Γ(x) in float64, 0 at the poles x = 0, −1, −2, … (the entire function's value)."""
  if x <= 0 and float(x).is_integer():
    return 0.0
  return 1.0 / math.gamma(x)


def mittag_leffler_order(class_counts: ArrayLike) -> float:
  r"""The order a of MiLeLR's Mittag-Leffler function, from the entropy H of the class counts:

  .. math::

      a = 0.25 + 0.75\, H, \qquad H = -\sum_c p_c \log p_c \,/\, \log K, \qquad p_c = n_c / N

  (classes with n_c = 0 add 0; K = 1 gives H = 1).

  The order of MiLeLR (the released code of Wang et al., ICML 2026, arXiv 2605.10047).

  K = 1: a = 1, as for balanced counts.

  Args:
    class_counts: [K] training-set class counts n_c.

  Returns:
    Python float a in [0.25, 1]; exactly 1 for balanced counts.

  Raises:
    ValueError: counts not rank 1, (eagerly) negative, or summing to 0.

  Examples:
    >>> import reweight_jax
    >>> print(reweight_jax.mittag_leffler_order([5000, 5000]))
    1.0
    >>> print(round(reweight_jax.mittag_leffler_order([5000, 50]), 4))
    0.3101
  """
  counts = np.asarray(check_counts(class_counts, "class_counts"), np.float64)
  if counts.sum() <= 0:
    raise ValueError("class_counts: expected at least one training example.")
  p = counts / counts.sum()
  if counts.size == 1:
    return 1.0
  entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)) / math.log(counts.size)
  # Balanced counts give H = 1 up to rounding: make it exactly 1 (the pole test below needs it).
  return 1.0 if entropy > 1.0 - 1e-12 else float(0.25 + 0.75 * entropy)


def mittag_leffler_neg(z: ArrayLike, a: float, below_one: ArrayLike | None = None) -> jax.Array:
  r"""E_a(−z) for z ≥ 0 as the released code evaluates it:

  .. math::

      E_a(-z) =
      \begin{cases}
        \max\Bigl(0,\ \sum_{k=0}^{31} \dfrac{(-z)^k}{\Gamma(a k + 1)}\Bigr) & z < 1, \\
        \max\Bigl(0,\ \dfrac{1}{z\, \Gamma(1 - a)}\Bigr)
          & z \ge 1 \quad \text{(the leading asymptotic term only).}
      \end{cases}

  `a` is a Python float in (0, 1]; the coefficients 1/Γ(a·k + 1) are float64 constants.
  `below_one` optionally gives the branch (z < 1) computed exactly by the caller: the coded function
  jumps at z = 1, so float32 rounding of z must not pick the side. MiLeLR's decay (the released
  code of Wang et al., ICML 2026, arXiv 2605.10047).

  Args:
    z: float array of z ≥ 0.
    a: the order, a Python float in (0, 1].
    below_one: optional bool array like z, the branch z < 1.

  Returns:
    float32 array like z.

  Raises:
    ValueError: a outside (0, 1].

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.mittag_leffler_neg(jnp.array([0.0, 0.5]), 1.0), float).round(4))  # a = 1: e^(−z)
    [1.     0.6065]
    >>> print(np.asarray(jnp.exp(-0.5), float).round(4))
    0.6065
  """
  if not 0 < a <= 1:
    raise ValueError(f"a: expected an order in (0, 1], got {a}.")
  coefficients = [reciprocal_gamma(a * k + 1.0) * (-1.0) ** k for k in range(SERIES_TERMS)]
  z = jnp.asarray(z, jnp.float32)
  small = jnp.minimum(z, 1.0)  # the series branch is only read where z < 1
  series = jnp.polyval(jnp.asarray(coefficients[::-1], jnp.float32), small)
  asymptotic = reciprocal_gamma(1.0 - a) / jnp.maximum(z, 1.0)
  below_one = z < 1.0 if below_one is None else below_one
  return jnp.maximum(0.0, jnp.where(below_one, series, asymptotic))


def milelr_schedule(base_learning_rate: float, class_counts: ArrayLike, batch_size: int, *,
                    num_epochs: int = 200, warmup_epochs: int = 10, switch_epoch: int | None = 160,
                    eps: float = 1e-6, steps_per_epoch: int | None = None) -> optax.Schedule:
  """The MiLeLR schedule (see the module docstring) as an `optax.Schedule`: step → learning rate.

  The schedule of the released code of Wang et al., ICML 2026, arXiv 2605.10047 (their CIFAR-LT
  recipe: base 0.3 / 0.35, warm-up 10 epochs, switch at 160 of 200; the authors' README points to
  Appendix F of the paper for the hyper-parameters).

  K = 1: a = 1, as for balanced counts (a `ValueError` with a switch epoch).

  Args:
    base_learning_rate: the base rate (0.3 for CIFAR-10-LT, 0.35 for CIFAR-100-LT in the recipe).
    class_counts: [K] training-set counts n_c (they set the order a and N).
    batch_size: B (S_e = ⌈N/B⌉ steps per epoch).
    num_epochs: E, 200 in the recipe (T above).
    warmup_epochs: 10 in the recipe (U above).
    switch_epoch: 160 in the recipe (S above); None is the no-switch branch.
    eps: ε.
    steps_per_epoch: S_e, the updates of one epoch; default ⌈N/B⌉ as in the reference (which keeps
      the last partial batch). A trainer that drops it (⌊N/B⌋ updates) passes its own, so that the
      warm-up, the switch and the end fall on its epoch boundaries.

  Returns:
    A jittable `optax.Schedule`: int step → float32 learning rate.

  Raises:
    ValueError: a = 1 (balanced counts) when the schedule has a switch (Γ(1 − a) is at its pole and
      every step after the switch would have rate 0), no step after the warm-up, a bad
      `steps_per_epoch`, or counts that are not valid (`mittag_leffler_order`).

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> schedule = reweight_jax.milelr_schedule(0.3, [5000, 500, 50], batch_size=128)
    >>> print([round(float(schedule(k)), 4) for k in (0, 439, 440, 7039, 7040, 8799)])
    [0.0007, 0.3, 0.3, 0.1287, 0.1722, 0.0001]
  """
  a = mittag_leffler_order(class_counts)
  num_examples = float(np.sum(np.asarray(class_counts, np.float64)))
  if steps_per_epoch is None:
    steps_per_epoch = math.ceil(num_examples / batch_size)
  elif isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
    raise ValueError(f"steps_per_epoch: expected a positive int, got {steps_per_epoch!r}.")
  warmup = warmup_epochs * steps_per_epoch
  total = num_epochs * steps_per_epoch - warmup
  switch = None if switch_epoch is None else switch_epoch * steps_per_epoch - warmup
  if switch is not None and not 0 < switch < total:
    switch = None  # outside (0, T): no switch
  if switch is not None and a >= 1.0:
    raise ValueError("class_counts: balanced counts give the Mittag-Leffler order a = 1, a pole of "
                     "Γ(1 − a) after the switch (rate 0); use switch_epoch=None or another schedule.")
  if total <= 0:
    raise ValueError(f"num_epochs: {num_epochs} leaves no step after {warmup_epochs} warm-up epochs.")

  def schedule(count):
    count = jnp.asarray(count)
    k = count.astype(jnp.float32)
    t = k - warmup
    warm = (k + 1.0) / max(warmup, 1)
    # T − t, the updates left, subtracted before rounding: 1 − s in float32 would cancel near the
    # end (relative error ≈ ulp·(T − S)/(T − t): 4e-3 on the last update for 2,816 steps per epoch).
    steps_left = ((warmup + total) - count).astype(jnp.float32)
    if switch is not None:
      before = mittag_leffler_neg((1.0 - eps) * jnp.maximum(t, 0.0) / switch, a)
      # 1 − s₂ = max((T − t)/(T − S), ε), and 1/(z₂·Γ(1 − a)) = (1 − s₂ + ε)/((1 + ε)·Γ(1 − a)).
      rest = jnp.maximum(steps_left / (total - switch), eps)
      after = reciprocal_gamma(1.0 - a) * (rest + eps) / (1.0 + eps)
      decayed = jnp.where(t < switch, before, after)
    else:
      s = jnp.minimum(jnp.maximum(t, 0.0) / total, 1.0 - eps)
      rest = jnp.maximum(steps_left / total, eps)  # 1 − s
      # z = s/(1 − s) < 1 ⟺ s < ½ ⟺ 2t < T: decided on the integer step, not on rounded z.
      decayed = mittag_leffler_neg(s / rest, a, below_one=2.0 * t < total)
    return base_learning_rate * jnp.where(k < warmup, warm, decayed)

  return schedule
