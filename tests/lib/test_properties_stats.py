"""Property-based tests (hypothesis) of the per-class statistics: `mr2_jax.update_class_stats` and the
Neural Collapse accumulator (`reweight_jax.NCAccumulator` streamed in chunks vs `nc_metrics` in one shot
vs the float64 NumPy reference). Inputs: tests/strategies.py; profiles: tests/conftest.py.

Properties (named in every assertion message):
  (a) agreement with the float64 references (tests/reference) on the real rows, within C·ε·S (S from a
      first-order rounding analysis on the reference's intermediates; NC1 only where the centred class
      means are well conditioned, NC4 up to the examples whose decision is a near-tie in float32);
  (b) finite wherever the reference is finite (NC1–NC3 are NaN when fewer than two classes are present,
      NC4 when no example was seen, ρ without losses: documented conventions, checked as such);
  (c) an update changes only the classes present in its batch (bit-for-bit);
  (d) padding rows (`where=False`, NaN/inf/huge garbage, labels in or out of range) change nothing;
  (e) permuting the rows changes nothing;
  (f) splitting the rows over 2/4/8 devices under `jax.shard_map` (`axis_name`) gives the
      single-device statistics on every device; `update_class_stats(reduction='per_device')` keeps
      `seen` and, for p = 2, A + V exact, with A biased high and V low (its documented trade-off).

bfloat16: `update_class_stats` computes the batch moments in the feature dtype (bf16 arithmetic, stored
as float32), compared with ε = 2⁻⁷; the NC accumulator upcasts features to float32 (checked: bit-for-bit
equal to the float32 call on the same values).
"""

from __future__ import annotations

import dataclasses
import functools

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
from tests.reference import numpy_reweight as ref_rw

C = 16.0
AXIS = "batch"


def mesh_of(devices):
  return jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))


def per_device_copies(tree, what):
  """The first device's copy of a [devices, ...] tree, after checking that every device agrees."""
  for leaf in jax.tree.leaves(tree):
    leaf = np.asarray(leaf)
    np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape),
                                  err_msg=f"{what} (f): devices hold different statistics")
  return jax.tree.map(lambda x: np.asarray(x)[0], tree)


# ------------------------------------------------------------------------------------------------
# mr2_jax.update_class_stats
# ------------------------------------------------------------------------------------------------

STATS_CONFIGS = {  # name → (p, decay)
    "p2": (2.0, 0.9),
    "p5": (5.0, 0.9),
    "p3.5_decay0": (3.5, 0.0),
}
STATS_POOL = {
    "p2": (S.Shape(64, 7, 4, S.BF16, 8),),
    "p5": (S.Shape(16, 300, 4, S.F32, 2),),
    "p3.5_decay0": (S.Shape(32, 2, 16, S.F32, 4),),
}


@functools.cache
def stats_fn(p, decay, devices, reduction="exact"):
  def run(features, labels, where, a, v, seen):
    stats = mr2_jax.ClassStats(sq_mean_norm=a, mean_sq_deviation=v, seen=seen)
    out = mr2_jax.update_class_stats(stats, features, labels, decay=decay, p=p, where=where,
                                     axis_name=AXIS if devices > 1 else None, reduction=reduction)
    return jax.tree.map(lambda x: x[None], out) if devices > 1 else out

  if devices == 1:
    return jax.jit(run)
  return jax.jit(jax.shard_map(run, mesh=mesh_of(devices),
                               in_specs=(P(AXIS), P(AXIS), P(AXIS), P(), P(), P()),
                               out_specs=P(AXIS), check_vma=False))


@dataclasses.dataclass
class StatsExample:
  padded: S.Padded
  stats: tuple
  order: np.ndarray


@st.composite
def stats_examples(draw, shapes):
  shape = draw(shapes)
  padded = draw(S.padded_batches(shape))
  stats = draw(S.class_stats_arrays(shape.num_classes,
                                    padded.batch.feature_scale ** 2 * shape.dim))
  order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(shape.batch)
  note(f"shape {shape}; {padded.describe()}")
  return StatsExample(padded, stats, order)


def run_stats(config, devices, padded, stats, reduction="exact"):
  p, decay = STATS_CONFIGS[config]
  out = stats_fn(p, decay, devices, reduction)(
      jnp.asarray(padded.features), jnp.asarray(padded.labels), jnp.asarray(padded.where),
      *(jnp.asarray(x) for x in stats))
  out = jax.device_get(out)
  if devices > 1:
    out = per_device_copies(out, f"update_class_stats[{reduction}]")
  return np.asarray(out.sq_mean_norm), np.asarray(out.mean_sq_deviation), np.asarray(out.seen)


