"""Property-based tests (hypothesis) of the two comparison losses that read model outputs of their
wrapper: `reweight_jax.baselines.supcon_loss` (with `reweight_jax.baselines.stack_views`) and `reweight_jax.baselines.lff_loss` (with
`init_lff_state`), against the float64 loop references tests/reference/numpy_supcon.py and
tests/reference/numpy_jtt_lff.py. Inputs: tests/strategies.py (`S`) and the strategies below;
profiles: tests/conftest.py (the default profile: a few examples per parametrised test on one fixed
shape of a narrow pool; the `@pytest.mark.slow` twins: 1,000 examples over the wide pools,
`-m slow`, HYPOTHESIS_SLOW_EXAMPLES=N for another count).

Generated inputs:
* SupCon: B images (buckets 1, 3, 8, 16, 32, 64; 0 … B real images, the rest padding), 2 views each
  (N = 2B rows, stacked by `stack_views`), d ∈ {1, 8}, K ∈ [1, 300] (K > B included), the label
  patterns of tests/strategies.py (absent classes, singletons: every anchor's only positive is its
  other view, one-class batches, …), single views dropped (`where` per row: anchors without
  positives), rows unit-normalised, or unnormalised at a scale 10^[-3, 2], or with per-row norms
  10^[-3, 2] ("ragged"); τ/τ_b ∈ {0.1/0.07, 0.07/0.07, 0.5/0.07}. Scale bound 10²: ‖z‖ ≲ 3·10³
  (d = 8, offset 3, unit-variance centres and noise), so |s| = |z·z|/τ ≲ 10⁸. The float64 reference
  (its exp arguments are ≤ 0: it subtracts the maximum over A(i)) is finite for any ‖z‖ < 10¹⁵⁰ and
  the float32 library for ‖z‖²/τ < 3·10³⁸; the bound is where the float32 logits themselves are
  known only to ~10 units (ε·|s|), the worst conditioning the tolerances below still describe (the
  softmax weights may then change completely: their bound is min(1, p·expm1(η))).
* LfF: B rows (buckets 1, 3, 8, 16, 32, 64; 0 … B real per step), a training set of N = B … 4B
  examples with dataset labels from the label patterns (uniform = random in [0, K)), a fresh or a
  prior state (some examples seen, EMAs over four decades, some exactly 0), 1–4 steps, real rows
  take distinct indices (first visits, revisits across steps, or a mix), logits of both models at
  scales 10^[-3, 4] (gaussian, ties, confident); (q, α) ∈ {(.7, .7), (.3, .9), (1, 0), (.5, 1)}.
* Both: float32 or bfloat16 inputs; padding rows (`where=False`) hold garbage (zeros, ±1e30, NaN,
  ±inf; labels — and LfF indices — in or out of range, LfF indices possibly equal to a real row's),
  at the end or scattered, or every row is padding.

Properties (named in every assertion message):
  (a) agreement with the float64 references (on the inputs as rounded to their dtype) within C·ε·S:
      C = 16, ε the epsilon of the dtype the computation runs in, S a first-order rounding-error
      scale evaluated on the reference's own intermediates (`supcon_expected`, `lff_expected`);
      where that error moves an exponent (softmax weights) or a ratio of near-zero quantities (LfF's
      ẽ = e / class max), the bound is propagated exactly (expm1, intervals) instead of linearised;
  (b) the loss, gradients (wrt the projections / both logits) and the new LfF state are finite
      wherever the reference loss is (here: always — both references are finite for finite inputs);
  (c) LfF: the state changes only at the step's real indices (e_B, e_D, seen bit-for-bit unchanged
      elsewhere, in particular at a padding row's in-range index);
  (d) padding rows change nothing: the results are the reference's on the real rows only; their
      per-anchor values / weights are 0 and their gradients exactly 0;
  (e) permuting the batch changes nothing: SupCon's images permuted, their views swapped at random
      (a permutation of the 2B rows); LfF's rows permuted within each step (distinct indices): loss
      and gradients (permuted back) within twice the (a) tolerance / rounding, the new LfF state
      bit-for-bit identical;
  (f) splitting the batch over 2/4/8 devices under `jax.shard_map` (the trainer's pattern:
      replicated inputs sliced per device, batch-sharded labels / masks / indices, pmean of the
      loss shares and of the gradients, `check_vma=False`) equals one device; every device holds
      the same LfF state (bit-for-bit), which is the one-device state within the (a) tolerance;
      SupCon's per-device stacking (`stack_views` on each device's images) gives each anchor the
      same ℓ_i.

Dtypes: SupCon upcasts narrower-than-float32 projections to float32 (its docstring): checked bit for
bit against the float32 call on the same values (the gradient of a bf16 input is the float32 one
rounded to bf16), and its tolerances use ε = 2⁻²³ plus the final bf16 rounding of the gradient.
LfF does NOT: `cross_entropy_loss` / `gce_loss` compute in the input dtype (bf16 arithmetic, as
every cross-entropy of the libraries); only the EMAs, class maxima and weights are float32. Its CE /
GCE / softmax error terms use ε = 2⁻⁷ for bf16 inputs, its EMA / weight rounding ε = 2⁻²³.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import event
from hypothesis import given
from hypothesis import note
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import mr2_jax
import reweight_jax
from tests import strategies as S
from tests.reference import numpy_jtt_lff as ref_lff
from tests.reference import numpy_supcon as ref_supcon

C = 16.0            # tolerance factor on the first-order error scale (C·ε·S)
AXIS = "batch"
BUCKETS = (1, 3, 8, 16, 32, 64)   # padded batch sizes (0 … bucket real rows): every B in 1–64
DEVICE_COUNTS = (2, 4, 8)
GARBAGE = {"zeros": 0.0, "huge": 1e30, "nan": np.nan, "inf": np.inf}
TINY = 1e-30


def _devices_for(batch: int):
  """The device counts of (f) that divide `batch` (1: no split, for B = 1 or 3)."""
  return tuple(d for d in DEVICE_COUNTS if batch % d == 0) or (1,)


def _mesh(devices: int):
  return jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))


def _layout(rng, size: int, real: int, scattered: bool) -> np.ndarray:
  """Positions of `real` real rows among `size` (sorted): the first ones, or scattered."""
  return np.sort(rng.permutation(size)[:real]) if scattered else np.arange(real)


def _fill(rng, shape, garbage: str) -> np.ndarray:
  values = np.full(shape, GARBAGE[garbage])
  if garbage in ("huge", "inf"):
    values *= rng.choice([-1.0, 1.0], shape)
  return values


def _garbage_labels(rng, size: int, num_classes: int, out_of_range: bool) -> np.ndarray:
  if out_of_range:
    return rng.choice([-1, num_classes, 10**6], size).astype(np.int32)
  return rng.integers(0, num_classes, size).astype(np.int32)


def real_rows(size: int):
  """How many of `size` rows are real: all (3/8), some (1/2), none (1/8). A plain integers(0, size)
  is drawn at its ends by hypothesis' boundary bias (~40 % "none" in a slow run)."""
  kinds = ("all",) * 3 + ("some",) * 4 + ("none",)
  return st.sampled_from(kinds).flatmap(
      lambda kind: st.just(size) if kind == "all" or size == 0 else
      st.just(0) if kind == "none" else st.integers(min(1, size), size))


