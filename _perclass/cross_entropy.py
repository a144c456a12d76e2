"""Cross-entropy pieces shared by every loss of both libraries: the label's log-probability and the
plain per-example cross-entropy (with the shared label and mask handling)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from _perclass.checks import check_batch_dim
from _perclass.checks import check_class_vector
from _perclass.checks import check_floating
from _perclass.checks import check_labels
from _perclass.checks import check_where
from _perclass.checks import index_labels
from _perclass.checks import take_class_values

Array = Any


def _label_log_softmax_value(logits: jax.Array, labels: jax.Array,
                             temperature: jax.Array | None
                             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(log softmax(z / T)_y [B], s = (z − m) / T [B, K], log Σ_k exp(s_k) [B])."""
  # max_k z_k / T = (max_k z_k) / T for T > 0, so the [B, K] logits are read, not first divided.
  shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
  if temperature is not None:
    shifted = shifted / temperature[:, None]
  log_norm = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))
  return jnp.take_along_axis(shifted, labels[:, None], axis=-1)[:, 0] - log_norm, shifted, log_norm


@jax.custom_jvp
def _label_log_softmax(logits, labels, temperature):
  return _label_log_softmax_value(logits, labels, temperature)[0]


@_label_log_softmax.defjvp
def _label_log_softmax_jvp(primals, tangents):
  """d log softmax(z / T)_y = (dz_y − Σ_k p_k dz_k) / T, p = softmax(z / T); T is a constant.

  Written out so that reverse mode is one fused pass over [B, K] — (1[k = y] − p_k) · ḡ / T — with
  the label's term as a one-hot select (autodiff of the gather would scatter into a zero [B, K]).
  """
  logits, labels, temperature = primals
  dlogits = tangents[0]
  value, shifted, log_norm = _label_log_softmax_value(logits, labels, temperature)
  probs = jnp.exp(shifted - log_norm[:, None])
  hit = jnp.arange(logits.shape[1])[None, :] == labels.astype(jnp.int32)[:, None]
  dvalue = jnp.sum(jnp.where(hit, dlogits, 0), axis=-1) - jnp.sum(probs * dlogits, axis=-1)
  if temperature is not None:
    dvalue = dvalue / temperature
  return value, dvalue


def label_log_softmax(logits: jax.Array, labels: jax.Array,
                      temperature: jax.Array | None = None) -> jax.Array:
  """log softmax(z / T)_y = (z_y − m) / T − log Σ_k exp((z_k − m) / T), m = max_k z_k, per example [B].

  T is an optional per-example temperature [B] > 0 (MR2's γ_y), a constant for differentiation
  (stop-gradient); without it T = 1. The label's shifted logit is exact (0 when it is the maximum),
  as in `jax.nn.log_softmax`, and the [B, K] log-probabilities are never materialised. The
  derivative is written out (`_label_log_softmax_jvp`): forward and reverse mode both work, and a
  gradient costs one pass over the [B, K] logits after the forward's two (max, then exp-sum).
  Labels must be valid indices (callers pass `index_labels(labels, in_range)` and mask the result).
  """
  if temperature is not None:
    temperature = jax.lax.stop_gradient(temperature).astype(logits.dtype)
  return _label_log_softmax(logits, labels, temperature)


def check_logits_and_labels(logits: Array, labels: Array, where: Array | None
                             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Checked (logits, labels, in-range mask); masked rows' logits are replaced by 0 *before* any
  loss is computed, so padding (possibly inf or NaN) sends no NaN into the gradient."""
  logits = check_floating(logits, 2, "logits")
  labels = jnp.asarray(labels)
  in_range = check_labels(labels, logits.shape[1])
  check_batch_dim(logits, labels.shape[0], "logits")
  mask = check_where(where, labels.shape[0])
  return jnp.where(mask[:, None], logits, 0), labels, in_range


def label_log_prob(logits: jax.Array, labels: jax.Array, in_range: jax.Array) -> jax.Array:
  """log softmax(z)_y per example [B]; an out-of-range label reads class 0 (`index_labels`) and the
  caller turns its value into NaN (`finish_per_example`)."""
  return label_log_softmax(logits, index_labels(labels, in_range))


def finish_per_example(values: jax.Array, labels: jax.Array, in_range: jax.Array,
                       where: Array | None, class_weights: Array | None,
                       num_classes: int) -> jax.Array:
  """Applies optional class weights w_y, NaN for out-of-range labels, 0 for masked examples."""
  where = check_where(where, labels.shape[0])
  if class_weights is not None:
    class_weights = check_class_vector(class_weights, num_classes, "class_weights")
    values = values * take_class_values(class_weights, labels, in_range).astype(values.dtype)
  values = jnp.where(in_range, values, jnp.nan)
  return jnp.where(where, values, 0)


def cross_entropy_loss(logits: Array, labels: Array, *, class_weights: Array | None = None,
                       where: Array | None = None) -> jax.Array:
  """Per-example cross-entropy w_y · (−log softmax(z)_y) [B]; w ≡ 1 without `class_weights`.

  Labels are range-checked (NaN for an out-of-range label under jit, never a clipped class); masked
  rows give 0 and no gradient. Inverse-frequency and class-balanced baselines pass their weights.
  """
  logits, labels, in_range = check_logits_and_labels(logits, labels, where)
  return finish_per_example(-label_log_prob(logits, labels, in_range), labels, in_range, where,
                            class_weights, logits.shape[1])
