r"""Neural Collapse metrics NC1–NC4 (and ρ), one-shot and streaming.

The standard definitions of Papyan, Han, Donoho, "Prevalence of neural collapse during the terminal
phase of deep learning training", PNAS 2020, arXiv 2008.08186, and Zhu et al., "A Geometric
Analysis of Neural Collapse with Unconstrained Features", NeurIPS 2021, arXiv 2105.02375, as Wang
et al. (ICML 2026, arXiv 2605.10047) report them. With features :math:`h_i`, class means
:math:`\mu_c` over the valid examples of class c, N valid examples, K' classes present
(:math:`n_c > 0`), :math:`\mu_G = \frac{1}{N} \sum_i h_i` the global sample mean, centred means
:math:`M = [\mu_c - \mu_G]` (stored here as a [K, d] matrix, row c is :math:`\mu_c - \mu_G`, i.e.
the papers' :math:`M^\top`) and classifier W [K, d]:

.. math::

    \begin{aligned}
      \Sigma_W &= \frac{1}{N} \sum_i (h_i - \mu_{y_i})(h_i - \mu_{y_i})^\top, \qquad
        \Sigma_B = \frac{1}{K'} \sum_c (\mu_c - \mu_G)(\mu_c - \mu_G)^\top, \\
      \mathrm{NC1} &= \frac{1}{K'} \operatorname{Tr}(\Sigma_W \Sigma_B^+), \\
      \mathrm{NC2} &= \Bigl\lVert \frac{G}{\lVert G \rVert_F}
        - \frac{I - \mathbf{1}\mathbf{1}^\top / K'}{\sqrt{K' - 1}} \Bigr\rVert_F
        \quad \text{for } G = M M^\top \text{ ('nc2') and } G = W W^\top
        \text{ ('nc2_classifier')}, \\
      \mathrm{NC3} &= \Bigl\lVert \frac{W}{\lVert W \rVert_F}
        - \frac{M}{\lVert M \rVert_F} \Bigr\rVert_F^2, \\
      \mathrm{NC4} &= \text{fraction of examples with }
        \operatorname*{argmax}_c (W h + b)_c \ne \operatorname*{argmin}_c \lVert h - \mu_c \rVert.
    \end{aligned}

Conventions where the papers are silent:

* μ_G is the global *sample* mean, as in Papyan et al. (`centring='sample'`, the default). On
  long-tailed data it is pulled towards the head classes, so an exact simplex ETF of the class means
  scores NC2 = 0 (and a classifier aligned with it NC3 = 0) only when the classes are balanced; with
  CIFAR-10-LT's counts at IF 100 the simplex scores NC2 ≈ 0.65 and the aligned classifier NC3 ≈ 0.15.
  `centring='class_balanced'` centres on the unweighted mean of the present classes' means,
  :math:`\mu_G = \frac{1}{K'} \sum_c \mu_c` (every class counts once, whatever its size): there the
  exact simplex scores 0 at any class counts, which is the reading wanted when the geometry under
  imbalance is the question (Thrampoulidis et al., "Imbalance Trouble: Revisiting Neural-Collapse
  Geometry", NeurIPS 2022, arXiv 2208.05512). NC4 and ρ do not depend on the centring.
* Classes with no example are left out of every metric (K' counts present classes; W's rows of absent
  classes are dropped from NC2/NC3 and they are never a nearest mean); NC1–NC3 are NaN when K' < 2.
  With every class present this is the plain definition over all K classes.
* :math:`\Sigma_B^+` is the pseudo-inverse of rank at most K' − 1
  (:math:`\sum_c n_c (\mu_c - \mu_G) = 0`, so :math:`\Sigma_B` never has more), also dropping
  singular directions of M below :math:`\max(K, d)\, \epsilon_\mathrm{f32}\, \sigma_\mathrm{max}`;
  NC1 is computed as :math:`\sum_j v_j^\top \Sigma_W v_j / \sigma_j^2` from the SVD
  :math:`M = U S V^\top`, which needs no d×d inverse.

Streaming (`NCAccumulator`): per-class counts and means and the within-class scatter matrix are
merged batch by batch with the parallel-variance update of Chan et al. (1979):

.. math::

    S \leftarrow S_a + S_b + \sum_c \Bigl(\frac{n_a n_b}{n_a + n_b}\Bigr)_c \delta_c \delta_c^\top,
    \qquad \delta_c = m_c^\mathrm{batch} - \mu_c^\text{so-far},

where :math:`S_b` is the scatter of the batch about its own class means; batch sums, counts and
scatter are psum-reduced over `axis_name` first. This is a sum of second moments that avoids the
float32 cancellation of :math:`\sum h h^\top - \sum_c n_c \mu_c \mu_c^\top` (features near collapse
have :math:`\Sigma_W \ll \lVert \mu_c \rVert^2`), and it equals the one-shot computation on the full
set up to float rounding; `nc_metrics` is exactly one update. NC4 needs the final class means, so it
takes a second pass over the data (`update_ncc`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_finite_rows
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import count_skipped
from mr2_reweight_core.metrics import rho


# Where the class means are centred (see the module docstring).
CENTRINGS = ("sample", "class_balanced")


class NCMetrics(NamedTuple):
  """NC1–NC4 and ρ (NaN where undefined: fewer than two classes, no NC4 pass, no losses)."""
  nc1: jax.Array
  nc2: jax.Array
  nc2_classifier: jax.Array
  nc3: jax.Array
  nc4: jax.Array
  rho: jax.Array


def _check_classifier(classifier: ArrayLike, num_classes: int, feature_dim: int,
                      bias: ArrayLike | None) -> tuple[jax.Array, jax.Array]:
  classifier = check_floating(classifier, 2, "classifier")
  if classifier.shape != (num_classes, feature_dim):
    raise ValueError(f"classifier: expected shape ({num_classes}, {feature_dim}) [K, d], got "
                     f"{classifier.shape}.")
  if bias is None:
    bias = jnp.zeros((num_classes,), classifier.dtype)
  bias = check_floating(bias, 1, "bias")
  if bias.shape != (num_classes,):
    raise ValueError(f"bias: expected shape ({num_classes},), got {bias.shape}.")
  return classifier.astype(jnp.float32), bias.astype(jnp.float32)


def _etf_distance(gram: jax.Array, present: jax.Array, num_present: jax.Array) -> jax.Array:
  """‖G/‖G‖_F − (I − 11ᵀ/K')/√(K'−1)‖_F over the present classes (rows/columns of absent ones 0)."""
  mask = present.astype(gram.dtype)
  target = (jnp.diag(mask) - jnp.outer(mask, mask) / num_present) / jnp.sqrt(num_present - 1)
  return jnp.linalg.norm(gram / jnp.linalg.norm(gram) - target)


class NCAccumulator(NamedTuple):
  r"""Streaming statistics for NC1–NC4 and ρ (a pytree: carry it through `jit`/`pmap` loops).

  Use: `acc = NCAccumulator.init(K, d)`; pass 1 `acc = acc.update(h, y, per_example_loss=ℓ)` over the
  data; optional pass 2 `acc = acc.update_ncc(h, W, bias=b)` over the same data for NC4; then
  `acc.finalize(W)`. Under `pmap` or `shard_map`, pass `axis_name`: every device then holds the
  same statistics (typed replicated under `shard_map`'s `check_vma=True`: `out_specs=P()`). Under
  `jax.jit` over a batch laid out with `NamedSharding`, pass no axis: the statistics are the global
  batch's, replicated.

  Attributes:
    counts: float32 [K], n_c.
    class_means: float32 [K, d], μ_c (0 for classes not seen yet).
    within_scatter: float32 [d, d], :math:`\sum_i (h_i - \mu_{y_i})(h_i - \mu_{y_i})^\top` about
      the current means.
    loss_sums: float32 [K], Σ ℓ_i per class (when losses are given).
    loss_counts: float32 [K], number of losses summed per class.
    ncc_mismatches: float32 scalar, examples whose classifier and nearest-class-mean decisions differ.
    ncc_examples: float32 scalar, examples seen by `update_ncc`.
    skipped_rows: int32 scalar, the real rows (inside `where`) that `update` left out: a label
      outside [0, K), a non-finite feature or a non-finite loss (docs: "Failure modes").
  """
  counts: jax.Array
  class_means: jax.Array
  within_scatter: jax.Array
  loss_sums: jax.Array
  loss_counts: jax.Array
  ncc_mismatches: jax.Array
  ncc_examples: jax.Array
  skipped_rows: ArrayLike = np.int32(0)  # 0 when not given (built before the field existed)

  @classmethod
  def init(cls, num_classes: int, feature_dim: int) -> "NCAccumulator":
    """Empty statistics for K classes and d-dimensional features.

    K = 1: [1] vectors and a [1, d] mean, as for any K.
    """
    num_classes = check_num_classes(num_classes)
    feature_dim = check_num_classes(feature_dim, "feature_dim")
    # One buffer per field, so that a train state holding them can be donated to a jitted step.
    return cls(counts=jnp.zeros((num_classes,), jnp.float32),
               class_means=jnp.zeros((num_classes, feature_dim), jnp.float32),
               within_scatter=jnp.zeros((feature_dim, feature_dim), jnp.float32),
               loss_sums=jnp.zeros((num_classes,), jnp.float32),
               loss_counts=jnp.zeros((num_classes,), jnp.float32),
               ncc_mismatches=jnp.zeros((), jnp.float32), ncc_examples=jnp.zeros((), jnp.float32),
               skipped_rows=jnp.zeros((), jnp.int32))

  @property
  def num_classes(self) -> int:
    return self.counts.shape[0]

  @property
  def feature_dim(self) -> int:
    return self.class_means.shape[1]

  def _check_features(self, features: ArrayLike, batch: int | None = None) -> jax.Array:
    features = check_floating(features, 2, "features")
    if batch is not None:
      check_batch_dim(features, batch, "features")
    if features.shape[1] != self.feature_dim:
      raise ValueError(f"features: expected feature dimension {self.feature_dim}, got "
                       f"{features.shape[1]}.")
    return features.astype(jnp.float32)

  def update(self, features: ArrayLike, labels: ArrayLike, *,
             per_example_loss: ArrayLike | None = None, where: ArrayLike | None = None,
             axis_name: str | None = None) -> "NCAccumulator":
    """Pass 1: merges a batch of features [B, d] (and optionally losses [B]) into the statistics.

    A real row (inside `where`) with a label outside [0, K) (possible only traced), a non-finite
    feature or a non-finite loss is left out of every statistic and counted in `skipped_rows`.

    B = 0 (or every row padding): the statistics unchanged. K = 1: every real row is the one
    class's.
    """
    labels = jnp.asarray(labels)
    in_range = check_labels(labels, self.num_classes, where=where)
    batch = labels.shape[0]
    features = self._check_features(features, batch)
    real = check_where(where, batch)
    valid = real & in_range & check_finite_rows(features, real, "features")
    if per_example_loss is not None:
      per_example_loss = check_floating(per_example_loss, 1, "per_example_loss")
      check_batch_dim(per_example_loss, batch, "per_example_loss")
      valid = valid & check_finite_rows(per_example_loss, real, "per_example_loss")
    slots = class_sums.class_slots(labels, valid, self.num_classes, axis_name=axis_name)
    batch_counts = slots.counts
    safe_features = jnp.where(valid[:, None], features, 0)
    batch_means = (class_sums.slot_sum(safe_features, slots, axis_name=axis_name)
                   / jnp.maximum(batch_counts, 1)[:, None])
    centred = jnp.where(valid[:, None], features - class_sums.at_rows(batch_means, slots), 0)
    batch_scatter = jnp.matmul(centred.T, centred, **explicit_mesh.replicated_out(centred))
    if axis_name is not None:
      batch_scatter = jax.lax.psum(batch_scatter, axis_name)

    seen_counts = class_sums.gather_from_classes(self.counts, slots)
    seen_means = class_sums.gather_from_classes(self.class_means, slots)
    present = batch_counts > 0
    total_counts = seen_counts + batch_counts
    delta = batch_means - seen_means
    merge_factor = jnp.where(present, seen_counts * batch_counts / jnp.maximum(total_counts, 1), 0)
    within_scatter = (self.within_scatter + batch_scatter
                      + (delta * merge_factor[:, None]).T @ delta)
    merged_means = seen_means + delta * (batch_counts / jnp.maximum(total_counts, 1))[:, None]

    loss_sums, loss_counts = self.loss_sums, self.loss_counts
    if per_example_loss is not None:
      batch_loss_sums = class_sums.slot_sum(
          jnp.where(valid, per_example_loss.astype(jnp.float32), 0), slots, axis_name=axis_name)
      loss_sums = class_sums.scatter_to_classes(
          loss_sums, class_sums.gather_from_classes(loss_sums, slots) + batch_loss_sums, slots,
          present)
      loss_counts = class_sums.scatter_to_classes(
          loss_counts, class_sums.gather_from_classes(loss_counts, slots) + batch_counts, slots,
          present)

    return self._replace(
        counts=class_sums.scatter_to_classes(self.counts, total_counts, slots, present),
        class_means=class_sums.scatter_to_classes(self.class_means, merged_means, slots, present),
        within_scatter=within_scatter, loss_sums=loss_sums, loss_counts=loss_counts,
        skipped_rows=self.skipped_rows + count_skipped(real, valid, axis_name))

  def update_ncc(self, features: ArrayLike, classifier: ArrayLike, *, bias: ArrayLike | None = None,
                 where: ArrayLike | None = None, axis_name: str | None = None) -> "NCAccumulator":
    """Pass 2 (after all of pass 1): counts NC4 mismatches of a batch against the final means.

    Rows with a non-finite feature are left out (pass 1 counted them in `skipped_rows`).

    B = 0: nothing counted. K = 1: no mismatch (the classifier and the nearest mean both pick the
    one class).
    """
    features = self._check_features(features)
    classifier, bias = _check_classifier(classifier, self.num_classes, self.feature_dim, bias)
    real = check_where(where, features.shape[0])
    valid = real & check_finite_rows(features, real, "features")
    predictions = jnp.argmax(features @ classifier.T + bias, axis=-1)
    # argmin_c ‖h − μ_c‖² = argmin_c (‖μ_c‖² − 2 hᵀμ_c); absent classes are never nearest.
    distances = jnp.sum(jnp.square(self.class_means), axis=-1) - 2 * features @ self.class_means.T
    distances = jnp.where(self.counts > 0, distances, jnp.inf)
    nearest = jnp.argmin(distances, axis=-1)
    mismatches = jnp.sum(valid & (predictions != nearest)).astype(jnp.float32)
    examples = jnp.sum(valid).astype(jnp.float32)
    if axis_name is not None:
      mismatches, examples = jax.lax.psum((mismatches, examples), axis_name)
    return self._replace(ncc_mismatches=self.ncc_mismatches + mismatches,
                         ncc_examples=self.ncc_examples + examples)

  def finalize(self, classifier: ArrayLike, *, centring: str = "sample") -> NCMetrics:
    """NC1–NC4 and ρ from the accumulated statistics and the classifier W [K, d]; the class means
    centred on the sample mean (`centring='sample'`) or on the mean of the present classes' means
    ('class_balanced'; the module docstring).

    B = 0 (nothing accumulated): every metric NaN. K = 1: NC1–NC3 NaN (they need two classes), NC4 0
    after an `update_ncc` pass, ρ 0 when losses were given (NaN otherwise).
    """
    if centring not in CENTRINGS:
      raise ValueError(f"centring: expected one of {CENTRINGS}, got {centring!r}.")
    classifier, _ = _check_classifier(classifier, self.num_classes, self.feature_dim, None)
    present = self.counts > 0
    num_present = jnp.sum(present).astype(jnp.float32)
    num_examples = jnp.maximum(jnp.sum(self.counts), 1)
    if centring == "sample":
      global_mean = self.counts @ self.class_means / num_examples
    else:
      global_mean = present.astype(jnp.float32) @ self.class_means / jnp.maximum(num_present, 1)
    centred_means = jnp.where(present[:, None], self.class_means - global_mean, 0)
    within_cov = self.within_scatter / num_examples

    _, singular_values, right_vectors = jnp.linalg.svd(centred_means, full_matrices=False)
    tolerance = (max(self.num_classes, self.feature_dim) * jnp.finfo(jnp.float32).eps
                 * jnp.max(singular_values))
    rank_limit = jnp.arange(singular_values.shape[0]) < num_present - 1
    kept = rank_limit & (singular_values > tolerance)
    inverse_sq = jnp.where(kept,
                           1 / jnp.square(jnp.where(singular_values > 0, singular_values, 1)), 0)
    projected = jnp.sum((right_vectors @ within_cov) * right_vectors, axis=-1)
    nc1 = jnp.sum(projected * inverse_sq)

    kept_classifier = jnp.where(present[:, None], classifier, 0)
    nc2 = _etf_distance(centred_means @ centred_means.T, present, num_present)
    nc2_classifier = _etf_distance(kept_classifier @ kept_classifier.T, present, num_present)
    nc3 = jnp.sum(jnp.square(kept_classifier / jnp.linalg.norm(kept_classifier)
                             - centred_means / jnp.linalg.norm(centred_means)))
    defined = num_present >= 2
    nc1, nc2, nc2_classifier, nc3 = (jnp.where(defined, value, jnp.nan)
                                     for value in (nc1, nc2, nc2_classifier, nc3))
    nc4 = jnp.where(self.ncc_examples > 0,
                    self.ncc_mismatches / jnp.maximum(self.ncc_examples, 1), jnp.nan)
    loss_present = self.loss_counts > 0
    class_losses = self.loss_sums / jnp.maximum(self.loss_counts, 1)
    return NCMetrics(nc1=nc1, nc2=nc2, nc2_classifier=nc2_classifier, nc3=nc3, nc4=nc4,
                     rho=rho(class_losses, loss_present))


def nc_metrics(features: ArrayLike, labels: ArrayLike, classifier: ArrayLike, *,
               bias: ArrayLike | None = None, per_example_loss: ArrayLike | None = None,
               where: ArrayLike | None = None, centring: str = "sample") -> NCMetrics:
  """NC1–NC4 (and ρ when `per_example_loss` is given) of a whole set at once.

  Papyan et al., PNAS 2020, arXiv 2008.08186; Zhu et al., NeurIPS 2021, arXiv 2105.02375 (see the
  module docstring for the equations and conventions).

  B = 0: every metric NaN. K = 1: NC1–NC3 NaN (they need two classes), NC4 0, ρ 0 with
  `per_example_loss` (NaN without).

  Args:
    features: float [N, d] features h_i.
    labels: int [N] in [0, K).
    classifier: float [K, d] classifier W.
    bias: optional [K] classifier bias (NC4 only).
    per_example_loss: optional [N] losses for ρ.
    where: optional bool [N] validity mask.
    centring: 'sample' (μ_G the sample mean, Papyan et al.) or 'class_balanced' (the mean of the
      present classes' means); see the module docstring. A static Python string.

  Returns:
    `NCMetrics` (a single `NCAccumulator` update and NCC pass, then `finalize`); every metric is
    NaN when a real row has a label outside [0, K) (possible only traced), a non-finite feature or
    a non-finite loss (docs: "Failure modes"; the streaming `NCAccumulator` instead leaves such
    rows out and counts them).

  Raises:
    ValueError: features not [N, d], a classifier not [K, d], labels or losses not [N], an unknown
      `centring`, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating features, classifier or losses, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> etf = reweight_jax.baselines.etf_classifier(3, 3, seed=0)  # a simplex ETF, columns [d, K]
    >>> features, labels = jnp.concatenate([etf.T, etf.T]), jnp.array([0, 1, 2, 0, 1, 2])
    >>> metrics = reweight_jax.nc_metrics(features, labels, classifier=etf.T)
    >>> print(np.asarray(jnp.array([metrics.nc1, metrics.nc2, metrics.nc3, metrics.nc4]), float).round(4))
    [0. 0. 0. 0.]
  """
  classifier = check_floating(classifier, 2, "classifier")
  features = check_floating(features, 2, "features")
  accumulator = NCAccumulator.init(classifier.shape[0], features.shape[1])
  accumulator = accumulator.update(features, labels, per_example_loss=per_example_loss, where=where)
  accumulator = accumulator.update_ncc(features, classifier, bias=bias, where=where)
  metrics = accumulator.finalize(classifier, centring=centring)
  clean = accumulator.skipped_rows == 0
  return NCMetrics(*(jnp.where(clean, value, jnp.nan) for value in metrics))