def _log2(n) -> float:
  return math.log2(max(n, 2))


def _same_on_devices(tree, what: str):
  """Every device's copy (leading axis) of every leaf is bit-for-bit the first one's; returns it."""
  for leaf in jax.tree.leaves(tree):
    leaf = np.asarray(leaf)
    np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape),
                                  err_msg=f"{what} (f): devices hold different states")
  return jax.tree.map(lambda x: np.asarray(x)[0], tree)


# ================================================================================================
# SupCon
# ================================================================================================

TEMPERATURES = ((0.1, 0.07), (0.07, 0.07), (0.5, 0.07))  # (τ, τ_b): README recipe, code default, …
SUPCON_DIMS = (1, 8)
# log10 of the scale of unnormalised rows: both ends on purpose, then anything in between (≤ 10²:
# the bound of the module docstring).
SUPCON_SCALE_EXPONENTS = st.one_of(st.sampled_from((-3.0, 2.0, 0.0)), st.floats(-3.0, 2.0))
NORMS = ("unit", "scaled", "ragged")

# Default profile: one (shape, τ/τ_b) per parametrised test; batch = images (N = 2·images rows).
SUPCON_POOL = (
    (S.Shape(16, 300, 8, S.BF16, 8), (0.1, 0.07)),   # K > B, bf16, 8 devices
    (S.Shape(8, 3, 1, S.F32, 2), (0.07, 0.07)),      # d = 1, τ = τ_b, 2 devices
)


@st.composite
def supcon_configs(draw):
  """(shape, (τ, τ_b)) from the wide pools."""
  images = draw(st.sampled_from(BUCKETS))
  shape = S.Shape(images, draw(S._num_classes(1)), draw(st.sampled_from(SUPCON_DIMS)),
                  draw(st.sampled_from(tuple(S.DTYPES))),
                  draw(st.sampled_from(_devices_for(images))))
  return shape, draw(st.sampled_from(TEMPERATURES))


@dataclasses.dataclass
class SupConExample:
  shape: S.Shape
  temperature: float
  base_temperature: float
  views: np.ndarray        # [B, 2, d] in the dtype (garbage on padding)
  labels: np.ndarray       # int32 [B]
  image_where: np.ndarray  # bool [B]: real images
  view_keep: np.ndarray    # bool [B, 2]: views kept (a dropped view is padding too)
  order: np.ndarray        # (e): image permutation …
  swap: np.ndarray         # … and the images whose two views trade places
  description: str

  @property
  def row_where(self) -> np.ndarray:
    """`where` of the stacked rows (row v·B + b is view v of image b)."""
    return stack_rows(self.image_where[:, None] & self.view_keep)

  def permuted(self) -> "SupConExample":
    views = self.views[self.order]
    keep = self.view_keep[self.order]
    swap = self.swap[self.order]
    views[swap] = views[swap][:, ::-1]
    keep[swap] = keep[swap][:, ::-1]
    return dataclasses.replace(self, views=views, labels=self.labels[self.order],
                               image_where=self.image_where[self.order], view_keep=keep)

  def unpermute_rows(self, per_view: np.ndarray) -> np.ndarray:
    """[B, 2, …] values of the permuted example → the original images' order and views."""
    out = np.array(per_view)
    swap = self.swap[self.order]
    out[swap] = out[swap][:, ::-1]
    result = np.empty_like(out)
    result[self.order] = out
    return result


def stack_rows(per_view: np.ndarray) -> np.ndarray:
  """[B, 2, …] → [2B, …], view-major (as `stack_views`)."""
  return np.concatenate([per_view[:, 0], per_view[:, 1]])


def unstack_rows(rows: np.ndarray, images: int) -> np.ndarray:
  """[2B, …] view-major → [B, 2, …]."""
  return np.stack([rows[:images], rows[images:]], axis=1)


@st.composite
def supcon_examples(draw, configs):
  shape, (tau, tau_b) = draw(configs)
  images, num_classes, dim = shape.batch, shape.num_classes, shape.dim
  real = draw(real_rows(images))
  pattern = draw(st.sampled_from(S.PATTERNS))
  spread = draw(st.sampled_from(tuple(S.SPREADS)))
  offset = draw(st.sampled_from((0.0, 3.0)))
  norm = draw(st.sampled_from(NORMS))
  scale = 10.0 ** draw(SUPCON_SCALE_EXPONENTS) if norm == "scaled" else 1.0
  drop = draw(st.sampled_from((0.0, 0.0, 0.25)))   # probability of dropping one view of an image
  garbage = draw(st.sampled_from(tuple(GARBAGE)))
  scattered = draw(st.booleans())
  out_of_range = draw(st.booleans())
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  labels_real = S.make_labels(rng, real, num_classes, pattern)
  centres = rng.normal(size=(num_classes, dim))
  x = (offset + centres[labels_real][:, None, :]
       + S.SPREADS[spread] * rng.normal(size=(real, 2, dim)))
  if norm == "unit":
    x = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)
  elif norm == "scaled":
    x = x * scale
  else:
    x = x * 10.0 ** rng.uniform(-3.0, 2.0, size=(real, 2, 1))
  positions = _layout(rng, images, real, scattered)
  views = _fill(rng, (images, 2, dim), garbage)
  views[positions] = x
  views = S._cast(views, shape.dtype)
  labels = _garbage_labels(rng, images, num_classes, out_of_range)
  labels[positions] = labels_real
  image_where = np.zeros(images, bool)
  image_where[positions] = True
  view_keep = np.ones((images, 2), bool)
  if drop:
    one = rng.random(images) < drop
    view_keep[one, rng.integers(0, 2, images)[one]] = False
  # A dropped view's row is padding: garbage there too.
  dropped = image_where[:, None] & ~view_keep
  views[dropped] = S._cast(_fill(rng, (int(dropped.sum()), dim), garbage), shape.dtype)
  order = rng.permutation(images)
  swap = rng.random(images) < 0.5
  kept_rows = int((image_where[:, None] & view_keep).sum())
  description = (f"shape {shape}, τ {tau}, τ_b {tau_b}; {real} real images ({pattern} labels, "
                 f"{spread} classes, offset {offset}, {norm} rows"
                 f"{f' × {scale:.3g}' if norm == 'scaled' else ''}), {kept_rows} kept rows, views "
                 f"dropped w.p. {drop}; padding {garbage}{', scattered' if scattered else ''}"
                 f"{', labels out of range' if out_of_range else ''}; seed {seed}")
  note(description)
  event(f"dtype={shape.dtype}")
  event(f"pattern={pattern}")
  event(f"norm={norm}")
  if real == 0:
    event("every row is padding")
  if num_classes > images:
    event("K > B")
  return SupConExample(shape, tau, tau_b, views, labels, image_where, view_keep, order, swap,
                       description)


