r"""ETF-DR: a fixed simplex-ETF classifier trained with the dot-regression loss.

Yang et al., "Inducing Neural Collapse in Imbalanced Learning: Do We Really Need a Learnable
Classifier at the End of Deep Neural Network?", NeurIPS 2022, arXiv 2203.09081).

The classifier M [d, K] is drawn once from a seed (`etf_classifier`) and never trained; the head
normalises the features (BatchNorm1d, a flax module of the model, then `etf_normalize`); the loss
pulls each normalised feature onto its class's column of :math:`W = M \operatorname{diag}(E)`,
where GivenEw (`given_ew`) scales class c by :math:`E_c = \sqrt{B / (C_b n_c)}` so that every class
present in the batch gets the same total loss (`dot_regression_loss`). Prediction is
:math:`\operatorname{argmax}_c h^\top m_c`.

With the inverse reweighting (Wang et al., ICML 2026, arXiv 2605.10047, who report ETF-DR with it;
the per-label weighting is the project's definition), ŵ weights the
per-label DR losses with E ≡ 1 (`dot_regression_loss(..., class_scale=None)`), since GivenEw
already balances the classes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core import class_sums
from mr2_reweight_core import explicit_mesh
from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import check_num_classes
from mr2_reweight_core.checks import check_unit_scalar
from mr2_reweight_core.checks import check_where

# The reference clamps ‖h‖ at 1e-8 in the normalisation and in the loss (`H_length`).
_MIN_NORM = 1e-8


def etf_classifier(num_classes: int, dim: int, seed: int) -> jax.Array:
  r"""The fixed simplex-ETF classifier M, float32 [d, K].

  Yang et al., NeurIPS 2022, arXiv 2203.09081: the simplex equiangular tight frame, drawn at random:

  .. math::

      A \in \mathbb{R}^{d \times K},\ A_{jk} \sim U[0, 1) \text{ iid}, \qquad A = P R, \qquad
      M = \sqrt{\frac{K}{K - 1}}\, P \bigl(I - \mathbf{1}\mathbf{1}^\top / K\bigr),

  A drawn on the host (`np.random.default_rng(seed)`) and A = P R its reduced QR (d ≥ K),
  sign-fixed so that diag(R) > 0. Columns have unit norm and :math:`m_j^\top m_k = -1/(K - 1)` for
  j ≠ k (:math:`P^\top P = I`); :math:`\sum_k m_k = 0`. The draw is a
  pure function of `seed` (the reference leaves M unseeded and out of its checkpoint, so a resume
  draws another M; keep the seed, or M itself, in the train state). The reduced QR's Q is unique
  once diag(R) > 0 (A has full column rank with probability 1), so M does not depend on the
  LAPACK build's sign convention; the reference's `np.linalg.qr` without that fix may differ from
  it by the sign of some columns of P, a different but equally valid ETF.

  K = 1: `ValueError` (a simplex ETF needs K ≥ 2).

  Args:
    num_classes: K ≥ 2 (the scale divides by K − 1).
    dim: feature dimension d ≥ K.
    seed: non-negative integer seed of the draw.

  Returns:
    float32 [dim, num_classes].

  Raises:
    ValueError: K < 2, d < K, a negative or non-integer seed.
    TypeError: a non-int `num_classes` or `dim`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> etf = reweight_jax.baselines.etf_classifier(3, 4, seed=0)
    >>> print(etf.shape, np.asarray(etf.T @ etf, float).round(4))
    (4, 3) [[ 1.  -0.5 -0.5]
     [-0.5  1.  -0.5]
     [-0.5 -0.5  1. ]]
  """
  num_classes = check_num_classes(num_classes)
  if num_classes < 2:
    raise ValueError(f"num_classes: a simplex ETF needs at least 2 classes (the scale "
                     f"√(K/(K−1)) divides by K − 1), got {num_classes}.")
  if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
    raise TypeError(f"dim: expected a Python int, got {type(dim).__name__}.")
  if dim < num_classes:
    raise ValueError(f"dim: the reduced QR of A [d, K] needs d ≥ K orthonormal columns; got "
                     f"dim={dim} < num_classes={num_classes}.")
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ValueError(f"seed: expected a non-negative integer, got {seed!r}.")
  draws = np.random.default_rng(seed).random((dim, num_classes))
  q, r = np.linalg.qr(draws, mode="reduced")
  q = q * np.where(np.diag(r) < 0, -1.0, 1.0)
  centring = np.eye(num_classes) - np.full((num_classes, num_classes), 1.0 / num_classes)
  etf = np.sqrt(num_classes / (num_classes - 1)) * q @ centring
  return jnp.asarray(etf, jnp.float32)


def etf_normalize(features: ArrayLike) -> jax.Array:
  r"""The normalised features over the last axis, in the features' dtype (computed in ≥ float32):

  .. math::

      h \,/\, \max(\lVert h \rVert,\ 10^{-8})

  The head's normalisation after BatchNorm1d. Its gradient is finite everywhere: for ‖h‖ < 1e-8 it
  is the gradient of h / 1e-8 (a zero row maps to zero), where autodiff of a clamped norm would give
  0 · ∞ = NaN. Yang et al., NeurIPS 2022, arXiv 2203.09081 (the feature normalisation of the ETF
  head).

  B = 0: an empty [0, d].

  Args:
    features: float [..., d] features h.

  Returns:
    h / max(‖h‖, 1e-8), features' shape and dtype.

  Raises:
    TypeError: features not floating or of rank 0.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(reweight_jax.baselines.etf_normalize(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
    [[0.6 0.8]
     [0.  0. ]]
  """
  features = jnp.asarray(features)
  if features.ndim < 1 or not jnp.issubdtype(features.dtype, jnp.floating):
    raise TypeError(f"features: expected a floating array [..., d], got {features.dtype} of shape "
                    f"{features.shape}.")
  h = features.astype(jnp.promote_types(features.dtype, jnp.float32))
  return (h / _safe_norm(h)).astype(features.dtype)


def _safe_norm(h: jax.Array) -> jax.Array:
  """max(‖h‖, 1e-8) over the last axis, keepdims, with a finite gradient at h = 0."""
  squared = jnp.sum(h * h, axis=-1, keepdims=True)
  large = squared > _MIN_NORM**2
  return jnp.where(large, jnp.sqrt(jnp.where(large, squared, 1.0)), _MIN_NORM)


def given_ew(labels: ArrayLike, num_classes: int, *, where: ArrayLike | None = None,
             axis_name: str | None = None) -> jax.Array:
  r"""GivenEw class scales E, float32 [K], of the (global) batch.

  Yang et al., NeurIPS 2022, arXiv 2203.09081 (the GivenEw option of their code):

  .. math::

      E_c =
      \begin{cases}
        \sqrt{B / (C_b\, n_c)} & \text{if } n_c > 0, \\
        1 & \text{otherwise,}
      \end{cases}

  n_c the count of class c, :math:`B = \sum_c n_c` the real rows and C_b the number of classes
  present. With :math:`W = M \operatorname{diag}(E)` and ‖h‖ = 1 the DR loss becomes
  :math:`\frac{1}{C_b} \sum_c \operatorname{mean}_{i:\, y_i = c} \frac{1}{2} (1 - \cos_i)^2`
  (`dot_regression_loss`): each present class carries the same weight, whatever its count. E is
  a function of the labels, hence a constant for back-propagation.

  Data parallel (`axis_name`): counts are psum-reduced (`mr2_reweight_core.class_sums`), so every device
  returns the E of the concatenated batch (typed replicated under `shard_map`'s `check_vma=True`).
  Without it, `jax.jit` over labels laid out with `NamedSharding` gives the same E, replicated.

  B = 0 (or every row padding): ones [K] (no class is seen). K = 1: (1,).

  Args:
    labels: int [B] labels in [0, K).
    num_classes: K, the number of classes.
    where: optional bool [B]; False marks padding, which counts nowhere.
    axis_name: data-parallel axis name or None.

  Returns:
    float32 [K]; a real row with an out-of-range label (possible only under `jit`) makes every
    entry NaN on every device, never a clipped class.

  Raises:
    ValueError: labels not [B], a `where` of another shape, or (eagerly) a real row's label outside
      [0, K).
    TypeError: non-integer labels, a non-int `num_classes`.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> print(np.asarray(reweight_jax.baselines.given_ew(jnp.array([0, 0, 0, 1]), 3), float).round(4))
    [0.8165 1.4142 1.    ]
  """
  num_classes = check_num_classes(num_classes)
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, num_classes, where=where)
  real = check_where(where, labels.shape[0])
  valid = real & in_range
  slots = class_sums.class_slots(labels, valid, num_classes, axis_name=axis_name)
  slot_present = slots.counts > 0
  counts = class_sums.scatter_to_classes(jnp.zeros((num_classes,), jnp.float32), slots.counts,
                                         slots, slot_present)
  present = counts > 0
  num_present = jnp.sum(present.astype(jnp.float32))
  total = jnp.sum(counts)
  scales = jnp.where(
      present, jnp.sqrt(total / (jnp.maximum(num_present, 1.0) * jnp.maximum(counts, 1.0))), 1.0)
  bad_rows = jnp.sum((real & ~in_range).astype(jnp.int32))
  if axis_name is not None:
    bad_rows = jax.lax.psum(bad_rows, axis_name)
  return jnp.where(bad_rows > 0, jnp.nan, scales)


def _check_classifier(features: ArrayLike, classifier: ArrayLike) -> tuple[jax.Array, jax.Array]:
  features = check_floating(features, 2, "features")
  classifier = check_floating(classifier, 2, "classifier")
  if classifier.shape[0] != features.shape[1]:
    raise ValueError(f"classifier: expected shape [d, K] with d = {features.shape[1]} (the "
                     f"features' dimension), got {classifier.shape}.")
  return features, classifier


def _dot_regression(features: jax.Array, labels: ArrayLike, classifier: jax.Array,
                    class_scale: ArrayLike | None, where: ArrayLike | None, axis_name: str | None,
                    labels_name: str) -> tuple[jax.Array, jax.Array]:
  """(this device's share of the mean, per-example ℓ [B]) for checked features and classifier."""
  num_classes = classifier.shape[1]
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, num_classes, labels_name, where=where)
  check_batch_dim(features, labels.shape[0], "features", labels_name)
  real = check_where(where, labels.shape[0])
  dtype = jnp.promote_types(jnp.promote_types(features.dtype, classifier.dtype), jnp.float32)
  if class_scale is None:
    scales = jnp.ones((num_classes,), dtype)
  else:
    scales = check_class_vector(class_scale, num_classes, "class_scale").astype(dtype)
  valid = real & in_range
  # Padding and bad-label rows compute on h = 0 and class 0, so their garbage (inf, NaN) reaches
  # neither the value nor the gradient; their per-example value is set below.
  h = jnp.where(valid[:, None], features.astype(dtype), 0.0)
  index = index_labels(labels, valid)
  targets = (explicit_mesh.take(classifier.astype(dtype).T, index)
             * explicit_mesh.take(scales, index)[:, None])  # w_i [B, d]
  h_norm = jax.lax.stop_gradient(_safe_norm(h)[:, 0])
  target_norm = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(targets * targets, axis=-1)))
  residual = jnp.sum(h * targets, axis=-1) - target_norm * h_norm
  per_example = 0.5 * residual**2 / h_norm
  per_example = jnp.where(valid, per_example, jnp.where(real, jnp.nan, 0.0))
  count = jnp.sum(real.astype(jnp.float32))
  if axis_name is not None:
    count = jax.lax.psum(count, axis_name)
  loss = class_sums.num_devices(axis_name) * jnp.sum(per_example) / jnp.maximum(count, 1.0)
  return loss, per_example


def dot_regression_loss(features: ArrayLike, labels: ArrayLike, classifier: ArrayLike, *,
                        class_scale: ArrayLike | None = None, where: ArrayLike | None = None,
                        axis_name: str | None = None) -> tuple[jax.Array, jax.Array]:
  r"""The dot-regression (DR) loss of ETF-DR; returns `(loss, per_example)`.

  Yang et al., NeurIPS 2022, arXiv 2203.09081, the dot-regression loss:

  .. math::

      \begin{aligned}
        w_i &= E_{y_i} m_{y_i}, \\
        \ell_i &= \frac{\bigl(h_i^\top w_i - \operatorname{sg}(\lVert w_i \rVert)\,
          \operatorname{sg}(\lVert h_i \rVert)\bigr)^2}{2 \operatorname{sg}(\lVert h_i \rVert)}, \\
        \mathrm{loss} &= \frac{1}{B} \sum_i \ell_i,
      \end{aligned}

  with :math:`m_c` = classifier[:, c] (E ≡ 1 by default), ‖h_i‖ clamped at 1e-8, and B the real
  rows of the global batch. The features are meant to be `etf_normalize`-d by the head (‖h_i‖ = 1,
  then :math:`\ell_i = \frac{1}{2} E_{y_i}^2 (1 - \cos_i)^2` for unit columns), but the norms are
  computed, as in the reference, so unnormalised features give the reference's value. The norms
  are constants for back-propagation:

  .. math::

      \frac{\partial \ell_i}{\partial h_i}
        = \frac{(h_i^\top w_i - \lVert w_i \rVert \lVert h_i \rVert)\, w_i}{\lVert h_i \rVert}.

  The classifier receives the gradient of the dot product (ETF-DR keeps M fixed: do not train it);
  `class_scale` is taken as given (`given_ew` is a function of the labels).

  Data parallel (`axis_name`): B counts the real rows of the global batch and the returned loss is
  this device's share :math:`N_\mathrm{devices} \sum_{\text{local } i} \ell_i / B`: `lax.pmean` of
  it (and of the gradients) is the loss (gradient) of the concatenated batch on one device.
  `class_scale` must be the global batch's (`given_ew(..., axis_name=...)`). Under `jax.shard_map`'s
  default `check_vma=True` the loss is still this share; take the gradient of
  `lax.pmean(loss, axis_name)`, which JAX sums over the devices itself (the share's own gradient is
  N_devices times the global one). Without `axis_name`, `jax.jit` over a batch laid out with
  `NamedSharding` (Explicit or Auto mesh axes) sees the global batch: the loss is the global value.

  B = 0 (or every row padding): loss 0 and an empty [0] (or zeros). K = 1: the classifier is one
  column, every real row regresses onto it.

  Args:
    features: [B, d] features h.
    labels: int [B] labels in [0, K).
    classifier: [d, K] classifier M (`etf_classifier`).
    class_scale: optional [K] class scales E (`given_ew`); None for E ≡ 1.
    where: optional bool [B]; False marks padding, which counts nowhere and gets no gradient (its
      features and labels may be anything, eagerly too).
    axis_name: data-parallel axis name or None.

  Returns:
    (loss, per_example [B]) in ≥ float32; padding rows give 0. A real row with an out-of-range
    label raises eagerly; under `jit` its ℓ_i and the loss are NaN (never a clipped class).

  Raises:
    ValueError: features not [B, d], a classifier not [d, K], labels not [B], `class_scale` not
      [K], or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating features or classifier, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> etf = reweight_jax.baselines.etf_classifier(3, 4, seed=0)
    >>> h = reweight_jax.baselines.etf_normalize(etf.T + jnp.array([0.0, 0.0, 0.0, 0.5]))  # near its column
    >>> loss, per_example = reweight_jax.baselines.dot_regression_loss(h, jnp.array([0, 1, 2]), etf)
    >>> print(f"{loss:.4f}", np.asarray(per_example, float).round(4))
    0.0031 [0.0001 0.0055 0.0035]
    >>> print(f"{reweight_jax.baselines.dot_regression_loss(etf.T, jnp.array([0, 1, 2]), etf)[0]:.4f}")  # on the ETF
    0.0000
  """
  features, classifier = _check_classifier(features, classifier)
  return _dot_regression(features, labels, classifier, class_scale, where, axis_name, "labels")


def mixup_dot_regression_loss(features: ArrayLike, labels: ArrayLike, labels_b: ArrayLike,
                              lam: ArrayLike, classifier: ArrayLike, *,
                              class_scale: ArrayLike | None = None, where: ArrayLike | None = None,
                              axis_name: str | None = None) -> tuple[jax.Array, jax.Array]:
  r"""The DR loss of a mixup batch x̃ = λx + (1−λ)x_π; returns `(loss, per_example)`.

  Yang et al., NeurIPS 2022, arXiv 2203.09081 train ETF-DR with mixup (Zhang et al., "mixup: Beyond
  Empirical Risk Minimization", ICLR 2018, arXiv 1710.09412):

  .. math::

      \mathrm{loss} = \lambda\, \mathrm{DR}(h, y) + (1 - \lambda)\, \mathrm{DR}(h, y_\pi), \qquad
      \mathrm{per\_example}_i = \lambda\, \ell_i(y_i) + (1 - \lambda)\, \ell_i(y_{\pi(i)})

  with one λ ~ Beta(α, α) and one permutation π per batch (the caller's draws), and the same
  class scales E in both terms: those of the unmixed labels, `given_ew(labels)` (None for E ≡ 1).
  λ is a constant for back-propagation. Data parallelism and padding as `dot_regression_loss`.

  B = 0 (or every row padding): loss 0 and an empty [0] (or zeros). K = 1: both labels are the one
  column; the loss is `dot_regression_loss`'s.

  Args:
    features: [B, d] features of the mixed inputs.
    labels: int [B] labels y of the first inputs.
    labels_b: int [B] labels y_π of the mixed-in inputs.
    lam: scalar λ in [0, 1] (checked when concrete).
    classifier: [d, K] classifier M.
    class_scale: optional [K] class scales E (`given_ew(labels)`); None for E ≡ 1.
    where: optional bool [B]; False marks padding.
    axis_name: data-parallel axis name or None.

  Returns:
    (loss, per_example [B]); NaN under `jit` for a real row with an out-of-range label or label_b.

  Raises:
    ValueError: features not [B, d], a classifier not [d, K], labels not [B], `class_scale` not
      [K], λ not a scalar or (eagerly) outside [0, 1],
      or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating features or classifier, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> etf = reweight_jax.baselines.etf_classifier(3, 4, seed=0)
    >>> h = reweight_jax.baselines.etf_normalize(0.7 * etf.T + 0.3 * etf.T[jnp.array([1, 2, 0])])
    >>> loss, _ = reweight_jax.baselines.mixup_dot_regression_loss(
    ...     h, jnp.array([0, 1, 2]), jnp.array([1, 2, 0]), 0.7, etf)
    >>> print(f"{loss:.4f}")
    0.1789
  """
  features, classifier = _check_classifier(features, classifier)
  lam = check_unit_scalar(lam, "lam", "mixing weight λ")
  loss_a, per_example_a = _dot_regression(features, labels, classifier, class_scale, where,
                                          axis_name, "labels")
  loss_b, per_example_b = _dot_regression(features, labels_b, classifier, class_scale, where,
                                          axis_name, "labels_b")
  lam = jax.lax.stop_gradient(lam.astype(loss_a.dtype))
  return (lam * loss_a + (1 - lam) * loss_b,
          lam * per_example_a + (1 - lam) * per_example_b)

