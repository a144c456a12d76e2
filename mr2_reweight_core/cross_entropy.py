"""Cross-entropy pieces shared by every loss of both libraries: the label's log-probability and the
plain per-example cross-entropy (with the shared label and mask handling)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_batch_dim
from mr2_reweight_core.checks import check_class_vector
from mr2_reweight_core.checks import check_floating
from mr2_reweight_core.checks import check_labels
from mr2_reweight_core.checks import check_where
from mr2_reweight_core.checks import index_labels
from mr2_reweight_core.checks import take_class_values


def _scaled(logits: jax.Array, shift: jax.Array, temperature: jax.Array | None) -> jax.Array:
  """(z − c) / T [B, K] for a per-example shift c [B] (T = 1 when None)."""
  shifted = logits - shift[:, None]
  return shifted if temperature is None else shifted / temperature[:, None]


def _label_log_softmax_value(logits: jax.Array, labels: jax.Array,
                             temperature: jax.Array | None, flag_non_finite: bool = False
                             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(log softmax(z / T)_y [B], the shift c [B], log Σ_k exp((z_k − c) / T) [B]).

  log softmax(z / T)_y = (z_y − c) / T − log Σ_k exp((z_k − c) / T) for any c. With c = z_y the
  label's term is exactly 1 and the value is −log1p(Σ_{k≠y} exp((z_k − z_y) / T)): one pass over
  the [B, K] logits, and no term can underflow the sum. A term overflows only where some logit
  exceeds the label's by ~88·T; then (a `lax.cond` on the [B] sums) c = max_k z_k, the usual
  two-pass form (max, then exp-sum).

  `flag_non_finite`: a row that holds a non-finite logit anywhere gives NaN (and so does its
  gradient: log Σ is set to NaN, which the derivative reads), so that `mr2_loss` finds such rows in
  its margin cross-entropy. A NaN logit already makes the sum NaN, and a +inf one at another column
  sends the batch to the max shift, where its term is e^{+inf − +inf} = NaN; only a −inf would drop
  out (e^{−inf} = 0), so a −inf logit's term is selected to NaN in the same pass over [B, K] (the
  row's sum is then NaN, whichever shift the `lax.cond` takes), and a +inf label logit, which
  leaves the sum 0, is flagged from the [B] label logits. A separate min over [B, K], an earlier
  form, cost the whole MR2 loss at B = 512, d = 512, K = 1,000 5–11 % (per call and per
  iteration of a compiled loop, both forms: results/benchmarks/RESULTS.md, "What do the guards
  cost?"); adding z_k − z_k to each term, another, several per cent.
  """
  label_logit = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
  hit = jnp.arange(logits.shape[1])[None, :] == labels.astype(jnp.int32)[:, None]

  terms = jnp.where(hit, 0.0, jnp.exp(_scaled(logits, label_logit, temperature)))
  if flag_non_finite:  # the label's own −inf too (its other terms would only overflow to +inf)
    terms = jnp.where(logits == -jnp.inf, jnp.nan, terms)
  rest = jnp.sum(terms, axis=-1)

  def by_label(_):
    return label_logit, jnp.log1p(rest)

  def by_max(_):
    # max_k z_k / T = (max_k z_k) / T for T > 0, so the [B, K] logits are read, not first divided.
    top = jnp.max(logits, axis=-1)
    return top, jnp.log(jnp.sum(jnp.exp(_scaled(logits, top, temperature)), axis=-1))

  shift, log_norm = jax.lax.cond(jnp.any(rest == jnp.inf), by_max, by_label, None)
  if flag_non_finite:
    # A +inf label logit leaves `rest` 0: its value is NaN, but not all of its gradient row.
    log_norm = jnp.where(jnp.isnan(rest) | (label_logit == jnp.inf), jnp.nan, log_norm)
  label_term = label_logit - shift
  if temperature is not None:
    label_term = label_term / temperature
  return label_term - log_norm, shift, log_norm


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _label_log_softmax(logits, labels, temperature, flag_non_finite):
  return _label_log_softmax_value(logits, labels, temperature, flag_non_finite)[0]


@_label_log_softmax.defjvp
def _label_log_softmax_jvp(flag_non_finite, primals, tangents):
  """d log softmax(z / T)_y = (dz_y − Σ_k p_k dz_k) / T, p = softmax(z / T); T is a constant.

  Written out so that reverse mode is one fused pass over [B, K] — (1[k = y] − p_k) · ḡ / T — with
  the label's term as a one-hot select (autodiff of the gather would scatter into a zero [B, K]).
  """
  logits, labels, temperature = primals
  dlogits = tangents[0]
  value, shift, log_norm = _label_log_softmax_value(logits, labels, temperature, flag_non_finite)
  probs = jnp.exp(_scaled(logits, shift, temperature) - log_norm[:, None])
  hit = jnp.arange(logits.shape[1])[None, :] == labels.astype(jnp.int32)[:, None]
  dvalue = jnp.sum(jnp.where(hit, dlogits, 0), axis=-1) - jnp.sum(probs * dlogits, axis=-1)
  if temperature is not None:
    dvalue = dvalue / temperature
  return value, dvalue