def check_stats(config, ex: StatsExample):
  S.before_example()
  p, decay = STATS_CONFIGS[config]
  padded, shape = ex.padded, ex.padded.batch.shape
  eps = S.eps(shape.dtype)
  x = S.Batch.f64(padded.features)
  (a, v, seen), (scale_a, scale_v), _ = S.stats_reference(*ex.stats, x, padded.labels, decay, p,
                                                        where=padded.where)
  absent = ~np.isin(np.arange(shape.num_classes), padded.batch.labels)
  for devices, batch, label in ((1, padded, "update_class_stats"),
                                (1, padded.permuted(ex.order), "update_class_stats (e) permuted"),
                                (shape.devices, padded,
                                 f"update_class_stats (f) {shape.devices} devices")):
    got_a, got_v, got_seen = run_stats(config, devices, batch, ex.stats)
    S.assert_close(got_a, a, C * eps * scale_a, f"{label} (a, d): A")
    S.assert_close(got_v, v, C * eps * scale_v, f"{label} (a, d): V")
    np.testing.assert_array_equal(got_seen, seen, err_msg=f"{label} (a, d): seen")
    for got, old, name in ((got_a, ex.stats[0], "A"), (got_v, ex.stats[1], "V"),
                           (got_seen, ex.stats[2], "seen")):
      np.testing.assert_array_equal(got[absent], old[absent],
                                    err_msg=f"{label} (c): {name} of classes without a valid row")
    S.assert_finite([got_a, got_v], f"{label} (b)")
  # 'per_device': only 3·K scalars cross devices; seen exact, A + V exact for p = 2, A ≥ exact A.
  pd_a, pd_v, pd_seen = run_stats(config, shape.devices, padded, ex.stats, "per_device")
  label = f"update_class_stats[per_device] (f) {shape.devices} devices"
  np.testing.assert_array_equal(pd_seen, seen, err_msg=f"{label}: seen")
  S.assert_finite([pd_a, pd_v], f"{label} (b)")
  if p == 2.0:
    S.assert_close(pd_a + pd_v, a + v, C * eps * (scale_a + scale_v), f"{label}: A + V")
    assert np.all(pd_a >= a - C * eps * scale_a), f"{label}: A below the exact A"
    assert np.all(pd_v <= v + C * eps * scale_v), f"{label}: V above the exact V"
  for got, old, name in ((pd_a, ex.stats[0], "A"), (pd_v, ex.stats[1], "V")):
    np.testing.assert_array_equal(got[absent], old[absent], err_msg=f"{label} (c): {name}")


def stats_shapes(config, wide):
  if wide:
    return S.wide_shapes(S.BUCKETS, dims=(1, 4, 16), devices=S.DEVICE_COUNTS)  # cheap compiles
  return st.sampled_from(STATS_POOL[config])


@pytest.mark.parametrize("config", tuple(STATS_CONFIGS))
@given(data=st.data())
def test_update_class_stats(config, data):
  check_stats(config, data.draw(stats_examples(stats_shapes(config, S.WIDE))))


@pytest.mark.slow
@pytest.mark.parametrize("config", tuple(STATS_CONFIGS))
@S.SLOW
@given(data=st.data())
def test_update_class_stats_slow(config, data):
  check_stats(config, data.draw(stats_examples(stats_shapes(config, True))))


# ------------------------------------------------------------------------------------------------
# NC accumulator: streaming vs one-shot vs reference
# ------------------------------------------------------------------------------------------------

METRICS = ("nc1", "nc2", "nc2_classifier", "nc3", "nc4", "rho")
NC_POOL = (S.Shape(32, 7, 4, S.BF16, 4), S.Shape(16, 64, 4, S.F32, 2))
NC_CHUNKS = (1, 2, 4)


@jax.jit
def nc_update(acc, features, labels, losses, where):
  return acc.update(features, labels, per_example_loss=losses, where=where)


@jax.jit
def nc_update_ncc(acc, features, classifier, bias, where):
  return acc.update_ncc(features, classifier, bias=bias, where=where)


@jax.jit
def nc_finalize(acc, classifier):
  return acc.finalize(classifier)


@jax.jit
def nc_one_shot(features, labels, classifier, bias, losses, where):
  return reweight_jax.nc_metrics(features, labels, classifier, bias=bias,
                                 per_example_loss=losses, where=where)


