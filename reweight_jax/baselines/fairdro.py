r"""FairDRO with classes as groups.

Jung et al., "Re-weighting Based Group Fairness Regularization via Classwise Robust Optimization",
ICLR 2023, arXiv 2303.00442; reference code `sangwon-jung94/FairDRO`, `trainer/fairdro.py`. One of
MR2's comparison methods (Zhu et al., ICLR 2026, arXiv 2602.00205).

The original is, per label, a χ²-DRO over sensitive groups; for class-wise disparity there is one
distribution q over the K classes. Per epoch:

  1. after epoch e the trainer runs a full pass over the training set and accumulates per-class loss
     sums and counts (exact under data parallelism: psum the sums and counts); the class losses are
     :math:`L_c = \mathrm{sums}_c / \mathrm{counts}_c`, `class_mean(sums, counts)` (or 1 − accuracy,
     the reference's `use-01loss`: `class_mean(counts − correct, counts)` from `per_class_correct`);
  2. `fairdro_best_response(L, rho, present=counts > 0)` is the closed-form q*;
  3. `fairdro_update(q, q*, e, E)` moves q part of the way towards q* (smoothed best response).

Every step's loss is `fairdro_loss` :math:`= \sum_c q_c g_c` with q constant (g_c the batch class
means, as in Group DRO; the code is Group DRO's `class_weighted_loss`). The state is q [K]
(`init_fairdro_q`) and the epoch counter, both carried by the trainer.

The q pass is the trainer's business. Reference quirk not reproduced: the reference runs it in train
mode (BatchNorm running averages updated) on augmented images; the default here is eval mode without
augmentation. `fairdro_wo_classwise.py` of the reference starts q at 1 and divides the loss by K·G;
here q starts uniform (1/K) and the loss is :math:`\sum_c q_c g_c`, not rescaled.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_class_mask
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import is_concrete
from reweight_jax.baselines.group_dro import ClassWeightedAux
from reweight_jax.baselines.group_dro import class_weighted_loss

FAIRDRO_SCHEDULES = ("linear", "cos")


def init_fairdro_q(num_classes: int) -> jax.Array:
  """q = 1/K for every class: FairDRO's q before the first best response (float32 [K]).

  Jung et al., ICLR 2023, arXiv 2303.00442 (q starts at the centre of the χ² ball).

  K = 1: (1,).

  Args:
    num_classes: K, a positive Python int.

  Returns:
    float32 [K], each 1/K.

  Raises:
    TypeError: `num_classes` is not an int.
    ValueError: `num_classes` < 1.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.init_fairdro_q(4))
    [0.25 0.25 0.25 0.25]
  """
  num_classes = check_num_classes(num_classes)
  return jnp.full((num_classes,), 1.0 / num_classes, jnp.float32)


def fairdro_best_response(class_losses: ArrayLike, rho: float = 0.5, *, clip: bool = False,
                          present: ArrayLike | None = None) -> jax.Array:
  r"""The closed-form worst-case q* over the χ² ball around uniform

  Jung et al., ICLR 2023, arXiv 2303.00442, with classes as groups:

  .. math::

      \max_q \sum_c q_c L_c \quad \text{s.t.} \quad
      \tfrac{1}{2} K' \sum_c (q_c - 1/K')^2 \le \rho, \quad \sum_c q_c = 1
      \qquad (q \ge 0 \text{ ignored}),

  .. math::

      q^*_c = \frac{1}{K'} + \sqrt{\frac{2\rho}{K'}}\,
        \frac{L_c - \bar L}{\lVert L - \bar L \rVert_2}, \qquad
      \bar L = \frac{1}{K'} \sum_c L_c

  over the K' classes with a loss (`present`). Hence :math:`\sum_c q^*_c = 1`,
  :math:`\lVert q^* - 1/K' \rVert_2 = \sqrt{2\rho/K'}`, and q* is uniform (1/K' on the present
  classes) when their losses are all equal (the :math:`\lVert L - \bar L \rVert = 0` branch: no
  division, no NaN, no NaN gradient). The closed form is discontinuous there: any spread, however
  small, gives a step of full length :math:`\sqrt{2\rho/K'}`.

  Negative weights: :math:`q^*_c < 0` exactly when
  :math:`(\bar L - L_c) / \lVert L - \bar L \rVert > 1 / \sqrt{2\rho K'}`, i.e. for classes much
  easier than average once ρ is large (with K = 100 from ρ ≈ 0.1); such a class's loss is then
  pushed *up*. The nonnegativity constraint is ignored by default; log `jnp.min(q)`.
  `clip=True` takes :math:`\max(q^*, 0)` and renormalises to sum 1 (then no longer on the sphere of
  radius :math:`\sqrt{2\rho/K'}`).

  Classes without a loss (design choice): a class with no training example (count 0) has no L_c. It
  is left out of L̄, of the norm and of K' (the problem is the same problem over the classes that
  exist), and gets q*_c = 0. Such a class never appears in a batch, so its g_c is always 0 and any
  weight it held would only shrink the loss; with q* = 0 the weights of the real classes still sum
  to 1. Keeping 1/K for it instead would put K − K' classes' worth of mass on nothing. If no class
  is present, q* is uniform over all K (nothing is known).

  K = 1: (1,).

  Args:
    class_losses: [K] per-class mean training losses L_c (float; computed in float32 or wider).
      Entries of absent classes are ignored and may be NaN (as `class_mean` gives them).
    rho: ball radius ρ > 0 (default 0.5; the reference's README uses 0.3–5 by data set).
    clip: clip negative weights at 0 and renormalise.
    present: optional bool [K], False for classes without training examples (e.g. `counts > 0`).
      Default: every class is present, and a NaN loss propagates to q* (a diverged run is not
      silently treated as missing classes).

  Returns:
    q* [K], float32 (or the wider dtype of `class_losses`).

  Raises:
    ValueError: ρ ≤ 0 (when concrete), losses not rank 1, `present` not [K].
    TypeError: non-floating losses, a non-boolean `present`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> q_star = reweight_jax.baselines.fairdro_best_response(jnp.array([0.5, 1.0, 1.5]), rho=0.1)
    >>> print(np.asarray(q_star, float).round(4), f"{q_star.sum():.4f}")
    [0.1508 0.3333 0.5159] 1.0000
  """
  class_losses = check_floating(class_losses, 1, "class_losses")
  num_classes = class_losses.shape[0]
  if is_concrete(rho) and not float(rho) > 0:
    raise ValueError(f"rho: expected a ball radius ρ > 0, got {rho}.")
  if present is None:
    present = jnp.ones((num_classes,), bool)
  else:
    present = check_class_mask(present, num_classes, "present")
  dtype = jnp.promote_types(class_losses.dtype, jnp.float32)
  losses = jnp.where(present, class_losses.astype(dtype), 0.0)
  num_present = jnp.sum(present).astype(dtype)
  safe_num_present = jnp.maximum(num_present, 1.0)
  deviation = jnp.where(present, losses - jnp.sum(losses) / safe_num_present, 0.0)
  # Recentre once more: the rounding of L̄ would otherwise leave Σ_c (L_c − L̄) ≠ 0, hence Σq* ≠ 1,
  # when the spread is as small as that rounding.
  deviation = jnp.where(present, deviation - jnp.sum(deviation) / safe_num_present, 0.0)
  constant = (jnp.max(jnp.where(present, losses, -jnp.inf))
              == jnp.min(jnp.where(present, losses, jnp.inf)))
  squared_norm = jnp.sum(deviation * deviation)
  has_direction = (squared_norm > 0) & ~constant
  norm = jnp.sqrt(jnp.where(has_direction, squared_norm, 1.0))
  direction = jnp.where(has_direction, deviation / norm, 0.0)
  radius = jnp.sqrt(2.0 * jnp.asarray(rho, dtype) / safe_num_present)
  q_star = jnp.where(present, 1.0 / safe_num_present + radius * direction, 0.0)
  # A NaN or infinite loss of a present class (a diverged run) makes all of q* NaN, never uniform.
  q_star = jnp.where(jnp.isnan(squared_norm), jnp.nan, q_star)
  if clip:
    q_star = jnp.maximum(q_star, 0.0)
    total = jnp.sum(q_star)  # ≥ 1 (the clipped entries were negative, Σq* was 1) unless K' = 0
    q_star = q_star / jnp.where(total > 0, total, 1.0)
  return jnp.where(num_present > 0, q_star, jnp.full((num_classes,), 1.0 / num_classes, dtype))


def fairdro_step_size(epoch: ArrayLike, num_epochs: int, schedule: str = "linear") -> jax.Array:
  r"""The smoothing step α_e of FairDRO's best response after epoch e of E
  (Jung et al., ICLR 2023, arXiv 2303.00442; the cos variant is the reference code's).

  .. math::

      \begin{aligned}
        \text{linear:} &\quad \alpha_e = 1 - e / E, \\
        \text{cos:} &\quad \alpha_e = \tfrac{1}{2} \bigl(1 + \cos(\pi e / E)\bigr).
      \end{aligned}

  Both start at 1 (e = 0: q jumps to q*) and reach 0 at e = E; ½ at e = E/2. The trainer passes the
  0-based index of the epoch just finished, e ∈ {0, …, E − 1}, so the last update still moves 1/E
  (linear) of the way; any e in [0, E] is accepted.

  Args:
    epoch: e, a scalar (Python number or array; may be traced).
    num_epochs: E, a positive Python int.
    schedule: "linear" or "cos".

  Returns:
    α_e, a float32 scalar.

  Raises:
    ValueError: `num_epochs` not a positive int, an unknown `schedule`, `epoch` not a scalar or
      (when concrete) outside [0, E].

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.fairdro_step_size(0, 10), reweight_jax.baselines.fairdro_step_size(5, 10))
    1.0 0.5
    >>> print(f"{reweight_jax.baselines.fairdro_step_size(5, 10, 'cos'):.4f}")
    0.5000
  """
  if (isinstance(num_epochs, bool) or not isinstance(num_epochs, (int, np.integer))
      or num_epochs < 1):
    raise ValueError(f"num_epochs: expected a positive Python int, got {num_epochs!r}.")
  if schedule not in FAIRDRO_SCHEDULES:
    raise ValueError(f"schedule: expected one of {FAIRDRO_SCHEDULES}, got {schedule!r}.")
  epoch = jnp.asarray(epoch)
  if epoch.ndim != 0:
    raise ValueError(f"epoch: expected a scalar, got shape {epoch.shape}.")
  if is_concrete(epoch) and not 0 <= float(epoch) <= num_epochs:
    raise ValueError(f"epoch: expected 0 ≤ e ≤ num_epochs = {num_epochs}, got {float(epoch)}.")
  fraction = epoch.astype(jnp.float32) / num_epochs
  if schedule == "linear":
    return 1.0 - fraction
  return 0.5 * (1.0 + jnp.cos(math.pi * fraction))


def fairdro_update(q: ArrayLike, q_star: ArrayLike, epoch: ArrayLike, num_epochs: int,
                   schedule: str = "linear") -> jax.Array:
  r"""Smoothed best response after epoch e of E:

  .. math::

      q \leftarrow q + \alpha_e (q^* - q)

  Jung et al., ICLR 2023, arXiv 2303.00442: the smoothed best response.

  α_e is `fairdro_step_size(epoch, num_epochs, schedule)`. q stays on :math:`\{\sum q = 1\}` when q
  and q* are (a convex combination, α_e ∈ [0, 1]); it stays nonnegative when q* is (e.g.
  `clip=True`).

  K = 1: (1,) when q and q* are.

  Args:
    q: [K] current weights (`init_fairdro_q` at the start).
    q_star: [K] this epoch's `fairdro_best_response`.
    epoch: e, the 0-based epoch just finished (as in `fairdro_step_size`).
    num_epochs: E, the number of training epochs.
    schedule: 'linear' or 'cos'.

  Returns:
    The new q [K], in q's dtype.

  Raises:
    ValueError: q not rank 1, q* not [K], or a bad epoch, E or schedule (`fairdro_step_size`).
    TypeError: non-floating q or q*.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> q = reweight_jax.baselines.init_fairdro_q(2)
    >>> print(reweight_jax.baselines.fairdro_update(q, jnp.array([0.9, 0.1]), epoch=5, num_epochs=10))
    [0.7 0.3]
  """
  q = check_floating(q, 1, "q")
  q_star = check_class_vector(q_star, q.shape[0], "q_star")
  step = fairdro_step_size(epoch, num_epochs, schedule)
  dtype = jnp.promote_types(q.dtype, jnp.float32)
  new_q = q.astype(dtype) + step.astype(dtype) * (q_star.astype(dtype) - q.astype(dtype))
  return new_q.astype(q.dtype)


def fairdro_loss(per_example_loss: ArrayLike, labels: ArrayLike, q: ArrayLike, *,
                 axis_name: str | None = None, where: ArrayLike | None = None
                 ) -> tuple[jax.Array, ClassWeightedAux]:
  r"""FairDRO's step loss Σ_c q_c g_c with q constant; returns `(loss, aux)`

  Jung et al., ICLR 2023, arXiv 2303.00442, with classes as groups:

  .. math::

      g_c = \frac{1}{n_c} \sum_{i:\, y_i = c} \ell_i, \qquad
      \mathrm{loss} = \sum_c q_c g_c, \qquad
      \frac{\partial\, \mathrm{loss}}{\partial \ell_i} = \frac{q_{y_i}}{n_{y_i}},

  with :math:`g_c = 0` for a class absent from the batch, as in Group DRO.

  q comes from the last `fairdro_update` and is fixed within the epoch; it may have negative entries
  (nonnegativity is ignored by default), which is why this is not Group DRO with η = 0 (that takes
  log q). This is `class_weighted_loss`: under `axis_name` g_c comes from the global batch and the
  returned loss is this device's share (`lax.pmean` of it, and of the gradients, is the global
  value). Under `jax.shard_map`'s default `check_vma=True` the loss is still this share and aux is
  typed replicated; take the gradient of `lax.pmean(loss, axis_name)`, which JAX sums over the
  devices itself (the share's own gradient is N_devices times the global one). Without `axis_name`,
  `jax.jit` over a batch laid out with `NamedSharding` (Explicit or Auto mesh axes) sees the global
  batch: the loss is the global value, aux replicated.

  B = 0 (or every row padding): loss 0, no class present. K = 1: q_0 times the mean loss of the real
  rows.

  Args:
    per_example_loss: [B] per-example losses ℓ_i (cross-entropy in the reference).
    labels: int [B] labels in [0, K), K = q.shape[0].
    q: [K] FairDRO weights.
    axis_name: data-parallel axis name or None.
    where: optional bool [B]; False marks padding, which counts nowhere.

  Returns:
    (loss, ClassWeightedAux(class_losses g [K], present [K], skipped_rows)); a real row with an
    out-of-range label or a non-finite loss is left out of g_c (counted in `aux.skipped_rows`) and
    makes the loss and its gradient NaN.

  Raises:
    ValueError: losses not [B] like the labels, q not rank 1, a `where` of another shape, or
      (eagerly) a real row's label outside [0, K).
    TypeError: non-floating losses or q, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> per_example, labels = jnp.array([0.2, 0.4, 1.5, 0.9]), jnp.array([0, 0, 1, 2])
    >>> loss, aux = reweight_jax.baselines.fairdro_loss(per_example, labels, jnp.array([0.2, 0.5, 0.3]))
    >>> print(f"{loss:.4f}")  # 0.2·0.3 + 0.5·1.5 + 0.3·0.9
    1.0800
  """
  return class_weighted_loss(per_example_loss, labels, q, axis_name=axis_name, where=where)
