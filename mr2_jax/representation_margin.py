"""MR2 representation margin ℓ_s̄ (Zhu et al., ICLR 2026, arXiv 2602.00205:
the representation margin); its exact forms and their choice are in
`mr2_jax.representation_margin_forms`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_jax import class_stats as class_stats_lib
from mr2_jax.class_stats import ClassStats
from mr2_jax.representation_margin_dense import dense_batch_order
from mr2_jax.representation_margin_forms import TILED_MIN_WORK
from mr2_jax.representation_margin_forms import _Band  # noqa: F401  (tests read rm._Band)
from mr2_jax.representation_margin_forms import _Branch  # noqa: F401  (tests read rm._Branch)
from mr2_jax.representation_margin_forms import _branches
from mr2_jax.representation_margin_forms import _choose
from mr2_jax.representation_margin_forms import _switch
from mr2_reweight_core import checks
from mr2_reweight_core import class_order as class_order_lib
from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh

__all__ = ["mean_class_deviation", "representation_margin_loss"]
# TILED_MIN_WORK is read by `_branches` in `representation_margin_forms`: patch it there.


def mean_class_deviation(stats: ClassStats) -> jax.Array:
  r"""The mean within-class deviation s̄: the mean of V_k over the seen classes (0 if none is seen).

  .. math::

      \bar s = \operatorname*{mean}_{k \text{ seen}} V_k

  Zhu et al., ICLR 2026, arXiv 2602.00205: s̄, half the expected within-class pair distance of the
  representation margin.

  K = 1: the one class's V (0 before it is seen).

  Args:
    stats: `ClassStats` with K classes.

  Returns:
    float32 scalar s̄, a constant for back-propagation (stop-gradient).

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(3), features, labels)
    >>> print(mr2_jax.mean_class_deviation(stats))  # (1 + 0) / 2 seen classes
    0.5
  """
  stats = jax.lax.stop_gradient(class_stats_lib.check_class_stats(stats))
  num_seen = jnp.sum(stats.seen)
  total = jnp.sum(jnp.where(stats.seen, stats.mean_sq_deviation, 0.0))
  return total / jnp.maximum(num_seen, 1).astype(total.dtype)


def representation_margin_loss(features: ArrayLike, labels: ArrayLike, s_bar: ArrayLike, *,
                               temperature: ArrayLike = 1.0, axis_name: str | None = None,
                               where: ArrayLike | None = None, num_classes: int | None = None
                               ) -> jax.Array:
  r"""Per-anchor representation margin.

  Zhu et al., ICLR 2026, arXiv 2602.00205, the representation margin :math:`\ell_{\bar s}`:

  .. math::

      \ell_{\bar s}(x_i) = \log \Bigl(1 + \sum_{j \ne i,\, y_j = y_i}
        \exp\bigl((\lVert \phi_i - \phi_j \rVert_2^2 - 2 \bar s) / \tau\bigr)\Bigr)

  Positives are the other examples of the anchor's class in the (global) batch; an anchor with no
  positive gives 0. Computed as a log-sum-exp that includes the implicit 0 term, so neither the value
  nor the gradient overflows for large feature norms. In the tiled and dense forms distances are
  taken between features centred on a (stop-gradient) reference row of their class, its first row in
  class-sorted order: pairs are same-class, so the value is unchanged, and the Gram-matrix form
  :math:`\lVert u \rVert^2 + \lVert v \rVert^2 - 2 \langle u, v \rangle` does not lose precision
  to large norms (the band form takes row differences). φ is not detached.

  B = 0: an empty [0]. K = 1: every other real row is a positive of each anchor.

  Args:
    features: float [B, d] features φ (local batch).
    labels: int [B] labels in [0, K).
    s_bar: scalar s̄ (treated as a constant), e.g. `mean_class_deviation(stats)`.
    temperature: τ > 0 (1 in the paper form; 10·d in the released-code form); may be traced (a
      `jit` argument, a schedule, a `vmap`ped sweep): then computed as the τ = 1 form on φ/√τ and
      s̄/τ, equal up to rounding; a traced τ ≤ 0 gives NaN (and a `checkify` error inside
      `traced_checks()`). τ is a constant for back-propagation (no gradient flows to it).
    axis_name: data-parallel axis; positives come from the features all-gathered over it (gradients
      flow back to the device that owns each feature). The losses are the local anchors', whatever
      `check_vma`. Without it, `jax.jit` over features laid out with `NamedSharding` gathers the
      global batch once and returns the losses laid out like the rows.
    where: optional bool [B]; masked rows are neither anchors (loss 0) nor positives.
    num_classes: K, to range-check labels against [0, K); when None, labels need only be ≥ 0
      (positives are matched by label equality, so K is not otherwise needed).

  Cost: positives are same-class pairs, so the global batch is sorted by class. When no class has
  more than 5 rows (K ≫ B: ImageNet-size label sets) each row meets only the 4 rows after and before
  it in sorted order (`_Band`: the same-class pairs are listed and their distances taken from
  the two rows' difference). Larger
  classes are computed in tiles of T rows against the tile before, the tile itself and the tile
  after (2·T·R·d multiply-adds; the hand-written gradient 3·T·R·d and no recomputed forward pass),
  with T the smallest of 8, 16, … that covers the largest class of the batch (largest count − 1
  ≤ T). A row whose class has no other row in the batch has no positive (loss 0, gradient 0): such
  rows are sorted last and only the first R of P/8, P/4, P/2 or P global rows that hold every row
  with a positive are read (the band or tiles of 8 only below P; see `_branches`) — when K ≫ B
  most rows are such singletons.
  When no tile is smaller than a quarter of the local batch, or the dense local-anchors ×
  global-rows product (B·B_global·d) is below `TILED_MIN_WORK`, the dense product is used. All are
  exact; the choice is made at run time (`lax.switch`) from the batch's class counts. Below
  `TILED_MIN_WORK` on one device (no `axis_name`, rows not split) the dense form is the only one,
  and it runs in batch order, without the sort (`representation_margin_dense`).

  Returns:
    float [B] per-anchor losses (the caller reduces them).

  Raises:
    ValueError: `temperature` ≤ 0, features not [B, d], labels not [B], `s_bar` not a scalar, a
      `where` of another shape, or (eagerly, when `num_classes` is given) a label outside [0, K).
    TypeError: non-floating features or non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> loss = mr2_jax.representation_margin_loss(features, labels, s_bar=0.5)
    >>> print(np.asarray(loss, float).round(4))  # class 0's pair is 4 apart (> 2·s̄), class 1's pair 0
    [3.0486 3.0486 0.3133 0.3133]
  """
  features = checks.check_floating(features, 2, "features")
  temperature_checked = checks.check_hyperparameter(
      temperature, "temperature", 0.0, low_closed=False, what="a temperature τ")
  if num_classes is None:
    num_classes = int(jnp.iinfo(jnp.int32).max)
  features, labels, valid = class_stats_lib.check_stats_inputs(features, labels, num_classes, where)
  rows = class_stats_lib.BatchRows(features, labels, checks.check_where(where, labels.shape[0]),
                                   valid, valid)
  return _representation_margin(rows, s_bar, temperature_checked, axis_name)


def representation_margin_rows(rows: class_stats_lib.BatchRows, s_bar: ArrayLike, *,
                               temperature: ArrayLike, axis_name: str | None) -> jax.Array:
  """`representation_margin_loss` of a batch checked and masked by `class_stats.batch_rows`: its
  valid rows are the anchors and positives, a real row that is not valid gives NaN (`mr2_terms`,
  whose statistics read the same mask: one class order for both)."""
  return _representation_margin(rows, s_bar, checks.check_hyperparameter(
      temperature, "temperature", 0.0, low_closed=False, what="a temperature τ"), axis_name)


def _representation_margin(rows, s_bar, temperature_checked, axis_name):
  (temperature, temperature_ok), (features, labels, real, labelled, valid) = (
      temperature_checked, rows)
  s_bar = jnp.asarray(s_bar, features.dtype)
  if s_bar.ndim != 0:
    raise ValueError(f"s_bar: expected a scalar, got shape {s_bar.shape}.")
  s_bar = jax.lax.stop_gradient(s_bar)
  if checks.is_concrete(temperature):
    static_temperature = float(np.asarray(temperature))
  else:
    # A traced τ (a `jit` argument, a schedule, a sweep): (‖φ_i − φ_j‖² − 2s̄)/τ is the τ = 1 form on
    # φ/√τ and s̄/τ (the gradient reaches φ through the scaling), so the branches stay static. τ is
    # a constant for back-propagation, as s̄ is (and as a Python τ is).
    scale = jax.lax.stop_gradient(jax.lax.rsqrt(jnp.asarray(temperature, features.dtype)))
    features, s_bar, static_temperature = features * scale, s_bar * jnp.square(scale), 1.0

  batch = labels.shape[0]
  # Positives come from the global batch. Only this all-gather crosses devices: the reference rows
  # used for centring are read here from the gathered rows (no psum), and gradients flow back
  # through the gather to the device that owns each row.
  (all_features, all_labels, all_labelled, all_valid), anchor_offset = class_sums.global_batch(
      axis_name, features, labels, labelled, valid)
  if all_features.shape[0] == 0:  # an empty global batch: no anchor, no pair (a static shape)
    return jnp.zeros((batch,), jnp.promote_types(features.dtype, jnp.float32))
  branches = _branches(all_features.shape[0], batch, all_features.shape[1], static_temperature)
  if len(branches) == 1 and axis_name is None and not explicit_mesh.rows_split(features):
    # The dense form alone, on one device's whole batch: in batch order, no sort.
    loss = dense_batch_order(features, labels, valid, s_bar, static_temperature)
    return _finish(loss, real, valid, temperature_ok)
  # Sorted by the labels alone (`class_stats.BatchRows.labelled`), as the statistics sort them.
  classes, largest = class_order_lib.class_order(
      all_labels, all_valid, sorted_by=None if labelled is valid else all_labelled)
  anchor_positions = jax.lax.dynamic_slice_in_dim(classes.inverse, anchor_offset, batch)
  # Padded to a multiple of the largest tile: the extra sorted positions match nothing.
  order = class_order_lib.padded(classes, max(b.rows for b in branches))
  index = _choose(branches, classes.active, largest, class_order_lib.pair_count(classes))
  # Annotated: type checkers cannot infer a custom_vjp's result through functools.partial.
  loss: jax.Array = _switch(branches, index, all_features, order, s_bar, anchor_positions)
  # Over Explicit mesh axes the global batch is replicated (`global_batch`): each device computed
  # every anchor's loss and keeps its own rows'.
  return _finish(explicit_mesh.laid_out_like(loss, labels), real, valid, temperature_ok)


def _finish(loss, real, valid, temperature_ok):
  # A real row left out (an out-of-range label, possible only under tracing; in `mr2_terms` a
  # non-finite feature too) gives NaN, never a silently dropped anchor.
  loss = jnp.where(valid, loss, jnp.where(real, jnp.nan, 0.0))
  if temperature_ok is not True:  # a traced τ ≤ 0: NaN, never a silently flipped margin
    loss = jnp.where(temperature_ok, loss, jnp.nan)
  return loss
