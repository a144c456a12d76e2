"""The whole MR2 objective in one call (Zhu et al., ICLR 2026, arXiv 2602.00205)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_jax import class_stats as class_stats_lib
from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_jax import margins
from mr2_jax import representation_margin as rep_margin
from mr2_reweight_core import checks
from mr2_jax.class_stats import ClassStats

FORMS = ("paper", "released")


class MR2Margins(NamedTuple):
  r"""What `mr2_terms` read from the updated statistics (Zhu et al., ICLR 2026, arXiv 2602.00205),
  global-batch values, the same on every device under `axis_name`.

  Attributes:
    gamma: float32 [K], γ = ``class_margins(new_stats, c̄)`` (:math:`\gamma \equiv \bar c` under
      `uniform_margin`).
    s_bar: float32 scalar, :math:`\bar s = \operatorname{mean}_{k \text{ seen}} V_k`.
  """
  gamma: jax.Array
  s_bar: jax.Array


class MR2Aux(NamedTuple):
  r"""Diagnostics of one `mr2_loss` step (Zhu et al., ICLR 2026, arXiv 2602.00205), global-batch
  values, the same on every device under `axis_name`, all constants for back-propagation.

  Attributes:
    gamma: float32 [K], the class margins γ the step used.
    s_bar: float32 scalar, s̄.
    margin_ce: scalar, the mean over the valid examples of :math:`\ell_{\gamma,\mathrm{ce}}`.
    representation_margin: scalar, the mean over the valid examples of the representation-margin
      term as weighted in the loss (the paper form: :math:`\ell_{\bar s}`; the released form: its
      per-class weighting).
  """
  gamma: jax.Array
  s_bar: jax.Array
  margin_ce: jax.Array
  representation_margin: jax.Array


def form_defaults(form: str, feature_dim: int, *, p: float | None = None,
                  temperature: float | None = None) -> tuple[float, float]:
  """(p, τ) of an MR2 form, explicit values kept: 'paper' p = 2, τ = 1; 'released' p = 5, τ = 10·d.

  Zhu et al., ICLR 2026, arXiv 2602.00205 (the paper's form) and the authors' released code. The one
  place these defaults live (`mr2_loss` and any combination built on `mr2_terms` read them here).
  """
  if form not in FORMS:
    raise ValueError(f"form: expected one of {FORMS}, got {form!r}.")
  if p is None:
    p = 2.0 if form == "paper" else 5.0
  if temperature is None:
    temperature = 1.0 if form == "paper" else 10.0 * feature_dim
  return p, temperature


def _global_sum(x: ArrayLike, axis_name: str | None) -> jax.Array:
  total = jnp.sum(x)
  return total if axis_name is None else jax.lax.psum(total, axis_name)


def mr2_terms(logits: ArrayLike, features: ArrayLike, labels: ArrayLike, stats: ClassStats, *,
              lam: ArrayLike = 0.1, c_bar: ArrayLike = 1.0, decay: ArrayLike = 0.9, p: float = 2.0,
              temperature: float = 1.0, uniform_margin: bool = False,
              stats_reduction: str = "exact", axis_name: str | None = None,
              where: ArrayLike | None = None
              ) -> tuple[jax.Array, jax.Array, ClassStats, MR2Margins]:
  r"""Per-example MR2 terms, before any reduction.

  Zhu et al., ICLR 2026, arXiv 2602.00205: the logit margin and the representation margin.

  The class statistics are first updated with this (global) batch, then
  γ = ``class_margins(stats, c̄)`` and :math:`\bar s = \operatorname{mean}_k V_k` are read from the
  updated statistics (both constants for back-propagation), and

  .. math::

      \begin{aligned}
        \mathrm{margin\_ce}_i &= \ell_{\gamma,\mathrm{ce}}(x_i, y_i)
          = -\log \operatorname{softmax}(z_i / \gamma_{y_i})_{y_i}, \\
        \mathrm{representation}_i &= \ell_{\bar s}(x_i),
      \end{aligned}

  both [B], with the positives of :math:`\ell_{\bar s}` from the global batch (representation is 0
  when λ = 0).

  Use it to combine MR2 with a per-example reweighting (e.g. `reweight_jax.inverse_reweighted_loss`
  on :math:`\mathrm{margin\_ce} + \lambda \cdot \mathrm{representation}`); `mr2_loss` reduces the
  same terms.

  B = 0: both terms are [0] and the statistics unchanged. K = 1: γ = (c̄,) and `margin_ce` is 0 on
  every row; `representation` is as for any K.

  Args:
    logits: float [B, K].
    features: float [B, d] penultimate features (not detached).
    labels: int [B] in [0, K).
    stats: `ClassStats` with K classes.
    lam: λ ≥ 0; 0 skips ℓ_s̄ (returned as zeros, nothing gathered).
    c_bar: mean margin c̄ > 0.
    decay: EMA decay of the statistics, in [0, 1).
    p: norm order of the statistics (explicit here: `form_defaults` gives a form's).
    temperature: τ > 0 of ℓ_s̄.
    uniform_margin: γ_k ≡ c̄ (the ℓ_s̄-only ablation; statistics still tracked).
    stats_reduction: 'exact' or 'per_device' (see `update_class_stats`).
    axis_name: data-parallel axis name, or None.
    where: optional bool [B] mask of real (non-padding) examples.

  Returns:
    (margin_ce [B], representation [B], new_stats, `MR2Margins` (γ [K], s̄)); padding rows give 0
    in both terms. A real row with a label outside [0, K) (possible only traced) or a non-finite
    feature is left out of the statistics and of ℓ_s̄ (no anchor, no positive) and gives NaN.

  Raises:
    ValueError: `stats` with another K than the logits, `p` < 1, a negative Python `lam`, shapes
      that do not match, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits or features, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5], [0.0, 2.0, 0.0]])
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> margin_ce, representation, stats, aux = mr2_jax.mr2_terms(
    ...     logits, features, labels, mr2_jax.init_class_stats(3))
    >>> print(margin_ce.shape, representation.shape, np.asarray(aux.gamma, float).round(3))
    (4,) (4,) [1.037 0.963 1.   ]
  """
  margin_ce, representation, new_stats, margins_read, _ = _terms(
      logits, features, labels, stats, lam=lam, c_bar=c_bar, decay=decay, p=p,
      temperature=temperature, uniform_margin=uniform_margin, stats_reduction=stats_reduction,
      axis_name=axis_name, where=where)
  return margin_ce, representation, new_stats, margins_read


def _terms(logits, features, labels, stats, *, lam, c_bar, decay, p, temperature, uniform_margin,
           stats_reduction, axis_name, where):
  """`mr2_terms`, and the batch's rows (`class_stats.BatchRows`): one row mask, computed once,
  for the statistics, ℓ_s̄ and `mr2_loss`'s checks."""
  logits = checks.check_floating(logits, 2, "logits")
  num_classes = logits.shape[1]
  class_stats_lib.check_class_stats(stats)
  if stats.num_classes != num_classes:
    raise ValueError(
        f"stats: has {stats.num_classes} classes but logits have {num_classes} columns.")
  features = checks.check_floating(features, 2, "features")
  split = axis_name is not None or explicit_mesh.rows_split(features)
  # One device or exact statistics of every row: the statistics find the non-finite feature rows
  # from their own moments (`update_class_stats_rows`), and return the mask every term reads.
  # Gathered rows (below) keep the up-front check: the mask of this device's rows is read locally.
  with_representation_margin = not (isinstance(lam, (int, float)) and lam == 0)
  gather = split and stats_reduction == "exact" and with_representation_margin
  deferred = not gather and class_stats_lib.defer_finite_check(features)
  rows = class_stats_lib.batch_rows(features, labels, num_classes, where, defer_finite=deferred)
  features, labels = rows.features, rows.labels
  checks.check_batch_dim(logits, labels.shape[0], "logits")

  if not p >= 1:
    raise ValueError(f"p: expected a norm order p >= 1, got {p}.")
  checks.check_hyperparameter(lam, "lam", 0.0, what="a weight λ")
  # λ = 0 (γ-only, linear probes): ℓ_s̄ is not computed at all, and nothing is gathered.
  if gather:
    # ℓ_s̄ all-gathers the features anyway (under `axis_name`, or rows split over Explicit mesh
    # axes); the exact global statistics are then computed from the gathered rows on every device,
    # which saves the min(K, B_global)·d all-reduce (XLA merges the two identical gathers). The
    # result is the single-device computation on the global batch, the same on every device (typed
    # so under shard_map's check_vma: `replicated_batch`).
    gathered, _ = class_sums.replicated_batch(axis_name, *rows)
    new_stats, _ = class_stats_lib.update_class_stats_rows(
        stats, class_stats_lib.BatchRows(*gathered), decay=decay, p=p, axis_name=None,
        reduction="exact")
  else:
    new_stats, valid = class_stats_lib.update_class_stats_rows(
        stats, rows, decay=decay, p=p, axis_name=axis_name, reduction=stats_reduction,
        finite_checked=not deferred)
    rows = rows._replace(valid=valid)
  gamma = margins.class_margins(new_stats, c_bar)
  if uniform_margin:
    gamma = jnp.full_like(gamma, c_bar)
    if not checks.is_concrete(c_bar):  # a traced c̄ ≤ 0 is NaN here too (`class_margins`)
      gamma = jnp.where(jnp.asarray(c_bar) > 0, gamma, jnp.nan)
  s_bar = rep_margin.mean_class_deviation(new_stats)

  # Padding rows give 0 whatever their labels; their logits are replaced before the softmax, so
  # they send no NaN into the gradient.
  margin_ce = margins.margin_cross_entropy(logits, labels, gamma, where=where)
  if with_representation_margin:
    representation = rep_margin.representation_margin_rows(
        rows, s_bar, temperature=temperature, axis_name=axis_name)
  else:
    representation = jnp.zeros(labels.shape, features.dtype)
  return margin_ce, representation, new_stats, MR2Margins(gamma=gamma, s_bar=s_bar), rows