@functools.cache
def nc_sharded(devices):
  def run(acc, features, labels, losses, where, classifier, bias):
    acc = acc.update(features, labels, per_example_loss=losses, where=where, axis_name=AXIS)
    acc = acc.update_ncc(features, classifier, bias=bias, where=where, axis_name=AXIS)
    return jax.tree.map(lambda x: x[None], acc)
  return jax.jit(jax.shard_map(
      run, mesh=mesh_of(devices), in_specs=(P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS), P(), P()),
      out_specs=P(AXIS), check_vma=False))


@dataclasses.dataclass
class NCExample:
  padded: S.Padded
  losses: np.ndarray        # float32 [bucket], garbage on padding rows
  classifier: np.ndarray    # float32 [K, d]
  bias: np.ndarray          # float32 [K] (zeros: no bias)
  chunks: int
  order: np.ndarray


@st.composite
def nc_examples(draw, shapes, chunks):
  shape = draw(shapes)
  padded = draw(S.padded_batches(shape))
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  scale = padded.batch.feature_scale
  aligned = draw(st.booleans())  # classifier near the class means (NC3 small) or random
  centres = np.zeros((shape.num_classes, shape.dim))
  for c in range(shape.num_classes):
    rows = padded.batch.labels == c
    if rows.any():
      centres[c] = S.Batch.f64(padded.batch.features[rows]).mean(0)
  classifier = (centres / max(scale, 1e-30) if aligned else 0.0) + rng.normal(
      size=(shape.num_classes, shape.dim))
  bias = rng.normal(size=shape.num_classes) if draw(st.booleans()) else np.zeros(shape.num_classes)
  losses = rng.gamma(2.0, 1.0, shape.batch) * 10.0 ** draw(S.SCALE_EXPONENTS)
  if draw(st.booleans()):  # equal class losses: ρ = 0
    losses[:] = losses[0]
  losses[~padded.where] = {"zeros": 0.0, "huge": 1e30, "nan": np.nan,
                           "inf": np.inf}[padded.garbage]
  chunk_count = draw(st.sampled_from(chunks))
  order = rng.permutation(shape.batch)
  note(f"shape {shape}; {padded.describe()}; {chunk_count} chunks; "
       f"{'aligned' if aligned else 'random'} classifier")
  return NCExample(padded, losses.astype(np.float32), classifier.astype(np.float32),
                   bias.astype(np.float32), chunk_count, order)


def nc_reference(ex: NCExample):
  """Float64 metrics on the real rows (present classes only) and their error scales (units of ε)."""
  batch = ex.padded.batch
  h = S.Batch.f64(batch.features)
  y = batch.labels
  num_classes = batch.shape.num_classes
  present = np.unique(y)
  k_present = present.size
  u = S.EPS32
  out, scale = {}, {}
  w = ex.classifier.astype(np.float64)
  if k_present >= 2:
    relabel = np.searchsorted(present, y)
    ref = ref_rw.nc_metrics(h, relabel, w[present], k_present)
    out.update(nc1=ref["nc1"], nc2=ref["nc2"], nc2_classifier=ref["nc2_w"], nc3=ref["nc3"])
    means = np.stack([h[y == c].mean(0) for c in present])
    centred = means - h.mean(0)
    singular = np.linalg.svd(centred, compute_uv=False)
    rank = min(k_present - 1, h.shape[1])
    sigma_max, sigma_min = singular[0], singular[rank - 1]
    phi = float(np.max(np.linalg.norm(h, axis=1)))
    norm_m = float(np.linalg.norm(centred))
    within = float(np.sum((h - means[relabel]) ** 2)) / len(y)
    mean_error = phi * np.sqrt(k_present) / max(norm_m, 1e-300)  # ‖ΔM‖/‖M‖ in units of ε
    if sigma_max > 0 and sigma_min > 1e-3 * sigma_max:
      kappa = sigma_max / sigma_min
      scale["nc1"] = (abs(out["nc1"]) * (kappa ** 2 + 4 * phi * np.sqrt(k_present) / sigma_min
                                         + rank + 8)
                      + rank * 4 * phi * (np.sqrt(within) + u * phi) / sigma_min ** 2)
    else:
      event("NC1 not compared: ill-conditioned class means")
      scale["nc1"] = np.inf
    scale["nc2"] = 4 + 4 * mean_error
    scale["nc2_classifier"] = 4 + k_present
    scale["nc3"] = 8 + 8 * mean_error
  else:
    out.update(nc1=np.nan, nc2=np.nan, nc2_classifier=np.nan, nc3=np.nan)
    scale.update(nc1=0.0, nc2=0.0, nc2_classifier=0.0, nc3=0.0)
  # NC4 with the bias (the library's definition), and how many decisions are float32 near-ties.
  if len(y):
    means_all = np.zeros((num_classes, h.shape[1]))
    for c in present:
      means_all[c] = h[y == c].mean(0)
    scores = h @ w.T + ex.bias
    distances = np.where(np.isin(np.arange(num_classes), present)[None, :],
                         np.sum((h[:, None, :] - means_all[None]) ** 2, axis=-1), np.inf)
    mismatches = np.sum(np.argmax(scores, 1) != np.argmin(distances, 1))
    out["nc4"] = mismatches / len(y)

    def gap(values, largest):
      ordered = np.sort(-values if largest else values, axis=1)
      return ordered[:, 1] - ordered[:, 0] if values.shape[1] > 1 else np.full(len(values), np.inf)
    norm_h = np.linalg.norm(h, axis=1)
    mu = float(np.max(np.linalg.norm(means_all, axis=1)))
    phi = float(np.max(norm_h))
    score_tol = C * u * (np.abs(h) @ np.abs(w).T).max(1) + C * u * np.abs(ex.bias).max()
    distance_tol = C * u * 4 * (mu ** 2 + 2 * norm_h * mu + (norm_h + mu) * phi)
    ambiguous = (gap(scores, True) <= score_tol) | (gap(distances, False) <= distance_tol)
    out["nc4_ambiguous"] = int(np.sum(ambiguous))
    if out["nc4_ambiguous"]:
      event("NC4 has float32 near-ties")
    class_losses = np.array([ex.losses[ex.padded.real][y == c].astype(np.float64).mean()
                             for c in present])
    out["rho"] = ref_rw.rho(class_losses)
    scale["rho"] = 8 + 8 * abs(out["rho"]) + 4 * np.log2(len(y) + 1)
  else:
    out.update(nc4=np.nan, nc4_ambiguous=0, rho=np.nan)
    scale["rho"] = 0.0
  return out, scale