def label_log_softmax(logits: jax.Array, labels: jax.Array,
                      temperature: jax.Array | None = None, *,
                      flag_non_finite: bool = False) -> jax.Array:
  """log softmax(z / T)_y = −log Σ_k exp((z_k − z_y) / T) per example [B].

  T is an optional per-example temperature [B] > 0 (MR2's γ_y), a constant for differentiation
  (stop-gradient); without it T = 1. The sum is shifted by the label's own logit, so the label's
  term is exactly 1 and the forward pass reads the [B, K] logits once; only when a term would
  overflow (a logit ~88·T above the label's) is it shifted by the row maximum instead, as in
  `jax.nn.log_softmax` (see `_label_log_softmax_value`). The [B, K] log-probabilities are never
  materialised. The derivative is written out (`_label_log_softmax_jvp`): forward and reverse mode
  both work, and a gradient costs one more pass over the [B, K] logits.
  Labels must be valid indices (callers pass `index_labels(labels, in_range)` and mask the result).
  `flag_non_finite`: NaN on a row that holds a non-finite logit, found in the same pass.
  """
  if temperature is not None:
    temperature = jax.lax.stop_gradient(temperature).astype(logits.dtype)
  return _label_log_softmax(logits, labels, temperature, flag_non_finite)


def check_logits_and_labels(logits: ArrayLike, labels: ArrayLike, where: ArrayLike | None
                             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Checked (logits, labels, in-range mask); masked rows' logits are replaced by 0 *before* any
  loss is computed, so padding (possibly inf or NaN) sends no NaN into the gradient."""
  logits = check_floating(logits, 2, "logits")
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, logits.shape[1], where=where)
  check_batch_dim(logits, labels.shape[0], "logits")
  mask = check_where(where, labels.shape[0])
  return jnp.where(mask[:, None], logits, 0), labels, in_range


def label_log_prob(logits: jax.Array, labels: jax.Array, in_range: jax.Array) -> jax.Array:
  """log softmax(z)_y per example [B]; an out-of-range label reads class 0 (`index_labels`) and the
  caller turns its value into NaN (`finish_per_example`)."""
  return label_log_softmax(logits, index_labels(labels, in_range))


def finish_per_example(values: jax.Array, labels: jax.Array, in_range: jax.Array,
                       where: ArrayLike | None, class_weights: ArrayLike | None,
                       num_classes: int) -> jax.Array:
  """Applies optional class weights w_y, NaN for out-of-range labels, 0 for masked examples."""
  where = check_where(where, labels.shape[0])
  if class_weights is not None:
    class_weights = check_class_vector(class_weights, num_classes, "class_weights")
    values = values * take_class_values(class_weights, labels, in_range).astype(values.dtype)
  values = jnp.where(in_range, values, jnp.nan)
  return jnp.where(where, values, 0)


def cross_entropy_loss(logits: ArrayLike, labels: ArrayLike, *,
                       class_weights: ArrayLike | None = None, where: ArrayLike | None = None
                       ) -> jax.Array:
  """Per-example cross-entropy w_y · (−log softmax(z)_y) [B]; w ≡ 1 without `class_weights`.

  The labels of real rows are range-checked (NaN for an out-of-range label under jit, never a
  clipped class); masked rows give 0 and no gradient, whatever their labels. Inverse-frequency and class-balanced baselines pass their weights.

  B = 0: an empty [0]. K = 1: 0 on every real row (a softmax over one class is certain).

  Args:
    logits: float [B, K].
    labels: int [B] in [0, K).
    class_weights: optional [K] weights w_y.
    where: optional bool [B]; False marks padding.

  Returns:
    float [B] per-example losses: 0 where `where` is False, NaN for an out-of-range label under
    `jit`.

  Raises:
    ValueError: logits not [B, K], labels not [B], `class_weights` not [K], a `where` of another
      shape, or (eagerly) a real row's label outside [0, K).
    TypeError: non-floating logits, non-integer labels.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.5]])
    >>> labels = jnp.array([0, 1, 2, 1])
    >>> print(np.asarray(reweight_jax.cross_entropy_loss(logits, labels), float).round(4))
    [0.1698 0.6803 0.0949 0.4644]
    >>> where = jnp.array([True, True, True, False])  # the last row is padding
    >>> print(np.asarray(reweight_jax.cross_entropy_loss(logits, labels, where=where), float).round(4))
    [0.1698 0.6803 0.0949 0.    ]
  """
  logits, labels, in_range = check_logits_and_labels(logits, labels, where)
  return finish_per_example(-label_log_prob(logits, labels, in_range), labels, in_range, where,
                            class_weights, logits.shape[1])