def mr2_loss(logits: ArrayLike, features: ArrayLike, labels: ArrayLike, stats: ClassStats, *,
             lam: ArrayLike = 0.1, c_bar: ArrayLike = 1.0, decay: ArrayLike = 0.9,
             form: str = "paper",
             uniform_margin: bool = False, stats_reduction: str = "exact",
             p: float | None = None, temperature: float | None = None,
             axis_name: str | None = None, where: ArrayLike | None = None
             ) -> tuple[jax.Array, ClassStats, MR2Aux]:
  r"""MR2 objective: statistics update, margins, and both loss terms.

  Zhu et al., ICLR 2026, arXiv 2602.00205: the training objective; the released form is the
  authors' released code.

  The class statistics are first updated with this (global) batch, then
  γ = ``class_margins(stats, c̄)`` and :math:`\bar s = \operatorname{mean}_k V_k` are read from the
  updated statistics (both constants for back-propagation).

  Paper form (`form='paper'`; p = 2, τ = 1):

  .. math::

      L = \frac{1}{B} \sum_i \bigl[ \ell_{\gamma,\mathrm{ce}}(x_i, y_i)
        + \lambda \, \ell_{\bar s}(x_i) \bigr]

  Released-code form (`form='released'`; p = 5, τ = 10·d):

  .. math::

      L = \frac{1}{B} \sum_i \ell_{\gamma,\mathrm{ce}}(x_i, y_i)
        + \lambda \, \frac{d}{10 K} \sum_{c \text{ present}} \frac{1}{n_c}
          \sum_{i:\, y_i = c} \ell_{\bar s}(x_i)

  `p` and `temperature` override the form's defaults. B and n_c count valid (`where`) examples of
  the global batch.

  Data parallel: with `axis_name`, statistics, γ, s̄ and positives come from the global batch, and
  the returned loss is this device's share: `lax.pmean(loss, axis_name)` equals the single-device
  loss on the concatenated batch, and `lax.pmean` of the per-device gradients equals its gradient
  (`pmap`, `shard_map(..., check_vma=False)`). Under `jax.shard_map`'s default `check_vma=True` the
  loss is still this share and the new statistics and aux are typed replicated (`out_specs=P()`);
  take the gradient of `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself (the
  share's own gradient is N_devices times the global one). Without `axis_name`, `jax.jit` over a
  batch laid out with `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss
  is the global value, statistics and aux replicated.

  B = 0 (or every row padding): loss 0, the statistics unchanged (nothing seen or skipped), `aux`
  read from them. K = 1: γ = (c̄,) and the margin cross-entropy is 0, so the loss is λ times the
  representation-margin term.

  Args:
    logits: float [B, K].
    features: float [B, d] penultimate features (not detached: ℓ_s̄ trains the encoder).
    labels: int [B] in [0, K).
    stats: `ClassStats` with K classes.
    lam: λ, weight of the representation margin (0.1; 0 gives the γ-only ablation).
    c_bar: mean margin c̄.
    decay: EMA decay of the statistics.
    form: 'paper' or 'released'.
    uniform_margin: ablation: γ_k ≡ c̄ for every class instead of the statistics' margins (with
      c̄ = 1 and λ > 0 this is the ℓ_s̄-only ablation; the statistics are still tracked).
    stats_reduction: 'exact' or 'per_device' (cheaper across devices; see `update_class_stats`).
    p: norm order of the statistics (default 2 for 'paper', 5 for 'released').
    temperature: τ (default 1 for 'paper', 10·d for 'released').
    axis_name: data-parallel axis name, or None.
    where: optional bool [B] mask of real (non-padding) examples. A real row with a label outside
      [0, K) (possible only traced) or a non-finite logit or feature makes the loss and its
      gradient NaN; the statistics leave it out and count it in `new_stats.skipped_rows`
      (docs: "Failure modes").

  Returns:
    (loss, new_stats, aux): aux an `MR2Aux` (γ [K], s̄, and the two terms' global-batch means, the
    same on every device).

  Raises:
    ValueError: an unknown `form`, `stats` with another K than the logits, `p` < 1, a negative
      Python `lam`, shapes that do not match, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits or features, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import mr2_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5], [0.0, 2.0, 0.0]])
    >>> features = jnp.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> labels = jnp.array([0, 0, 1, 1])
    >>> stats = mr2_jax.init_class_stats(3)
    >>> loss, stats, aux = mr2_jax.mr2_loss(logits, features, labels, stats, lam=0.1)
    >>> print(f"{loss:.4f}", np.asarray(aux.gamma, float).round(3), f"{aux.s_bar:.2f}")
    0.6097 [1.037 0.963 1.   ] 0.50
    >>> print(stats.seen)
    [ True  True False]
  """
  logits = checks.check_floating(logits, 2, "logits")
  features = checks.check_floating(features, 2, "features")
  num_classes, dim = logits.shape[1], features.shape[1]
  p, temperature = form_defaults(form, dim, p=p, temperature=temperature)
  margin_ce, rep, new_stats, aux, rows = _terms(
      logits, features, labels, stats, lam=lam, c_bar=c_bar, decay=decay, p=p,
      temperature=temperature, uniform_margin=uniform_margin, stats_reduction=stats_reduction,
      axis_name=axis_name, where=where)
  labels, real = rows.labels, rows.real
  mask = real.astype(logits.dtype)
  num_valid = jnp.maximum(_global_sum(mask, axis_name), 1.0)
  # NaN losses of out-of-range labels propagate (mask is 1 there unless `where` excludes them).
  ce_sum = jnp.sum(jnp.where(real, margin_ce, 0.0))
  if form == "paper":
    rep_weight = mask
  else:
    per_anchor = 1.0 / jnp.maximum(
        class_sums.example_class_counts(labels, rows.valid, num_classes, axis_name=axis_name), 1.0)
    rep_weight = jnp.where(rows.valid, per_anchor, 0.0) * num_valid * dim / (10.0 * num_classes)
  rep_sum = jnp.sum(rep_weight * rep)

  share = class_sums.num_devices(axis_name) / num_valid
  loss = share * (ce_sum + lam * rep_sum)
  if not checks.is_concrete(lam):  # a traced λ < 0 (checked in `mr2_terms`): NaN, never used
    loss = jnp.where(jnp.asarray(lam) >= 0, loss, jnp.nan)
  # A real row with a label outside [0, K) or a non-finite logit or feature: the loss and its
  # gradient are NaN (the statistics and ℓ_s̄ left the row out, and the statistics counted it).
  # The margin cross-entropy is NaN on a row with a non-finite logit (`label_log_softmax`'s flag).
  clean = rows.valid & jnp.isfinite(margin_ce)
  if checks.traced_checks_enabled():  # the checkify check that names the logits
    checks.check_finite_rows(logits, real, "logits")
  loss = checks.poison_unless(loss, jnp.all(clean | ~real))
  return loss, new_stats, MR2Aux(
      gamma=aux.gamma, s_bar=aux.s_bar,
      margin_ce=jax.lax.stop_gradient(
          _global_sum(jnp.where(real, margin_ce, 0.0), axis_name) / num_valid),
      representation_margin=jax.lax.stop_gradient(
          _global_sum(rep_weight * rep, axis_name) / num_valid))
