r"""The exact forms of MR2's representation margin ℓ_s̄ and the run-time choice among them.

Zhu et al., ICLR 2026, arXiv 2602.00205:

.. math::

    \ell_{\bar s}(x_i) = \log \Bigl(1 + \sum_{j \ne i,\, y_j = y_i}
      \exp\bigl((\lVert \phi_i - \phi_j \rVert_2^2 - 2 \bar s) / \tau\bigr)\Bigr).

`mr2_jax.representation_margin_loss` (the public function) sorts the global batch by class and
calls `_switch` with the branches of `_branches`: the dense product, tiles of T rows, or the band
of `_BAND_SHIFTS` neighbours, each with a hand-written backward pass; all are exact, and `_choose`
picks the cheapest exact one from the batch's class counts.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from mr2_reweight_core import class_order as class_order_lib


_TILE_SIZES = (8, 16, 32, 64, 128, 256, 512)
# Classes of at most this many + 1 rows (K ≫ B) use the band form (`_Band`) instead of tiles.
_BAND_SHIFTS = 4
# Below this many multiply-adds (B·B_global·d) the dense product is cheaper than sorting, tiling and
# switching (measured: B = 128, d = 64 runs 0.32 ms per call tiled, less dense).
TILED_MIN_WORK = 1 << 22


# Feature widths up to which squared distances come from one product of augmented rows.
_AUGMENTED_MAX_DIM = 16


def _sq_distances(left, right, sq_left, sq_right):
  """‖l_i − r_j‖² [..., I, J] for rows [..., I, d] and [..., J, d], in the Gram form
  ‖l_i‖² + ‖r_j‖² − 2⟨l_i, r_j⟩ with the rows' squared norms given (callers centre the rows, so no
  precision is lost to large norms).

  The loss reads each distance twice (the log-sum-exp's maximum, then its exponentials), and XLA
  recomputes an element-wise producer inside each consumer; the copies must round alike. The product
  ⟨l, r⟩ of a dot is computed once, and 2⟨l, r⟩ is exact, so ‖l‖² + ‖r‖² − 2⟨l, r⟩ rounds the same
  anywhere. But XLA rewrites a dot with a contraction of size 1 (d = 1) into an element-wise multiply,
  fused into both consumers, where one copy may contract the multiply and subtraction into an FMA
  and the other not: distances of 10⁹ then differ by ~10², and with τ = 1 exp overflowed (the slow
  property run: ℓ_s̄ = inf at features of 10⁴, d = 1, under jit only). For d ≤ _AUGMENTED_MAX_DIM the
  distance is therefore the single product [−2 l, ‖l‖², 1] · [r, 1, ‖r‖²] (a contraction of d + 2,
  copies of negligible size); wider rows keep the plain form (no [·, d + 2] copy).
  """
  if left.shape[-1] <= _AUGMENTED_MAX_DIM:
    left = jnp.concatenate([-2.0 * left, sq_left[..., None], jnp.ones_like(sq_left)[..., None]], -1)
    right = jnp.concatenate([right, jnp.ones_like(sq_right)[..., None], sq_right[..., None]], -1)
    return jnp.einsum("...id,...jd->...ij", left, right)
  return (sq_left[..., :, None] + sq_right[..., None, :]
          - 2.0 * jnp.einsum("...id,...jd->...ij", left, right))


def _pair_loss_and_weights(raw_sq_dist, positive, s_bar, temperature):
  """ℓ_s̄ over the last axis, and the pair weights P = τ · ∂ℓ_s̄/∂(squared distance).

  ℓ = log(1 + Σ_{j positive} e^{x_j}), x_j = (max(d_j, 0) − 2 s̄)/τ, as a log-sum-exp that includes
  the implicit 0 term (no overflow for large norms); P_j = e^{x_j} / (1 + Σ_k e^{x_k}) for positives,
  0 for the others. P is not zeroed where the Gram-form d_j rounded to ≤ 0 (a near-duplicate pair,
  whose gradient 2 G (u_i − u_j) is then ~0 by itself): a threshold on a rounded value made XLA's
  recomputed copies of P disagree (the slow property run found row sums and products using
  different sets of pairs, a 1.5 % error in one row's gradient).
  """
  exponent = (jnp.maximum(raw_sq_dist, 0.0) - 2.0 * s_bar) / temperature
  shift = jnp.maximum(jnp.max(jnp.where(positive, exponent, -jnp.inf), axis=-1), 0.0)
  # Masked terms are replaced before exp, so no inf or NaN is ever formed for them.
  terms = jnp.where(positive, jnp.exp(jnp.where(positive, exponent, 0.0) - shift[..., None]), 0.0)
  total = jnp.exp(-shift) + jnp.sum(terms, axis=-1)
  return shift + jnp.log(total), terms / total[..., None]


def _dense_loss_and_weights(centred, key, live, s_bar, anchor_positions, temperature):
  """Local anchors against every row of the class-sorted global batch: [B, P] distances.

  `centred` [P, d] are the class-sorted rows centred on their class's reference row, `key` / `live`
  their class key and validity, `anchor_positions` [B] the sorted positions of the local anchors.
  Returns (ℓ_s̄ [B], the pair weights P [B, P], see `_pair_loss_and_weights`).
  """
  sq_norm = jnp.sum(jnp.square(centred), axis=-1)
  raw = _sq_distances(centred[anchor_positions], centred, sq_norm[anchor_positions], sq_norm)
  positive = ((key[anchor_positions][:, None] == key[None, :]) & live[anchor_positions][:, None]
              & live[None, :])
  positive &= anchor_positions[:, None] != jnp.arange(key.shape[0])[None, :]
  return _pair_loss_and_weights(raw, positive, s_bar, temperature)


def _dense_gradient(centred, anchor_positions, weights, cotangent, temperature):
  """∂(Σ_i ḡ_i ℓ_i)/∂u for the dense form: with G_ij = ḡ_i P_ij / τ, anchor i gets
  2 (Σ_j G_ij u_i − Σ_j G_ij u_j) and row j gets 2 (Σ_i G_ij u_j − Σ_i G_ij u_i)."""
  anchors = centred[anchor_positions]
  g = (cotangent[:, None] * weights / temperature).astype(centred.dtype)
  as_partner = 2.0 * (jnp.sum(g, axis=0)[:, None] * centred - g.T @ anchors)
  as_anchor = 2.0 * (jnp.sum(g, axis=1)[:, None] * anchors - g @ centred)
  return as_partner.at[anchor_positions].add(as_anchor, unique_indices=True)


def _windows(tiled, fill):
  """[n, T, ...] tiles → [n, 3T, ...]: the previous tile, the tile, the next tile (`fill` at ends)."""
  edge = jnp.full((1,) + tiled.shape[1:], fill, tiled.dtype)
  previous = jnp.concatenate([edge, tiled[:-1]], axis=0)
  following = jnp.concatenate([tiled[1:], edge], axis=0)
  return jnp.concatenate([previous, tiled, following], axis=1)


def _tile_loss_and_weights(tiles, key_t, live_t, s_bar, temperature):
  """Per-row ℓ_s̄ of class-sorted tiles [n, T, d], and P = ∂ℓ_s̄/∂(squared distance) · τ [n, T, 3T].

  Row t of tile a meets the window (tile a − 1, a, a + 1). P is the softmax weight of each positive
  pair in the log-sum-exp (0 for non-positives).
  """
  tile = tiles.shape[1]
  # Distance blocks of each tile with itself and with the next tile; the block with the previous
  # tile is the transpose of the previous tile's "next" block. Only [n, T, T] products, no
  # [n, 3T, d] copy. The blocks past either end are 0 (those window rows are masked).
  sq_norm = jnp.sum(jnp.square(tiles), axis=-1)
  own = _sq_distances(tiles, tiles, sq_norm, sq_norm)
  following = _sq_distances(tiles[:-1], tiles[1:], sq_norm[:-1], sq_norm[1:])
  no_block = jnp.zeros((1, tile, tile), own.dtype)
  raw = jnp.concatenate([jnp.concatenate([no_block, jnp.swapaxes(following, 1, 2)], axis=0), own,
                         jnp.concatenate([following, no_block], axis=0)], axis=2)
  key_w, live_w = _windows(key_t, class_order_lib.MASKED), _windows(live_t, False)
  # A row meets itself at window column T + t of its own tile: a static [T, 3T] mask.
  itself = jnp.eye(tile, 3 * tile, k=tile, dtype=bool)
  positive = ((key_t[:, :, None] == key_w[:, None, :]) & live_t[:, :, None] & live_w[:, None, :]
              & ~itself)
  return _pair_loss_and_weights(raw, positive, s_bar, temperature)


def _tile_gradient(tiles, weights, cotangent, temperature):
  """∂(Σ_i ḡ_i ℓ_i)/∂u for class-sorted tiles [n, T, d] with pair weights [n, T, 3T].

  With G_ij = ḡ_i P_ij / τ for anchor i and window row j, and M = G + Gᵀ (a pair is seen from both
  of its rows), ∂/∂u_i = 2 Σ_j M_ij (u_i − u_j) = 2 (M 1 ⊙ u − M u)_i: three [T, T] × [T, d]
  products per tile (own, next, previous), no [n, 3T, d] copy.
  """
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
  # The products are taken against the whole, unsliced `tiles` (a sliced right operand ran 4× slower
  # on XLA:CPU) and their outputs are shifted instead: tile c's rows reach tile c − 1 through the
  # block of the pair (c − 1, c) and tile c + 1 through the block of the pair (c, c + 1).
  to_earlier = jnp.einsum("nts,nsd->ntd", jnp.concatenate([no_block, following]), tiles)
  to_later = jnp.einsum("nts,nsd->ntd", jnp.concatenate([preceding, no_block]), tiles)
  zero_tile = jnp.zeros((1,) + tiles.shape[1:], tiles.dtype)
  product = (jnp.einsum("nts,nsd->ntd", own, tiles) + jnp.concatenate([to_earlier[1:], zero_tile])
             + jnp.concatenate([zero_tile, to_later[:-1]]))
  grad = 2.0 * (row_sum[..., None] * tiles - product)
  return grad




def _at_positions(sorted_values: jax.Array, positions: jax.Array) -> jax.Array:
  """sorted_values[positions] [B, ...] for the first `rows` sorted positions; 0 at positions past
  them. Reads the local anchors' losses (positions = their sorted positions) and maps a gradient
  back through the sort (positions = `ClassOrder.inverse`: the sort's transpose)."""
  rows = sorted_values.shape[0]
  inside = (positions < rows).reshape(positions.shape + (1,) * (sorted_values.ndim - 1))
  return jnp.where(inside, sorted_values[jnp.minimum(positions, rows - 1)], 0.0)


def _to_sorted(cotangent: jax.Array, anchor_positions: jax.Array, rows: int) -> jax.Array:
  """The local anchors' cotangent [B] at their sorted positions among `rows` (0 elsewhere)."""
  return jnp.zeros((rows,), cotangent.dtype).at[anchor_positions].set(
      cotangent, mode="drop", unique_indices=True)


def _saved(weights: jax.Array, size: int) -> jax.Array:
  """Pair weights flattened and zero-padded to `size`: every branch of the switch saves the same
  residual."""
  weights = weights.reshape(-1)
  return jnp.pad(weights, (0, size - weights.shape[0]))


class _Band(NamedTuple):
  """ℓ_s̄ on the first `rows` rows of the class-sorted batch when no class has more than `shifts` + 1
  rows: each class is a run of ≤ `shifts` + 1 consecutive sorted rows, so every positive pair is
  (r, r + s) for some s ≤ `shifts`.

  The squared distance of each positive pair is taken from the difference of its two rows, ‖φ_r −
  φ_{r+s}‖² (`_pair_distances`: no product, no centring; the difference is as exact as the rows),
  and the backward pass is one element-wise pass over the sorted rows,
      ∂/∂φ_r = 2 Σ_s [c_s(r) (φ_r − φ_{r+s}) − c_s(r − s) (φ_{r−s} − φ_r)],
  c_s(r) = ḡ_r P_{r,r+s}/τ + ḡ_{r+s} P_{r+s,r}/τ. When K ≫ B the classes are small (B = 512 over
  K = 1000: rarely more than 5 rows), where tiles of 4 rows spent their time in tiny batched
  products. The pair weights P are [rows, 2·shifts]: partners r + 1 … r + S, then r − 1 … r − S.
  The positive pairs' distances are taken from a list of `pairs` entries: exact when the batch has
  no more same-class pairs than that (`_choose` checks).
  """
  rows: int
  shifts: int
  pairs: int
  temperature: float

  @property
  def reach(self) -> int:
    return self.shifts

  @property
  def capacity(self) -> int:
    return self.pairs

  def weights_size(self, batch: int) -> int:
    del batch
    return self.rows * 2 * self.shifts

  def _pairs(self, order):
    """[S, rows] masks: sorted rows r and r + s (s = 1 … S) are a positive pair."""
    key = jnp.pad(order.key[:self.rows], (0, self.shifts), constant_values=class_order_lib.MASKED)
    live = key[:self.rows] != class_order_lib.MASKED
    return jnp.stack([live & (key[:self.rows] == key[s:s + self.rows])
                      for s in range(1, self.shifts + 1)])

  def _pair_distances(self, features, order, pair):
    """‖φ_r − φ_{r+s}‖² [S, rows] of the positive pairs (0 elsewhere).

    The positive pairs are listed first (`pairs` entries; unused ones read row 0) and only their
    two rows are gathered: 2·pairs·d floats instead of rows·(S + 1)·d for every (r, r + s) — B = 512
    over K = 1000 has ~130 pairs among ~200 rows with a partner, in a list of 256."""
    rows, shifts = self.rows, self.shifts
    size = self.pairs
    flat = pair.reshape(-1)  # s-major: entry (s − 1)·rows + r is the pair (r, r + s)
    slot = jnp.where(flat, jnp.cumsum(flat, dtype=jnp.int32) - 1, size)  # `size`: dropped
    index = jnp.pad(order.order[:rows], (0, shifts))
    first = jnp.tile(jnp.arange(rows, dtype=jnp.int32), shifts)
    second = first + jnp.repeat(jnp.arange(1, shifts + 1, dtype=jnp.int32), rows)
    left = jnp.zeros((size,), jnp.int32).at[slot].set(index[first], mode="drop")
    right = jnp.zeros((size,), jnp.int32).at[slot].set(index[second], mode="drop")
    listed = jnp.sum(jnp.square(features[left] - features[right]), axis=-1)
    return jnp.where(pair, listed[jnp.minimum(slot, size - 1)].reshape(shifts, rows), 0.0)

  def forward(self, size, features, order, s_bar, anchor_positions):
    rows, shifts = self.rows, self.shifts
    pair = self._pairs(order)
    distance = self._pair_distances(features, order, pair)
    # One materialised copy: the log-sum-exp reads each distance twice and the copies must agree
    # (see `_sq_distances`).
    distance = jax.lax.optimization_barrier(distance)

    def earlier(x):  # pair (r − s, r), seen from r
      return jnp.stack([jnp.pad(x[s - 1], (s, 0))[:rows] for s in range(1, shifts + 1)])

    sorted_loss, weights = _pair_loss_and_weights(
        jnp.concatenate([distance, earlier(distance)]).T, jnp.concatenate([pair, earlier(pair)]).T,
        s_bar, self.temperature)
    return _at_positions(sorted_loss, anchor_positions), _saved(weights, size)

  def backward(self, features, order, s_bar, anchor_positions, weights, cotangent):
    del s_bar
    rows, shifts = self.rows, self.shifts
    sorted_rows = features[jnp.pad(order.order[:rows], (shifts, shifts))]  # rows −S … rows + S − 1
    own = sorted_rows[shifts:shifts + rows]
    pair = self._pairs(order)
    sorted_cotangent = _to_sorted(cotangent, anchor_positions, rows)
    g = (sorted_cotangent[:, None] * weights[:self.weights_size(0)].reshape(rows, 2 * shifts)
         / self.temperature).astype(features.dtype)
    grad = jnp.zeros_like(own)
    for s in range(1, shifts + 1):
      # c_s(r): pair (r, r + s) as anchor r's partner r + s and anchor r + s's partner r.
      c = g[:, s - 1] + jnp.pad(g[s:, shifts + s - 1], (0, s))
      later = jnp.where(pair[s - 1][:, None], c[:, None] * (own - sorted_rows[shifts + s:][:rows]),
                        0.0)
      c_earlier, pair_earlier = jnp.pad(c, (s, 0))[:rows], jnp.pad(pair[s - 1], (s, 0))[:rows]
      before = jnp.where(pair_earlier[:, None],
                         c_earlier[:, None] * (sorted_rows[shifts - s:][:rows] - own), 0.0)
      grad = grad + later - before
    return _at_positions(2.0 * grad, order.inverse)


class _Branch(NamedTuple):
  """One form of ℓ_s̄ on the first `rows` rows of the class-sorted batch: tiles of `tile` rows, or
  the dense form (`tile` None, every row).

  Rows from `ClassOrder.active` on have no positive, so a branch whose `rows` covers the active
  rows is exact; when K ≫ B most rows are such singletons and only the first few rows are read.
  `forward` sorts and centres its rows, and returns the local anchors' losses and the pair weights
  (flattened, zero-padded to `size` so that every branch of the switch saves the same residual);
  `backward` maps the losses' cotangent to the (unsorted) rows' from those weights, without a
  recomputed forward pass (only the [rows, d] centring is recomputed).
  """
  rows: int
  tile: int | None
  temperature: float

  @property
  def reach(self) -> int | None:
    """The largest class − 1 this branch is exact for (None: any)."""
    return self.tile

  @property
  def capacity(self) -> None:
    """The most same-class pairs this branch is exact for (None: any)."""
    return None

  def weights_size(self, batch: int) -> int:
    return batch * self.rows if self.tile is None else self.rows * 3 * self.tile

  def forward(self, size, features, order, s_bar, anchor_positions):
    centred, live = class_order_lib.centred_prefix(features, order, self.rows)
    key = order.key[:self.rows]
    if self.tile is None:
      loss, weights = _dense_loss_and_weights(centred, key, live, s_bar, anchor_positions,
                                              self.temperature)
    else:
      # Every row against the rows of its class only: exact when every class has at most T + 1
      # rows, since all same-class partners of a row then lie within T positions of it in sorted
      # order, hence in its own or an adjacent tile.
      n = self.rows // self.tile
      sorted_loss, weights = _tile_loss_and_weights(
          centred.reshape(n, self.tile, -1), key.reshape(n, self.tile),
          live.reshape(n, self.tile), s_bar, self.temperature)
      loss = _at_positions(sorted_loss.reshape(-1), anchor_positions)
    return loss, _saved(weights, size)

  def backward(self, features, order, s_bar, anchor_positions, weights, cotangent):
    del s_bar
    centred, live = class_order_lib.centred_prefix(features, order, self.rows)
    batch = anchor_positions.shape[0]
    weights = weights[:self.weights_size(batch)]
    if self.tile is None:
      grad = _dense_gradient(centred, anchor_positions, weights.reshape(batch, self.rows),
                             cotangent, self.temperature)
    else:
      n = self.rows // self.tile
      sorted_cotangent = _to_sorted(cotangent, anchor_positions, self.rows)
      grad = _tile_gradient(centred.reshape(n, self.tile, -1),
                            weights.reshape(n, self.tile, 3 * self.tile),
                            sorted_cotangent.reshape(n, self.tile), self.temperature)
      grad = grad.reshape(self.rows, -1)
    # The reference rows are constants (stop-gradient): ∂u_r/∂φ_r = I for a live sorted row r, and
    # the sort's transpose is the gather by `inverse` (rows sorted past `rows` get 0).
    return _at_positions(jnp.where(live[:, None], grad, 0.0), order.inverse)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _switch(branches, index, features, *rest):
  """ℓ_s̄ of the local anchors by the branch `index` (a `lax.switch` over `_Branch.forward`).

  Its gradient runs only the chosen branch's hand-written backward pass, from the pair weights the
  forward pass saved. Differentiating `lax.switch` directly makes every branch return zero-filled
  copies of every other branch's residuals, and re-running the chosen branch under `jax.vjp`
  repeats its forward pass; here the one saved residual is the weights, zero-padded to the
  largest branch's size (≤ B·P floats). `rest` = (the `ClassOrder` padded to the largest branch's
  rows, s̄, the local anchors' sorted positions). Cotangents flow to `features` only.
  """
  return _switch_fwd(branches, index, features, *rest)[0]


def _switch_fwd(branches, index, features, *rest):
  batch = rest[-1].shape[0]
  size = max(b.weights_size(batch) for b in branches)
  loss, weights = jax.lax.switch(index, [functools.partial(b.forward, size) for b in branches],
                                 features, *rest)
  return loss, (index, features, rest, weights)


def _switch_bwd(branches, residuals, cotangent):
  index, features, rest, weights = residuals
  grad = jax.lax.switch(index, [b.backward for b in branches], features, *rest, weights, cotangent)
  return (None, grad) + (None,) * len(rest)


_switch.defvjp(_switch_fwd, _switch_bwd)


def _branches(rows: int, batch: int, dim: int, temperature: float
              ) -> tuple[_Band | _Branch, ...]:
  """The forms of ℓ_s̄ for a global batch of `rows` (a local batch of `batch`): over the first P/8,
  P/4 or P/2 sorted rows, the band of `_BAND_SHIFTS` and tiles of 8 (4·T ≤ prefix); over all P
  (padded) rows, the band, tiles of 8, 16, … with 4·T ≤ B, then the dense form, last. Only the dense
  form when its product (B·P·d) is below `TILED_MIN_WORK`.

  Each branch adds its forward and backward pass to the compiled step (≈ 1.3 s of XLA:CPU compile
  time each at B = 512, d = 2048), so the shorter prefixes — the K ≫ B regime, where classes are
  small — get only the band and the smallest tile."""
  if batch * rows * dim < TILED_MIN_WORK:
    return (_Branch(rows, None, temperature),)
  tiles = tuple(t for t in _TILE_SIZES if 4 * t <= batch)
  padded = rows + (-rows % tiles[-1] if tiles else 0)
  branches = []
  for size in class_order_lib.prefix_sizes(padded):
    if size > _BAND_SHIFTS:
      branches.append(_Band(size, _BAND_SHIFTS, size, temperature))
    sized = tiles if size == padded else tiles[:1]
    branches += [_Branch(size, t, temperature) for t in sized if 4 * t <= size and size % t == 0]
  return tuple(branches) + (_Branch(padded, None, temperature),)


def _choose(branches: tuple[_Band | _Branch, ...], active: jax.Array, largest: jax.Array,
            pairs: jax.Array) -> jax.Array:
  """The cheapest exact branch: the fewest rows × reach (band shifts or tile rows) among the
  branches that cover the active rows (rows ≥ active), the largest class (largest − 1 ≤ reach) and
  the batch's same-class pairs (a band's list); else the dense form (last). A band comes before a
  tile of the same cost."""
  banded = branches[:-1]
  if not banded:
    return jnp.int32(0)
  rows = jnp.asarray([b.rows for b in banded], jnp.int32)
  reach = jnp.asarray([b.reach for b in banded], jnp.int32)
  capacity = jnp.asarray([jnp.iinfo(jnp.int32).max if b.capacity is None else b.capacity
                          for b in banded], jnp.int32)
  exact = (rows >= active) & (reach >= largest - 1) & (capacity >= pairs)
  best = jnp.argmin(jnp.where(exact, rows * reach, jnp.iinfo(jnp.int32).max)).astype(jnp.int32)
  return jnp.where(jnp.any(exact), best, len(banded)).astype(jnp.int32)