@functools.cache
def supcon_fn(tau, tau_b, num_classes, devices):
  """(views [B, 2, d], labels [B], image_where [B], view_keep [B, 2]) → (loss, aux, ∂loss/∂views),
  under shard_map over `devices` (views replicated, sliced per device; the rest batch-sharded)."""

  def run(views, labels, image_where, view_keep):
    images = labels.shape[0]

    def objective(views):
      if devices > 1:
        views = jax.lax.dynamic_slice_in_dim(views, jax.lax.axis_index(AXIS) * images, images)
      z, y, w = reweight_jax.baselines.stack_views(views, labels, where=image_where)
      w = w & jnp.swapaxes(view_keep, 0, 1).reshape(-1)
      return reweight_jax.baselines.supcon_loss(z, y, temperature=tau, base_temperature=tau_b, where=w,
                                 axis_name=AXIS if devices > 1 else None,
                                 num_classes=num_classes)

    (loss, aux), grad = jax.value_and_grad(objective, has_aux=True)(views)
    if devices == 1:
      return loss, aux, grad
    return jax.lax.pmean(loss, AXIS), aux, jax.lax.pmean(grad, AXIS)

  if devices == 1:
    return jax.jit(run)
  aux_specs = reweight_jax.baselines.SupConAux(P(AXIS), P(AXIS), P())
  return jax.jit(jax.shard_map(run, mesh=_mesh(devices),
                               in_specs=(P(), P(AXIS), P(AXIS), P(AXIS)),
                               out_specs=(P(), aux_specs, P()), check_vma=False))


def run_supcon(ex: SupConExample, devices: int, views=None):
  views = ex.views if views is None else views
  out = supcon_fn(ex.temperature, ex.base_temperature, ex.shape.num_classes, devices)(
      jnp.asarray(views), jnp.asarray(ex.labels), jnp.asarray(ex.image_where),
      jnp.asarray(ex.view_keep))
  loss, aux, grad = jax.device_get(out)
  return float(loss), aux, np.asarray(grad, np.float64)


@dataclasses.dataclass
class SupConExpected:
  loss: float
  loss_atol: float
  per_anchor: np.ndarray      # [2B] (0 for padding and anchors without positives)
  per_anchor_atol: np.ndarray
  num_positives: np.ndarray   # int [2B]
  num_anchors: int
  grad: np.ndarray            # [B, 2, d] ∂L/∂views (analytic, float64)
  grad_atol: np.ndarray       # [B, 2, d]


def supcon_expected(ex: SupConExample) -> SupConExpected:
  """The loop reference's ℓ_i and L, an analytic float64 gradient, and the tolerances (a).

  Error model (float32 arithmetic, ε = 2⁻²³, after the exact upcast of the inputs), per anchor i
  with M_i = ‖z_i‖·max_j‖z_j‖/τ (a bound on |s_ij|), n kept rows, l = log2 n:
    s_ij = z_i·z_j/τ is off by (d + 1)·ε·M_i; the log-sum-exp over A(i) by that plus ε·(2M_i + |LSE|
    + l + 2) (shifted exponents, the sum, the log); the mean positive logit by (d + 1 + l)·ε·M_i;
    so ℓ_i by ε·S_i, S_i = (τ/τ_b)·[(2d + 6 + 2l)·M_i + 2l + 4] + |ℓ_i|, and L = Σℓ_i/n by
    ε·[ΣS_i/n + (l + 2)·Σ|ℓ_i|/n].
  Gradient ∂L/∂z_i = (1/τ)·Σ_j (G_ij + G_ji)·z_j, G_ij = −(τ/τ_b)/n·(1[j∈P(i)]/|P(i)| − p_ij): each
    softmax weight p_ij has every exponent off by at most η_i = C·ε·[(2d + 6 + 2l)·M_i + 2l + 4], so
    |Δp_ij| ≤ min(1, p_ij·expm1(η_i)) (exact, not linearised: at ‖z‖ ~ 10³ the float32 logits
    themselves are only known to a few units); plus the rounding of the sums over j, C·ε·(l + d + 4)
    ·Σ_j(|G_ij| + |G_ji|)·‖z_j‖/τ, and for bf16 inputs the gradient's own rounding to bf16.
  """
  tau, tau_b = ex.temperature, ex.base_temperature
  images, dim = ex.shape.batch, ex.shape.dim
  z_rows = S.Batch.f64(stack_rows(ex.views))
  label_rows = stack_rows(ex.labels[:, None].repeat(2, axis=1))
  where_rows = ex.row_where
  per_anchor, mean = ref_supcon.supcon_per_anchor(z_rows, label_rows, tau, tau_b, where_rows)

  rows = 2 * images
  eps = S.EPS32
  kept = np.flatnonzero(where_rows)
  n = kept.size
  per_anchor_atol = np.zeros(rows)
  num_positives = np.zeros(rows, np.int64)
  grad_rows = np.zeros((rows, dim))
  grad_atol_rows = np.zeros(rows)
  loss_atol = 0.0
  if n:
    x, y = z_rows[kept], label_rows[kept]
    other = ~np.eye(n, dtype=bool)
    positive = other & (y[:, None] == y[None, :])
    npos = positive.sum(axis=1)
    has = npos > 0
    num_positives[kept] = npos
    s = x @ x.T / tau
    if n >= 2:
      masked = np.where(other, s, -np.inf)
      top = masked.max(axis=1)
      e = np.exp(masked - top[:, None])
      p = e / e.sum(axis=1, keepdims=True)
    else:
      p = np.zeros((1, 1))
    # G = ∂L/∂s (rows of anchors without positives: ℓ_i ≡ 0, no gradient).
    g_s = np.where(has[:, None], -(tau / tau_b) / n
                   * (positive / np.maximum(npos, 1)[:, None] - p), 0.0)
    grad_rows[kept] = (g_s + g_s.T) @ x / tau
    r = np.linalg.norm(x, axis=1)
    big_m = r * np.max(r) / tau
    l2 = _log2(n)
    core = (2 * dim + 6 + 2 * l2) * big_m + 2 * l2 + 4
    ell = per_anchor[kept]
    anchor_scale = np.where(has, (tau / tau_b) * core + np.abs(ell), 0.0)
    per_anchor_atol[kept] = C * eps * anchor_scale
    loss_atol = C * eps * (np.sum(anchor_scale) / n + (l2 + 2) * np.sum(np.abs(ell)) / n)
    eta = np.minimum(C * eps * core, 700.0)
    dp = np.where(has[:, None], np.minimum(p * np.expm1(eta)[:, None], 1.0), 0.0)
    rounding = C * eps * (l2 + dim + 4) * ((np.abs(g_s) + np.abs(g_s).T) @ r) / tau
    grad_atol_rows[kept] = (dp @ r + dp.T @ r) / (tau_b * n) + rounding
  grad = unstack_rows(grad_rows, images)
  grad_atol = (unstack_rows(grad_atol_rows, images)[..., None]
               + 2 * S.eps(ex.shape.dtype) * np.abs(grad) + TINY)
  return SupConExpected(float(mean), loss_atol + TINY, per_anchor, per_anchor_atol + TINY,
                        num_positives, n, grad, grad_atol)


