r"""ℓ_s̄ of a whole batch on one device in batch order, for batches small enough for the dense
[B, B] form alone (Zhu et al., ICLR 2026, arXiv 2602.00205: the representation margin).

The class-sorted forms (`representation_margin_forms`) sort the batch so that tiles or a band
reach only same-class rows; when the dense product is the only form (B·B·d below
`TILED_MIN_WORK`, e.g. CIFAR's B = 128, d = 64) the sort buys nothing, and at that size its ~40
small operations (sort, run starts, cumulative sums, scatters, gathers) cost as much as the
product. Here every pair is read in batch order: the same-class mask and each row's reference row
(its class's first valid row in batch order, the row the sorted forms centre on) come from one
[B, B] comparison, and with every row an anchor the gradient is one product,
:math:`2\,(M\mathbf{1} \odot u - M u)` with :math:`M = G + G^\top`, where the sorted dense form
takes two and a scatter. The same pairs, centred rows and loss; sums in another order (float32
rounding).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from mr2_jax.representation_margin_forms import _pair_loss_and_weights
from mr2_jax.representation_margin_forms import _sq_distances


def _centred_pairs(features, labels, valid):
  """(u [B, d], positive [B, B]): each valid row minus its class's first valid row (0 for the
  others), and the same-class pairs of distinct valid rows."""
  rows = labels.shape[0]
  position = jnp.arange(rows, dtype=jnp.int32)
  same = (labels[:, None] == labels[None, :]) & valid[:, None] & valid[None, :]
  first = jnp.minimum(jnp.min(jnp.where(same, position[None, :], rows), axis=1), rows - 1)
  centred = jnp.where(valid[:, None], features - features[first], 0.0)
  return centred, same & (position[:, None] != position[None, :])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def dense_batch_order(features, labels, valid, s_bar, temperature):
  """ℓ_s̄ [B] of every row of `features` [B, d] against the batch's same-class valid rows (0 for
  a row with none); `s_bar` a constant, `temperature` a Python float. Cotangents reach
  `features` only."""
  return _forward(features, labels, valid, s_bar, temperature)[0]


def _forward(features, labels, valid, s_bar, temperature):
  centred, positive = _centred_pairs(features, labels, valid)
  sq_norm = jnp.sum(jnp.square(centred), axis=-1)
  loss, weights = _pair_loss_and_weights(_sq_distances(centred, centred, sq_norm, sq_norm),
                                         positive, s_bar, temperature)
  return loss, (centred, weights, valid)


def _backward(temperature, residuals, cotangent):
  """With G_ij = ḡ_i P_ij / τ and M = G + Gᵀ (a pair is seen from both of its rows),
  ∂/∂u_i = 2 Σ_j M_ij (u_i − u_j); the reference rows are constants, so ∂u_i/∂φ_i = I."""
  centred, weights, valid = residuals
  g = (cotangent[:, None] * weights / temperature).astype(centred.dtype)
  m = g + g.T
  grad = 2.0 * (jnp.sum(m, axis=1)[:, None] * centred - m @ centred)
  return jnp.where(valid[:, None], grad, 0.0), None, None, None


dense_batch_order.defvjp(_forward, _backward)