def check_metrics(metrics, expected, scale, rows, label):
  u = S.EPS32
  for name in METRICS:
    got = float(getattr(metrics, name))
    if name == "nc4":
      if np.isnan(expected["nc4"]):
        assert np.isnan(got), f"{label} (b): NC4 without examples should be NaN, got {got}"
      else:
        allowed = expected["nc4_ambiguous"] / rows + 4 * u  # a float32 ratio
        assert abs(got - expected["nc4"]) <= allowed, (
            f"{label} (a): nc4 {got} vs {expected['nc4']} (near-ties {expected['nc4_ambiguous']})")
      continue
    if np.isnan(expected[name]):
      assert np.isnan(got), f"{label} (b): {name} undefined here (reference NaN), got {got}"
      continue
    if np.isinf(scale[name]):
      continue
    S.assert_close(got, expected[name], C * u * scale[name] + 1e-30, f"{label} (a): {name}")
    S.assert_finite([got], f"{label} (b): {name}")


def acc_from_numpy(acc):
  return reweight_jax.NCAccumulator(*(jnp.asarray(x) for x in acc))


def streaming(ex: NCExample, padded: S.Padded, features=None):
  """Pass 1 and pass 2 over `chunks` contiguous chunks; checks (c) after every update."""
  shape = padded.batch.shape
  features = padded.features if features is None else features
  acc = reweight_jax.NCAccumulator.init(shape.num_classes, shape.dim)
  size = shape.batch // ex.chunks
  for start in range(0, shape.batch, size):
    rows = slice(start, start + size)
    before = jax.device_get(acc)
    acc = nc_update(acc, jnp.asarray(features[rows]), jnp.asarray(padded.labels[rows]),
                    jnp.asarray(padded_losses(ex, padded)[rows]), jnp.asarray(padded.where[rows]))
    after = jax.device_get(acc)
    valid = padded.where[rows]
    absent = ~np.isin(np.arange(shape.num_classes), padded.labels[rows][valid])
    for field in ("counts", "class_means", "loss_sums", "loss_counts"):
      np.testing.assert_array_equal(np.asarray(getattr(after, field))[absent],
                                    np.asarray(getattr(before, field))[absent],
                                    err_msg=f"NCAccumulator.update (c): {field} of absent classes")
  for start in range(0, shape.batch, size):
    rows = slice(start, start + size)
    acc = nc_update_ncc(acc, jnp.asarray(features[rows]), jnp.asarray(ex.classifier),
                        jnp.asarray(ex.bias), jnp.asarray(padded.where[rows]))
  return acc