def _check_supcon_gradient_reference(ex: SupConExample, expected: SupConExpected):
  """The analytic float64 gradient against central differences of the loop reference (tiny cases:
  n·d ≤ 32, moderate norms), so that (a)'s gradient reference is itself checked."""
  where = ex.row_where
  z = S.Batch.f64(stack_rows(ex.views))
  if where.sum() * ex.shape.dim > 32 or np.max(np.abs(z[where]), initial=0.0) > 3.0:
    return
  labels = stack_rows(ex.labels[:, None].repeat(2, axis=1))
  kept = np.flatnonzero(where)
  numerical = ref_supcon.numerical_gradient(
      lambda v: ref_supcon.supcon_mean(v, labels[kept], ex.temperature, ex.base_temperature),
      z[kept])
  analytic = stack_rows(expected.grad)[kept]
  S.assert_close(analytic, numerical, 1e-5 * (1 + np.max(np.abs(numerical), initial=0.0)),
                 "supcon reference: analytic gradient vs central differences")


def check_supcon(ex: SupConExample):
  S.before_example()
  shape = ex.shape
  images = shape.batch
  expected = supcon_expected(ex)
  _check_supcon_gradient_reference(ex, expected)
  where_views = ex.image_where[:, None] & ex.view_keep
  where_rows = ex.row_where
  results = {}
  permuted = ex.permuted()
  calls = [("supcon_loss", ex, 1), ("supcon_loss (e) permuted", permuted, 1)]
  if shape.devices > 1:
    calls.append((f"supcon_loss (f) {shape.devices} devices", ex, shape.devices))
  for label, case, devices in calls:
    loss, aux, grad = run_supcon(case, devices)
    per_anchor = np.asarray(aux.per_anchor, np.float64)
    num_positives = np.asarray(aux.num_positives)
    # Back to the one-device rows of the original example: the permutation undone; under shard_map
    # each device stacks its own images' views (device k's rows are [view 0, view 1] of its images).
    if "permuted" in label:
      per_anchor = stack_rows(case.unpermute_rows(unstack_rows(per_anchor, images)))
      num_positives = stack_rows(case.unpermute_rows(unstack_rows(num_positives, images)))
      grad = case.unpermute_rows(grad)
    elif devices > 1:
      local = images // devices
      per_device = lambda v: np.concatenate(  # noqa: E731
          [unstack_rows(part, local) for part in np.split(v, devices)])
      per_anchor = stack_rows(per_device(per_anchor))
      num_positives = stack_rows(per_device(num_positives))
    results[label] = (loss, per_anchor, grad)
    S.assert_close(loss, expected.loss, expected.loss_atol, f"{label} (a, d): loss")
    S.assert_close(per_anchor, expected.per_anchor, expected.per_anchor_atol,
                   f"{label} (a, d): per-anchor ℓ_i")
    np.testing.assert_array_equal(per_anchor[~where_rows], 0.0,
                                  err_msg=f"{label} (d): ℓ_i of padding rows")
    np.testing.assert_array_equal(num_positives, expected.num_positives,
                                  err_msg=f"{label} (a, d): |P(i)|")
    assert int(aux.num_anchors) == expected.num_anchors, (
        f"{label} (a, d): N_valid {int(aux.num_anchors)} ≠ {expected.num_anchors}")
    S.assert_close(grad, expected.grad, expected.grad_atol, f"{label} (a): ∂L/∂z")
    np.testing.assert_array_equal(grad[~where_views], 0.0,
                                  err_msg=f"{label} (d): gradient of padding rows")
    if np.isfinite(expected.loss):
      S.assert_finite([loss], f"{label} (b): loss")
      S.assert_finite([grad], f"{label} (b): gradient")
  base_loss, base_per_anchor, base_grad = results["supcon_loss"]
  for label, (loss, per_anchor, grad) in results.items():
    if label == "supcon_loss":
      continue
    S.assert_close(loss, base_loss, 2 * expected.loss_atol, f"{label}: loss vs the first call")
    S.assert_close(per_anchor, base_per_anchor, 2 * expected.per_anchor_atol,
                   f"{label}: ℓ_i vs the first call")
    S.assert_close(grad, base_grad, 2 * expected.grad_atol, f"{label}: gradient vs the first call")
  # bfloat16 projections are upcast: bit-for-bit the float32 call on the same values.
  if shape.dtype == S.BF16:
    loss32, aux32, grad32 = run_supcon(ex, 1, S.Batch.f64(ex.views).astype(np.float32))
    np.testing.assert_array_equal(loss32, base_loss, err_msg="supcon_loss: bf16 not upcast (loss)")
    np.testing.assert_array_equal(np.asarray(aux32.per_anchor, np.float64), base_per_anchor,
                                  err_msg="supcon_loss: bf16 not upcast (ℓ_i)")
    np.testing.assert_array_equal(S.Batch.f64(S._cast(grad32, S.BF16)), base_grad,
                                  err_msg="supcon_loss: bf16 not upcast (gradient)")


