"""MR2 representation margin ℓ_s̄ (MR2 spec, 'Representation margin')."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from mr2_jax import class_stats as class_stats_lib
from _perclass import checks
from mr2_jax.class_stats import ClassStats

Array = Any


_TILE_SIZES = (8, 16, 32, 64, 128, 256, 512)
# Below this many multiply-adds (B·B_global·d) the dense product is cheaper than sorting, tiling and
# switching (measured: B = 128, d = 64 runs 0.32 ms per call tiled, less dense).
TILED_MIN_WORK = 1 << 22


def _log_one_plus_sum_exp(sq_dist, positive, s_bar, temperature):
  """log(1 + Σ_{j positive} exp((d_ij − 2 s̄)/τ)) over the last axis, as a stable log-sum-exp."""
  exponent = (sq_dist - 2.0 * s_bar) / temperature
  # log(1 + Σ_j e^{x_j}) as a log-sum-exp over {0} ∪ {x_j}; masked terms are replaced before exp
  # (double-where) so their gradient is exactly 0 rather than 0·inf.
  shift = jax.lax.stop_gradient(
      jnp.maximum(jnp.max(jnp.where(positive, exponent, -jnp.inf), axis=-1), 0.0))
  terms = jnp.where(positive, jnp.exp(jnp.where(positive, exponent, 0.0) - shift[..., None]), 0.0)
  return shift + jnp.log(jnp.exp(-shift) + jnp.sum(terms, axis=-1))


class ClassOrder(NamedTuple):
  """The global batch sorted by class: what every branch of ℓ_s̄ reads besides the features.

  `key` is the label of a valid row and `_MASKED` for a masked one (masked rows sort last and
  match nothing); `order` sorts the rows by key (stable), `inverse` undoes it; `first[r]` is the
  sorted position of the first row of sorted row r's class (its reference row).
  """
  key: jax.Array      # int32 [B_global]
  order: jax.Array    # int32 [B_global]
  inverse: jax.Array  # int32 [B_global]
  first: jax.Array    # int32 [B_global], in sorted positions


_MASKED = jnp.iinfo(jnp.int32).max


def class_order(labels: Array, valid: Array) -> tuple[ClassOrder, jax.Array]:
  """Sorts the global batch by class; returns (ClassOrder, the largest class count)."""
  rows = labels.shape[0]
  key = jnp.where(valid, labels, _MASKED).astype(jnp.int32)
  order = jnp.argsort(key, stable=True).astype(jnp.int32)
  position = jnp.arange(rows, dtype=jnp.int32)
  inverse = jnp.zeros((rows,), jnp.int32).at[order].set(position, unique_indices=True)
  sorted_key = key[order]
  starts = jnp.concatenate([jnp.ones((1,), bool), sorted_key[1:] != sorted_key[:-1]])
  first = jax.lax.cummax(jnp.where(starts, position, 0))
  run_length = position - first + 1
  largest = jnp.max(jnp.where(sorted_key != _MASKED, run_length, 0), initial=0)
  return ClassOrder(key, order, inverse, first), largest


@jax.custom_vjp
def _permute_rows(x, order, inverse):
  """x[order] for a permutation `order`; its transpose is the gather x̄[inverse] (not a scatter-add)."""
  del inverse
  return x[order]


def _permute_rows_fwd(x, order, inverse):
  return x[order], inverse


def _permute_rows_bwd(inverse, cotangent):
  return cotangent[inverse], None, None


_permute_rows.defvjp(_permute_rows_fwd, _permute_rows_bwd)


def _dense_anchor_loss(features, all_features, classes, valid, all_valid, s_bar, anchor_offset, *,
                       batch, temperature):
  """Local anchors against every row of the global batch: [B, B_global] distances.

  Rows are centred on their class's reference row (stop-gradient; the first row of the class in
  sorted order): pairs are same-class, so distances are unchanged, and the Gram form
  ‖u‖² + ‖v‖² − 2⟨u, v⟩ does not lose precision to large norms.
  """
  reference = classes.order[classes.first[classes.inverse]]  # [B_global] row index of the reference
  anchor_reference = jax.lax.dynamic_slice_in_dim(reference, anchor_offset, batch)
  frozen = jax.lax.stop_gradient(all_features)
  centred = jnp.where(valid[:, None], features - frozen[anchor_reference], 0.0)
  all_centred = jnp.where(all_valid[:, None], all_features - frozen[reference], 0.0)
  sq_norm_anchor = jnp.sum(jnp.square(centred), axis=-1)
  sq_norm_all = jnp.sum(jnp.square(all_centred), axis=-1)
  sq_dist = sq_norm_anchor[:, None] + sq_norm_all[None, :] - 2.0 * centred @ all_centred.T
  sq_dist = jnp.maximum(sq_dist, 0.0)
  anchor_key = jax.lax.dynamic_slice_in_dim(classes.key, anchor_offset, batch)
  positive = ((anchor_key[:, None] == classes.key[None, :]) & valid[:, None]
              & all_valid[None, :])
  anchor_index = jnp.arange(batch) + anchor_offset
  positive &= anchor_index[:, None] != jnp.arange(classes.key.shape[0])[None, :]
  return _log_one_plus_sum_exp(sq_dist, positive, s_bar, temperature)


def _windows(tiled, fill):
  """[n, T, ...] tiles → [n, 3T, ...]: the previous tile, the tile, the next tile (`fill` at ends)."""
  edge = jnp.full((1,) + tiled.shape[1:], fill, tiled.dtype)
  previous = jnp.concatenate([edge, tiled[:-1]], axis=0)
  following = jnp.concatenate([tiled[1:], edge], axis=0)
  return jnp.concatenate([previous, tiled, following], axis=1)


def _tile_loss_and_weights(tiles, key_t, live_t, s_bar, temperature):
  """Per-row ℓ_s̄ of class-sorted tiles [n, T, d], and P = ∂ℓ_s̄/∂(squared distance) · τ [n, T, 3T].

  Row t of tile a meets the window (tile a − 1, a, a + 1). P is the softmax weight of each positive
  pair in the log-sum-exp (0 for non-positives and where the Gram-form distance was clamped at 0).
  """
  tile = tiles.shape[1]
  sq_norm = jnp.sum(jnp.square(tiles), axis=-1)
  # Gram blocks of each tile with itself and with the next tile; the block with the previous tile is
  # the transpose of the previous tile's "next" block. Only [n, T, T] products, no [n, 3T, d] copy.
  own = jnp.einsum("ntd,nsd->nts", tiles, tiles)
  following = jnp.einsum("ntd,nsd->nts", tiles[:-1], tiles[1:])
  no_block = jnp.zeros((1, tile, tile), own.dtype)
  gram = jnp.concatenate([jnp.concatenate([no_block, jnp.swapaxes(following, 1, 2)], axis=0), own,
                          jnp.concatenate([following, no_block], axis=0)], axis=2)
  raw = sq_norm[:, :, None] + _windows(sq_norm, 0.0)[:, None, :] - 2.0 * gram
  key_w, live_w = _windows(key_t, _MASKED), _windows(live_t, False)
  # A row meets itself at window column T + t of its own tile: a static [T, 3T] mask.
  itself = jnp.eye(tile, 3 * tile, k=tile, dtype=bool)
  positive = ((key_t[:, :, None] == key_w[:, None, :]) & live_t[:, :, None] & live_w[:, None, :]
              & ~itself)
  exponent = (jnp.maximum(raw, 0.0) - 2.0 * s_bar) / temperature
  shift = jnp.maximum(jnp.max(jnp.where(positive, exponent, -jnp.inf), axis=-1), 0.0)
  terms = jnp.where(positive, jnp.exp(jnp.where(positive, exponent, 0.0) - shift[..., None]), 0.0)
  total = jnp.exp(-shift) + jnp.sum(terms, axis=-1)
  loss = shift + jnp.log(total)
  weights = jnp.where(raw > 0.0, terms / total[..., None], 0.0)
  return loss, weights


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _tile_loss(tiles, key_t, live_t, s_bar, temperature):
  """ℓ_s̄ of class-sorted tiles (see `_tile_loss_and_weights`) with a hand-written gradient.

  With G_ij = ḡ_i P_ij / τ for anchor i and window row j, and M = G + Gᵀ (a pair is seen from both
  of its rows), ∂/∂u_i = 2 Σ_j M_ij (u_i − u_j) = 2 (M 1 ⊙ u − M u)_i: three [T, T] × [T, d]
  products per tile (own, next, previous), no recomputed forward pass and no [n, 3T, d] copy.
  """
  return _tile_loss_and_weights(tiles, key_t, live_t, s_bar, temperature)[0]


def _tile_loss_fwd(tiles, key_t, live_t, s_bar, temperature):
  loss, weights = _tile_loss_and_weights(tiles, key_t, live_t, s_bar, temperature)
  return loss, (tiles, weights)


def _tile_loss_bwd(temperature, residuals, cotangent):
  tiles, weights = residuals
  tile = tiles.shape[1]
  g = (cotangent[:, :, None] * weights / temperature).astype(tiles.dtype)
  to_previous, to_own, to_next = g[:, :, :tile], g[:, :, tile:2 * tile], g[:, :, 2 * tile:]
  own = to_own + jnp.swapaxes(to_own, 1, 2)
  # Pairs between tile a and tile a + 1: seen from a (its "next" block) and from a + 1 (its
  # "previous" block, transposed).
  following = to_next[:-1] + jnp.swapaxes(to_previous[1:], 1, 2)  # [n − 1, T, T]
  # Its transpose, formed on its own: a product with a transposed left operand is not given to
  # XLA:CPU's fast dot path (it ran 3× slower), so the transpose is built before the product.
  preceding = jnp.swapaxes(to_next[:-1], 1, 2) + to_previous[1:]
  no_block = jnp.zeros((1, tile, tile), g.dtype)
  row_sum = (jnp.sum(own, axis=2) + jnp.concatenate([jnp.sum(following, axis=2), no_block[:, 0]])
             + jnp.concatenate([no_block[:, 0], jnp.sum(following, axis=1)]))
  product = jnp.einsum("nts,nsd->ntd", own, tiles)
  from_next = jnp.einsum("nts,nsd->ntd", following, tiles[1:])
  from_previous = jnp.einsum("nts,nsd->ntd", preceding, tiles[:-1])
  zero_tile = jnp.zeros((1,) + tiles.shape[1:], tiles.dtype)
  product += (jnp.concatenate([from_next, zero_tile]) + jnp.concatenate([zero_tile, from_previous]))
  grad = 2.0 * (row_sum[..., None] * tiles - product)
  return grad, None, None, None


_tile_loss.defvjp(_tile_loss_fwd, _tile_loss_bwd)


def _tiled_anchor_loss(features, all_features, classes, valid, all_valid, s_bar, anchor_offset, *,
                       tile, batch, temperature):
  """Every global row against the rows of its class only, on the class-sorted batch.

  Exact when every class has at most tile + 1 rows: then all same-class partners of a row lie
  within `tile` positions of it in sorted order, hence in its own or an adjacent tile. Rows are
  centred on their class's first sorted row (stop-gradient), as in the dense form.
  """
  del features, valid  # the local anchors are read back from the global result
  rows = all_features.shape[0]
  ordered = _permute_rows(all_features, classes.order, classes.inverse)
  live = all_valid[classes.order]
  centred = jnp.where(live[:, None],
                      ordered - jax.lax.stop_gradient(ordered)[classes.first], 0.0)
  padded = -(-rows // tile) * tile
  pad = padded - rows
  n = padded // tile
  tiles = jnp.pad(centred, ((0, pad), (0, 0))).reshape(n, tile, -1)
  key_t = jnp.pad(classes.key[classes.order], (0, pad), constant_values=_MASKED).reshape(n, tile)
  live_t = jnp.pad(live, (0, pad)).reshape(n, tile)
  sorted_loss = _tile_loss(tiles, key_t, live_t, s_bar, temperature).reshape(padded)[:rows]
  row_loss = sorted_loss[classes.inverse]
  return jax.lax.dynamic_slice_in_dim(row_loss, anchor_offset, batch)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _switch(branches, index, features, all_features, *rest):
  """`lax.switch(index, branches, ...)` whose gradient re-runs only the chosen branch.

  Differentiating `lax.switch` directly makes every branch return zero-filled copies of every other
  branch's residuals ([B, B_global] and [n, T, 3T] arrays alike): that alone cost more than the loss.
  Here the forward saves only the inputs and the backward takes the vjp of the chosen branch.
  Cotangents flow to the two feature arguments only.
  """
  return jax.lax.switch(index, branches, features, all_features, *rest)


def _switch_fwd(branches, index, features, all_features, *rest):
  return (_switch(branches, index, features, all_features, *rest),
          (index, features, all_features, rest))


def _switch_bwd(branches, residuals, cotangent):
  index, features, all_features, rest = residuals

  def pullback(branch):
    def run(features, all_features, *rest):
      _, vjp = jax.vjp(lambda c, a: branch(c, a, *rest), features, all_features)
      return vjp(cotangent)
    return run

  grads = jax.lax.switch(index, [pullback(b) for b in branches], features, all_features, *rest)
  return (None, *grads) + (None,) * len(rest)


_switch.defvjp(_switch_fwd, _switch_bwd)


def mean_class_deviation(stats: ClassStats) -> jax.Array:
  """s̄ = mean over seen classes k of V_k (0 when no class is seen). MR2 spec, 'Representation margin'."""
  stats = jax.lax.stop_gradient(stats)
  num_seen = jnp.sum(stats.seen)
  total = jnp.sum(jnp.where(stats.seen, stats.mean_sq_deviation, 0.0))
  return total / jnp.maximum(num_seen, 1).astype(total.dtype)


def representation_margin_loss(features: Array, labels: Array, s_bar: Array, *,
                               temperature: float = 1.0, axis_name: str | None = None,
                               where: Array | None = None, num_classes: int | None = None
                               ) -> jax.Array:
  """Per-anchor representation margin. MR2 spec, 'Representation margin'.

      ℓ_s̄(x_i) = log(1 + Σ_{j ≠ i, y_j = y_i} exp((‖φ_i − φ_j‖₂² − 2 s̄) / τ))

  Positives are the other examples of the anchor's class in the (global) batch; an anchor with no
  positive gives 0. Computed as a log-sum-exp that includes the implicit 0 term, so neither the value
  nor the gradient overflows for large feature norms. Distances are taken between features centred on
  a (stop-gradient) reference row of their class, its first row in class-sorted order: pairs are
  same-class, so the value is unchanged, and the Gram-matrix form ‖u‖² + ‖v‖² − 2⟨u, v⟩ does not
  lose precision to large norms. φ is not detached.

  Args:
    features: float [B, d] features φ (local batch).
    labels: int [B] labels in [0, K).
    s_bar: scalar s̄ (treated as a constant), e.g. `mean_class_deviation(stats)`.
    temperature: τ > 0 (1 in the paper form; 10·d in the released-code form).
    axis_name: data-parallel axis; positives come from the features all-gathered over it (gradients
      flow back to the device that owns each feature).
    where: optional bool [B]; masked rows are neither anchors (loss 0) nor positives.
    num_classes: K, to range-check labels against [0, K); when None, labels need only be ≥ 0
      (positives are matched by label equality, so K is not otherwise needed).

  Cost: positives are same-class pairs, so the global batch is sorted by class and the squared
  distances are computed in tiles of T rows against the tile before, the tile itself and the tile
  after (2·T·B_global·d multiply-adds; the hand-written gradient 3·T·B_global·d and no recomputed
  forward pass), with T the smallest of 8, 16, … that covers the largest class
  of the batch (largest count − 1 ≤ T). When no tile is smaller than a quarter of the local batch, or
  the dense local-anchors × global-rows product (B·B_global·d) is below `TILED_MIN_WORK`, the dense
  product is used. Both are exact; the choice is made at run time (`lax.switch`) from the batch's
  class counts.

  Returns:
    float [B] per-anchor losses (the caller reduces them).
  """
  features = checks.check_floating(features, 2, "features")
  if not temperature > 0:
    raise ValueError(f"temperature: expected τ > 0, got {temperature}.")
  if num_classes is None:
    num_classes = int(jnp.iinfo(jnp.int32).max)
  features, labels, valid = class_stats_lib.check_stats_inputs(features, labels, num_classes, where)
  s_bar = jnp.asarray(s_bar, features.dtype)
  if s_bar.ndim != 0:
    raise ValueError(f"s_bar: expected a scalar, got shape {s_bar.shape}.")
  s_bar = jax.lax.stop_gradient(s_bar)

  batch = labels.shape[0]
  if axis_name is None:
    all_features, all_labels, all_valid, anchor_offset = features, labels, valid, 0
  else:
    # Positives come from the global batch. Only this all-gather crosses devices: the class means
    # used for centring are computed here from the gathered rows (no psum), and gradients flow back
    # through the gather to the device that owns each row.
    all_features = jax.lax.all_gather(features, axis_name, tiled=True)
    all_labels = jax.lax.all_gather(labels, axis_name, tiled=True)
    all_valid = jax.lax.all_gather(valid, axis_name, tiled=True)
    anchor_offset = jax.lax.axis_index(axis_name) * batch
  classes, largest = class_order(all_labels, all_valid)
  dense_work = batch * all_features.shape[0] * all_features.shape[1]
  tiles = (tuple(t for t in _TILE_SIZES if 4 * t <= batch) if dense_work >= TILED_MIN_WORK
           else ())
  dense = functools.partial(_dense_anchor_loss, batch=batch, temperature=temperature)
  operands = (features, all_features, classes, valid, all_valid, s_bar,
              jnp.asarray(anchor_offset, jnp.int32))
  if not tiles:
    loss = dense(*operands)
  else:
    # The smallest tile T with (largest class count − 1) ≤ T, else the dense form. Exact either way.
    branch = jnp.sum(jnp.asarray(tiles, jnp.int32) < largest - 1).astype(jnp.int32)
    branches = tuple(functools.partial(_tiled_anchor_loss, tile=t, batch=batch,
                                       temperature=temperature) for t in tiles) + (dense,)
    loss = _switch(branches, branch, *operands)
  # An out-of-range label (possible only under tracing) gives NaN, never a silently dropped anchor.
  out_of_range = checks.check_where(where, batch) & ~((labels >= 0) & (labels < num_classes))
  return jnp.where(valid, loss, jnp.where(out_of_range, jnp.nan, 0.0))
