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


def label_log_softmax(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """log softmax(z)_y = (z_y − m) − log Σ_k exp(z_k − m), m = max_k z_k, per example [B].

  The same rounding as `jax.nn.log_softmax` (the label's shifted logit is exact, 0 when it is the
  maximum), without materialising the [B, K] log-probabilities. Labels must be valid indices
  (callers pass `index_labels(labels, in_range)` and mask the result).
  """
  shifted = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  return (jnp.take_along_axis(shifted, labels[:, None], axis=-1)[:, 0]
          - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1)))


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