@pytest.mark.parametrize("pool", range(len(SUPCON_POOL)))
@given(data=st.data())
def test_supcon_loss(pool, data):
  configs = supcon_configs() if S.WIDE else st.just(SUPCON_POOL[pool])
  check_supcon(data.draw(supcon_examples(configs)))


@pytest.mark.slow
@S.SLOW
@given(data=st.data())
def test_supcon_loss_slow(data):
  check_supcon(data.draw(supcon_examples(supcon_configs())))


# ================================================================================================
# LfF
# ================================================================================================

Q_ALPHA = ((0.7, 0.7), (0.3, 0.9), (1.0, 0.0), (0.5, 1.0))
MULTIPLES = (1, 2, 3, 4)   # N = multiple × B training examples


@dataclasses.dataclass(frozen=True)
class LfFShape:
  batch: int          # rows per step (bucket)
  num_classes: int
  examples: int       # N
  dtype: str
  devices: int


LFF_POOL = (
    (LfFShape(8, 300, 32, S.F32, 4), (0.7, 0.7)),    # K > N, f32, 4 devices
    (LfFShape(24, 3, 24, S.BF16, 8), (0.7, 0.7)),    # N = B: every step revisits, bf16, 8 devices
    (LfFShape(1, 2, 3, S.F32, 1), (1.0, 0.0)),       # B = 1, q = 1, α = 0
)


@st.composite
def lff_configs(draw):
  batch = draw(st.sampled_from(BUCKETS))
  shape = LfFShape(batch, draw(S._num_classes(1)), batch * draw(st.sampled_from(MULTIPLES)),
                   draw(st.sampled_from(tuple(S.DTYPES))),
                   draw(st.sampled_from(_devices_for(batch))))
  return shape, draw(st.sampled_from(Q_ALPHA))


@dataclasses.dataclass
class LfFStep:
  logits_biased: np.ndarray    # [B, K] in the dtype (garbage on padding)
  logits_debiased: np.ndarray
  labels: np.ndarray           # int32 [B]: the dataset labels at the indices (garbage on padding)
  indices: np.ndarray          # int32 [B]: distinct on the real rows
  where: np.ndarray            # bool [B]
  real: np.ndarray             # positions of the real rows, in order
  order: np.ndarray            # (e)
  description: str

  def permuted(self) -> "LfFStep":
    o = self.order
    return dataclasses.replace(self, logits_biased=self.logits_biased[o],
                               logits_debiased=self.logits_debiased[o], labels=self.labels[o],
                               indices=self.indices[o], where=self.where[o],
                               real=np.sort(np.argsort(o)[self.real]))


@dataclasses.dataclass
class LfFExample:
  shape: LfFShape
  q: float
  alpha: float
  dataset_labels: np.ndarray   # int32 [N]
  state: tuple                 # (e_B, e_D float32 [N], seen bool [N]) before the first step
  steps: list


def _logits(rng, rows, num_classes, labels, kind, scale):
  z = rng.normal(size=(rows, num_classes))
  if kind == "ties":
    z = np.round(2 * z) / 2
  elif kind == "confident":
    z[np.arange(rows), labels] += 5.0
  return scale * z


@st.composite
def lff_examples(draw, configs):
  shape, (q, alpha) = draw(configs)
  batch, num_classes, examples = shape.batch, shape.num_classes, shape.examples
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  pattern = draw(st.sampled_from(S.PATTERNS))
  dataset_labels = S.make_labels(rng, examples, num_classes, pattern)
  prior = draw(st.sampled_from(("fresh", "prior")))
  if prior == "fresh":
    state = tuple(np.asarray(x) for x in reweight_jax.baselines.init_lff_state(examples))
  else:
    seen = rng.random(examples) < 0.5
    magnitude = 10.0 ** draw(st.floats(-3.0, 1.0))
    emas = [np.where(seen & (rng.random(examples) < 0.8),
                     rng.exponential(size=examples) * magnitude, 0.0).astype(np.float32)
            for _ in range(2)]
    state = (emas[0], emas[1], seen)
  visited = set(np.flatnonzero(state[2]).tolist())
  steps, lines = [], []
  for step in range(draw(st.integers(1, 4))):
    real = draw(real_rows(batch))
    choice = draw(st.sampled_from(("random", "revisit", "first_visit")))
    kind = draw(st.sampled_from(S.LOGIT_KINDS))
    scales = [10.0 ** draw(S.SCALE_EXPONENTS) for _ in range(2)]
    garbage = draw(st.sampled_from(tuple(GARBAGE)))
    scattered = draw(st.booleans())
    out_of_range = draw(st.booleans())
    step_seed = draw(st.integers(0, 2**32 - 1))
    step_rng = np.random.default_rng(step_seed)
    preferred = np.array(sorted(visited), np.int64)
    if choice == "first_visit":
      preferred = np.setdiff1d(np.arange(examples), preferred)
    if choice == "random":
      idx = step_rng.permutation(examples)[:real]
    else:  # the preferred examples first (shuffled), then the others
      rest = np.setdiff1d(np.arange(examples), preferred)
      idx = np.concatenate([step_rng.permutation(preferred), step_rng.permutation(rest)])[:real]
    revisits = int(np.isin(idx, np.array(sorted(visited), np.int64)).sum())
    visited.update(idx.tolist())
    labels_real = dataset_labels[idx]
    positions = _layout(step_rng, batch, real, scattered)
    where = np.zeros(batch, bool)
    where[positions] = True
    logits = []
    for scale in scales:
      z = _fill(step_rng, (batch, num_classes), garbage)
      z[positions] = _logits(step_rng, real, num_classes, labels_real, kind, scale)
      logits.append(S._cast(z, shape.dtype))
    labels = _garbage_labels(step_rng, batch, num_classes, out_of_range)
    labels[positions] = labels_real
    if out_of_range:  # padding indices outside [0, N)
      indices = step_rng.choice([-1, examples, 10**6], batch).astype(np.int32)
    else:             # in range: possibly a real row's index (it must not write)
      indices = step_rng.integers(0, examples, batch).astype(np.int32)
    indices[positions] = idx
    order = step_rng.permutation(batch)
    description = (f"step {step}: {real} real rows ({choice} indices, {revisits} revisits), "
                   f"{kind} logits at scales {scales[0]:.3g} (biased) and {scales[1]:.3g} "
                   f"(debiased); padding {garbage}{', scattered' if scattered else ''}"
                   f"{', labels and indices out of range' if out_of_range else ''}; seed "
                   f"{step_seed}")
    lines.append(description)
    steps.append(LfFStep(logits[0], logits[1], labels, indices.astype(np.int32), where, positions,
                         order, description))
    if revisits:
      event("revisits")
    if real == 0:
      event("every row is padding")
  note(f"shape {shape}, q {q}, α {alpha}; dataset labels {pattern}; {prior} state; seed {seed}; "
       + "; ".join(lines))
  event(f"dtype={shape.dtype}")
  event(f"steps={len(steps)}")
  if num_classes > batch:
    event("K > B")
  return LfFExample(shape, q, alpha, dataset_labels.astype(np.int32), state, steps)