def padded_losses(ex: NCExample, padded: S.Padded) -> np.ndarray:
  """The example's losses in the row order of `padded` (the example's padding or a permutation)."""
  return ex.losses if padded is ex.padded else ex.losses[ex.order]


def compare_accumulators(acc, reference_acc, rows_bound, label):
  u = S.EPS32
  acc, reference_acc = jax.device_get(acc), jax.device_get(reference_acc)
  for field in ("counts", "loss_counts", "ncc_examples"):
    np.testing.assert_array_equal(getattr(acc, field), getattr(reference_acc, field),
                                  err_msg=f"{label}: {field}")
  phi, total_loss = rows_bound
  S.assert_close(acc.class_means, reference_acc.class_means, C * u * 4 * phi + 1e-30,
                 f"{label}: class means")
  S.assert_close(acc.within_scatter, reference_acc.within_scatter,
                 C * u * 8 * float(np.sum(acc.counts)) * phi ** 2 + 1e-30, f"{label}: scatter")
  S.assert_close(acc.loss_sums, reference_acc.loss_sums, C * u * 4 * total_loss + 1e-30,
                 f"{label}: loss sums")


def check_nc(ex: NCExample):
  S.before_example()
  padded, shape = ex.padded, ex.padded.batch.shape
  expected, scale = nc_reference(ex)
  rows = max(padded.batch.rows, 1)
  real_features = S.Batch.f64(padded.batch.features)
  phi = float(np.max(np.linalg.norm(real_features, axis=1), initial=0.0))
  total_loss = float(np.sum(np.abs(ex.losses[padded.real].astype(np.float64))))
  bound = (phi, total_loss)

  one_shot = nc_one_shot(jnp.asarray(padded.features), jnp.asarray(padded.labels),
                         jnp.asarray(ex.classifier), jnp.asarray(ex.bias), jnp.asarray(ex.losses),
                         jnp.asarray(padded.where))
  check_metrics(one_shot, expected, scale, rows, "nc_metrics (d)")
  acc = streaming(ex, padded)
  check_metrics(nc_finalize(acc, jnp.asarray(ex.classifier)), expected, scale, rows,
                f"NCAccumulator, {ex.chunks} chunks (d)")

  permuted = padded.permuted(ex.order)
  acc_permuted = streaming(ex, permuted)
  check_metrics(nc_finalize(acc_permuted, jnp.asarray(ex.classifier)), expected, scale, rows,
                "NCAccumulator (e) permuted")
  compare_accumulators(acc_permuted, acc, bound, "NCAccumulator (e) permuted")

  acc_sharded = per_device_copies(nc_sharded(shape.devices)(
      reweight_jax.NCAccumulator.init(shape.num_classes, shape.dim), jnp.asarray(padded.features),
      jnp.asarray(padded.labels), jnp.asarray(ex.losses), jnp.asarray(padded.where),
      jnp.asarray(ex.classifier), jnp.asarray(ex.bias)), "NCAccumulator")
  acc_sharded = reweight_jax.NCAccumulator(*acc_sharded)
  label = f"NCAccumulator (f) {shape.devices} devices"
  check_metrics(nc_finalize(acc_from_numpy(acc_sharded), jnp.asarray(ex.classifier)), expected,
                scale, rows, label)
  compare_accumulators(acc_sharded, acc, bound, label)

  # bfloat16 features are upcast: bit-for-bit the float32 call on the same values.
  if shape.dtype == S.BF16:
    f32 = nc_one_shot(jnp.asarray(S.Batch.f64(padded.features), jnp.float32),
                      jnp.asarray(padded.labels), jnp.asarray(ex.classifier),
                      jnp.asarray(ex.bias), jnp.asarray(ex.losses), jnp.asarray(padded.where))
    for name in METRICS:
      np.testing.assert_array_equal(getattr(f32, name), getattr(one_shot, name),
                                    err_msg=f"nc_metrics: bf16 features not upcast ({name})")


def nc_shapes(wide):
  if wide:
    return S.wide_shapes(S.BUCKETS, min_classes=2, dims=(1, 4, 16), devices=S.DEVICE_COUNTS)
  return st.sampled_from(NC_POOL)


@given(data=st.data())
def test_nc_accumulator(data):
  check_nc(data.draw(nc_examples(nc_shapes(S.WIDE), NC_CHUNKS if S.WIDE else (2,))))


@pytest.mark.slow
@S.SLOW
@given(data=st.data())
def test_nc_accumulator_slow(data):
  check_nc(data.draw(nc_examples(nc_shapes(True), NC_CHUNKS)))