@functools.cache
def lff_fn(q, alpha, devices):
  """One LfF step with the gradients wrt both logits (replicated and sliced per device under
  shard_map; labels, indices and `where` batch-sharded; the state and dataset labels replicated)."""

  def run(logits_b, logits_d, labels, indices, where, state, dataset_labels):
    rows = labels.shape[0]

    def objective(zb, zd):
      if devices > 1:
        start = jax.lax.axis_index(AXIS) * rows
        zb = jax.lax.dynamic_slice_in_dim(zb, start, rows)
        zd = jax.lax.dynamic_slice_in_dim(zd, start, rows)
      loss, new_state, aux = reweight_jax.baselines.lff_loss(
          zb, zd, labels, indices, state, dataset_labels, q=q, alpha=alpha,
          axis_name=AXIS if devices > 1 else None, where=where)
      return loss, (new_state, aux)

    (loss, (new_state, aux)), grads = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(
        logits_b, logits_d)
    if devices == 1:
      return loss, new_state, aux, grads
    return (jax.lax.pmean(loss, AXIS), jax.tree.map(lambda x: x[None], new_state), aux,
            jax.tree.map(lambda g: jax.lax.pmean(g, AXIS), grads))

  if devices == 1:
    return jax.jit(run)
  rows = P(AXIS)
  state_specs = reweight_jax.baselines.LfFState(P(), P(), P(), P())
  return jax.jit(jax.shard_map(
      run, mesh=_mesh(devices), in_specs=(P(), P(), rows, rows, rows, state_specs, P()),
      out_specs=(P(), reweight_jax.baselines.LfFState(rows, rows, rows, rows),
                 reweight_jax.baselines.LfFAux(*[rows] * 4),
                 P()), check_vma=False))


def run_lff(ex: LfFExample, step: LfFStep, state, devices: int):
  out = lff_fn(ex.q, ex.alpha, devices)(
      jnp.asarray(step.logits_biased), jnp.asarray(step.logits_debiased),
      jnp.asarray(step.labels), jnp.asarray(step.indices), jnp.asarray(step.where),
      reweight_jax.baselines.LfFState(*(jnp.asarray(x) for x in state)), jnp.asarray(ex.dataset_labels))
  loss, new_state, aux, grads = jax.device_get(out)
  if devices > 1:
    new_state = _same_on_devices(new_state, f"lff_loss {devices} devices")
  return (float(loss), tuple(np.asarray(x) for x in new_state), aux,
          tuple(np.asarray(g, np.float64) for g in grads))


def softmax_terms(z, y):
  """float64 (p [B, K], shifted logits s [B, K], CE [B], CE's error scale [B] in units of ε).

  −log softmax(z)_y = log Σ exp(s) − s_y, s = z − max: the shift rounds s (ε|s_k|), the exponent
  turns that into relative errors of the terms, the sum and the log add a few ε and ε·|log Σ|, the
  difference ε·|CE| — the `ce_terms` model of tests/harness/methods/test_properties_registry.py plus the last two.
  """
  s = z - z.max(axis=1, keepdims=True)
  e = np.exp(s)
  total = e.sum(axis=1)
  p = e / total[:, None]
  log_total = np.log(total)
  rows = np.arange(len(y))
  ce = log_total - s[rows, y]
  error = (2.0 + np.log(z.shape[1]) + np.abs(s[rows, y]) + np.sum(p * np.abs(s), axis=1)
           + log_total + np.abs(ce))
  return p, s, ce, error


@dataclasses.dataclass
class LfFTracker:
  """The float64 reference (`LfFReference`) and the absolute error bounds of its EMAs (the state of
  the library, carried from step to step, may be off by them)."""
  reference: ref_lff.LfFReference
  error_biased: np.ndarray
  error_debiased: np.ndarray


def new_tracker(ex: LfFExample) -> LfFTracker:
  reference = ref_lff.LfFReference(ex.dataset_labels, ex.shape.num_classes, ex.q, ex.alpha)
  reference.ema_biased = ex.state[0].astype(np.float64)
  reference.ema_debiased = ex.state[1].astype(np.float64)
  reference.seen = ex.state[2].copy()
  zeros = np.zeros(ex.shape.examples)
  return LfFTracker(reference, zeros, zeros.copy())


def _normalized_interval(ema, error, class_max, class_error):
  """Bounds of ẽ = e / (class max) given |Δe| ≤ error and |Δmax| ≤ class_error; ẽ ∈ [0, 1] (the
  library's e_i is one of its class's entries; a class maximum ≤ 0 gives ẽ = 0)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    lo = np.where(class_max + class_error > 0,
                  np.maximum(ema - error, 0.0) / (class_max + class_error), 0.0)
    hi = np.where(class_max - class_error > 0,
                  np.minimum((ema + error) / (class_max - class_error), 1.0), 1.0)
  return lo * (1 - 4 * S.EPS32), np.minimum(hi * (1 + 4 * S.EPS32), 1.0)


@dataclasses.dataclass
class LfFExpected:
  loss: float
  loss_atol: float
  weights: np.ndarray          # [B] (0 on padding)
  weights_atol: np.ndarray
  ce: tuple                    # (CE_B, CE_D) [B]
  ce_atol: tuple
  gce: np.ndarray
  gce_atol: np.ndarray
  grads: tuple                 # [B, K] each (0 on padding rows)
  grads_atol: tuple
  state: tuple                 # (e_B, e_D, seen) after the step, float64
  state_atol: tuple
  touched: np.ndarray          # bool [N]: the step's real indices


def lff_expected(ex: LfFExample, step: LfFStep, tracker: LfFTracker) -> LfFExpected:
  """Advances the reference by one step; the expected outputs and their tolerances (a).

  CE and the GCE factor w = q·p_y^q compute in the input dtype (ε_in); the EMAs, class maxima and W
  in float32 (ε32). Per real row i (index j, class c), with the CE error δ_i = C·ε_in·(CE scale):
    e_j ← δ on a first visit, α·Δe_j + (1 − α)·δ + C·ε32·(α|e_j| + (1 − α)|ℓ| + |e_new|) after;
    ẽ ∈ an interval from Δe_j and Δmax_c = max over the class of Δe, W ∈ [W(ẽ_B lo, ẽ_D hi),
    W(ẽ_B hi, ẽ_D lo)] (W is increasing in ẽ_B, decreasing in ẽ_D): exact, because ẽ is a ratio of
    possibly tiny EMAs (a class whose losses all round to 0 has ẽ anywhere in [0, 1]);
    w relative error expm1(C·ε_in·(q·δ-scale + q·CE + 3)), softmax p_k's expm1(C·ε_in·(CE scale +
    |s_k| + 2)); the gradients w·(p − e_y)/B and W·(p − e_y)/B from these, the loss from per-row
    errors of GCE + W·CE_D and C·ε32·(log2 B + 2) of the sum.
  """
  shape = ex.shape
  eps_in, eps32 = S.eps(shape.dtype), S.EPS32
  batch, num_classes, examples = shape.batch, shape.num_classes, shape.examples
  reference = tracker.reference
  real = step.real
  rows = real.size
  idx = step.indices[real].astype(np.int64)
  y = step.labels[real].astype(np.int64)
  zb = S.Batch.f64(step.logits_biased)[real]
  zd = S.Batch.f64(step.logits_debiased)[real]
  touched = np.zeros(examples, bool)
  touched[idx] = True
  weights = np.zeros(batch)
  weights_atol = np.zeros(batch)
  ce_out, ce_atol_out = (np.zeros(batch), np.zeros(batch)), (np.zeros(batch), np.zeros(batch))
  gce_out, gce_atol_out = np.zeros(batch), np.zeros(batch)
  grads = (np.zeros((batch, num_classes)), np.zeros((batch, num_classes)))
  grads_atol = (np.zeros((batch, num_classes)), np.zeros((batch, num_classes)))
  if rows == 0:  # nothing real: loss 0, the state unchanged (the reference divides by B = 0)
    state = (reference.ema_biased.copy(), reference.ema_debiased.copy(), reference.seen.copy())
    return LfFExpected(0.0, TINY, weights, weights_atol + TINY, ce_out, ce_atol_out, gce_out,
                       gce_atol_out, grads, grads_atol, state,
                       (tracker.error_biased + TINY, tracker.error_debiased + TINY), touched)

  old = (reference.ema_biased.copy(), reference.ema_debiased.copy())
  old_seen = reference.seen.copy()
  loss, w_ref, grad_b, grad_d = reference.step(zb, zd, y, idx)
  gce_values, _ = ref_lff.gce(zb, y, ex.q)
  alpha = ex.alpha
  terms, ce_errors = [], []
  new_errors = []
  for z, ema_old, ema_new, error in ((zb, old[0], reference.ema_biased, tracker.error_biased),
                                     (zd, old[1], reference.ema_debiased, tracker.error_debiased)):
    p, s, ce, scale = softmax_terms(z, y)
    terms.append((p, s, ce, scale))
    ce_error = C * eps_in * scale
    ce_errors.append(ce_error)
    error = error.copy()
    revisit = old_seen[idx]
    error[idx] = np.where(
        revisit,
        alpha * error[idx] + (1 - alpha) * ce_error
        + C * eps32 * (alpha * np.abs(ema_old[idx]) + (1 - alpha) * ce + np.abs(ema_new[idx])),
        ce_error)
    new_errors.append(error)
  tracker.error_biased, tracker.error_debiased = new_errors

  # W's interval from the EMAs' (the class maxima run over all N examples).
  bounds = []
  for ema, error in ((reference.ema_biased, tracker.error_biased),
                     (reference.ema_debiased, tracker.error_debiased)):
    class_max = np.zeros(num_classes)
    class_error = np.zeros(num_classes)
    np.maximum.at(class_max, ex.dataset_labels, ema)
    np.maximum.at(class_error, ex.dataset_labels, error)
    bounds.append(_normalized_interval(ema[idx], error[idx], class_max[y], class_error[y]))
  (b_lo, b_hi), (d_lo, d_hi) = bounds
  w_lo = b_lo / (b_lo + d_hi + 1e-8) * (1 - 4 * eps32)
  w_hi = b_hi / (b_hi + d_lo + 1e-8) * (1 + 4 * eps32)
  dw = np.maximum(w_hi - w_ref, w_ref - w_lo) + C * eps32 * w_ref

  (p_b, s_b, ce_b, scale_b), (p_d, s_d, ce_d, scale_d) = terms
  onehot = np.eye(num_classes)[y]
  q = ex.q
  w_gce = q * np.exp(-q * ce_b)
  dw_gce = w_gce * np.expm1(np.minimum(C * eps_in * (q * scale_b + q * ce_b + 3), 700.0))
  gce_atol = (w_gce + dw_gce) * ce_errors[0] + ce_b * dw_gce + C * eps_in * w_gce * ce_b
  per_example = gce_values + w_ref * ce_d
  per_example_atol = gce_atol + dw * ce_d + (w_ref + dw) * ce_errors[1]
  loss_atol = (np.sum(per_example_atol) / rows
               + C * eps32 * (_log2(rows) + 2) * np.sum(np.abs(per_example)) / rows)

  def grad_atol(p, s, scale, factor, dfactor):
    dp = p * np.expm1(np.minimum(C * eps_in * (scale[:, None] + np.abs(s) + 2), 700.0))
    diff = np.abs(p - onehot)
    dd = dp + C * eps_in * diff
    g = factor[:, None] * diff / rows
    return (dfactor[:, None] * diff + (factor + dfactor)[:, None] * dd) / rows + 2 * C * eps_in * g

  atol_b = grad_atol(p_b, s_b, scale_b, w_gce, dw_gce)
  atol_d = grad_atol(p_d, s_d, scale_d, w_ref, dw)

  weights[real], weights_atol[real] = w_ref, dw
  for out, atol, value, error in ((ce_out[0], ce_atol_out[0], ce_b, ce_errors[0]),
                                  (ce_out[1], ce_atol_out[1], ce_d, ce_errors[1]),
                                  (gce_out, gce_atol_out, gce_values, gce_atol)):
    out[real], atol[real] = value, error
  grads[0][real], grads[1][real] = grad_b, grad_d
  grads_atol[0][real], grads_atol[1][real] = atol_b, atol_d
  state = (reference.ema_biased.copy(), reference.ema_debiased.copy(), reference.seen.copy())
  tiny = lambda x: x + TINY  # noqa: E731
  return LfFExpected(float(loss), float(loss_atol) + TINY, weights, tiny(weights_atol), ce_out,
                     tuple(map(tiny, ce_atol_out)), gce_out, tiny(gce_atol_out), grads,
                     tuple(map(tiny, grads_atol)), state,
                     (tiny(tracker.error_biased), tiny(tracker.error_debiased)), touched)


def check_lff_outputs(label, step: LfFStep, state_in, out, expected: LfFExpected):
  """(a)–(d) for one call's outputs (rows in the step's order)."""
  loss, new_state, aux, grads = out
  where = step.where
  S.assert_close(loss, expected.loss, expected.loss_atol, f"{label} (a, d): loss")
  for got, value, atol, name in ((new_state[0], expected.state[0], expected.state_atol[0], "e_B"),
                                 (new_state[1], expected.state[1], expected.state_atol[1], "e_D")):
    S.assert_close(got, value, atol, f"{label} (a, d): state {name}")
  np.testing.assert_array_equal(new_state[2], expected.state[2],
                                err_msg=f"{label} (a, d): state seen")
  # (c) untouched examples: bit-for-bit the input state.
  untouched = ~expected.touched
  for got, old, name in zip(new_state, state_in, ("e_B", "e_D", "seen")):
    np.testing.assert_array_equal(np.asarray(got)[untouched], np.asarray(old)[untouched],
                                  err_msg=f"{label} (c): {name} outside the step's indices")
  weights = np.asarray(aux.weights, np.float64)
  S.assert_close(weights, expected.weights, expected.weights_atol, f"{label} (a, d): weights W")
  np.testing.assert_array_equal(weights[~where], 0.0, err_msg=f"{label} (d): W of padding rows")
  for got, value, atol, name in ((aux.ce_biased, expected.ce[0], expected.ce_atol[0], "CE_B"),
                                 (aux.ce_debiased, expected.ce[1], expected.ce_atol[1], "CE_D"),
                                 (aux.gce_biased, expected.gce, expected.gce_atol, "GCE_B")):
    S.assert_close(np.asarray(got, np.float64), value, atol, f"{label} (a, d): {name}")
  for g, value, atol, name in zip(grads, expected.grads, expected.grads_atol,
                                  ("biased", "debiased")):
    S.assert_close(g, value, atol, f"{label} (a): gradient of the {name} logits")
    np.testing.assert_array_equal(g[~where], 0.0,
                                  err_msg=f"{label} (d): gradient of padding {name} logits")
  if np.isfinite(expected.loss):
    S.assert_finite([loss], f"{label} (b): loss")
    S.assert_finite(list(grads), f"{label} (b): gradients (biased, debiased)")
    S.assert_finite([new_state[0], new_state[1]], f"{label} (b): new state")


def check_lff(ex: LfFExample):
  S.before_example()
  devices = ex.shape.devices
  tracker = new_tracker(ex)
  state = ex.state
  sharded_state = ex.state
  for number, step in enumerate(ex.steps):
    expected = lff_expected(ex, step, tracker)
    prefix = f"lff_loss step {number}"
    out = run_lff(ex, step, state, 1)
    check_lff_outputs(prefix, step, state, out, expected)

    # (e) rows permuted within the step, from the same state.
    permuted = step.permuted()
    inverse = np.argsort(step.order)
    loss_p, state_p, aux_p, grads_p = run_lff(ex, permuted, state, 1)
    label = f"{prefix} (e) permuted"
    for got, base, name in zip(state_p, out[1], ("e_B", "e_D", "seen")):
      np.testing.assert_array_equal(got, base, err_msg=f"{label}: new state {name} not identical")
    permuted_expected = dataclasses.replace(
        expected, weights=expected.weights[step.order],
        weights_atol=expected.weights_atol[step.order],
        ce=tuple(x[step.order] for x in expected.ce),
        ce_atol=tuple(x[step.order] for x in expected.ce_atol),
        gce=expected.gce[step.order], gce_atol=expected.gce_atol[step.order],
        grads=tuple(x[step.order] for x in expected.grads),
        grads_atol=tuple(x[step.order] for x in expected.grads_atol))
    check_lff_outputs(label, permuted, state, (loss_p, state_p, aux_p, grads_p), permuted_expected)
    S.assert_close(loss_p, out[0], 2 * expected.loss_atol, f"{label}: loss vs the first call")
    for g, g0, atol, name in zip(grads_p, out[3], expected.grads_atol, ("biased", "debiased")):
      S.assert_close(g[inverse], g0, 2 * atol, f"{label}: gradient of the {name} logits")

    # (f) the sharded chain (its own state from step to step).
    if devices > 1:
      label = f"{prefix} (f) {devices} devices"
      sharded = run_lff(ex, step, sharded_state, devices)
      check_lff_outputs(label, step, sharded_state, sharded, expected)
      S.assert_close(sharded[0], out[0], 2 * expected.loss_atol, f"{label}: loss vs 1 device")
      for g, g1, atol, name in zip(sharded[3], out[3], expected.grads_atol,
                                   ("biased", "debiased")):
        S.assert_close(g, g1, 2 * atol, f"{label}: gradient of the {name} logits vs 1 device")
      for got, one, atol, name in zip(sharded[1][:2], out[1][:2], expected.state_atol,
                                      ("e_B", "e_D")):
        S.assert_close(got, one, 2 * atol, f"{label}: state {name} vs 1 device")
      np.testing.assert_array_equal(sharded[1][2], out[1][2],
                                    err_msg=f"{label}: state seen vs 1 device")
      sharded_state = sharded[1]
    state = out[1]


@pytest.mark.parametrize("pool", range(len(LFF_POOL)))
@given(data=st.data())
def test_lff_loss(pool, data):
  configs = lff_configs() if S.WIDE else st.just(LFF_POOL[pool])
  check_lff(data.draw(lff_examples(configs)))


@pytest.mark.slow
@S.SLOW
@given(data=st.data())
def test_lff_loss_slow(data):
  check_lff(data.draw(lff_examples(lff_configs())))
