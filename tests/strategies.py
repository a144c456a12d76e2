"""Hypothesis strategies shared by the property tests (tests/test_properties_*.py).

What is generated (all of it drawn by hypothesis, so that a failure shrinks and prints its example):
* shapes: batch sizes 1–64 (K from a small set plus, one draw in ten, any K in [2, 300]; K > B
  included), feature dimensions, float32 or bfloat16 inputs;
* batches: label patterns (uniform, absent classes, singletons, one-class batches, long tails, pairs),
  feature and logit scales from 1e-3 to 1e4 (log-uniform, the two ends drawn on purpose), well
  separated / overlapping / collapsed classes, logits with ties or confident rows; array values come
  from a NumPy generator seeded by a drawn seed (shrinking acts on the structure, not on 10⁴ floats);
* padding: a function that takes `where` always sees one of a few bucket sizes: the real rows are
  padded with `where=False` rows of garbage (zeros, huge values, NaN, ±inf; labels in or out of
  range), at the end or scattered, or every row is padding. Property (d) is then "the result equals
  the float64 reference on the real rows" — and compiled functions are reused across examples.
* states: prior `ClassStats` (none, some or every class seen), `ReweightState` (fresh or with batch
  counts and their β), training-set class counts (long-tailed, some classes with no example).

Compiled functions are cached per (function, shape, dtype): the strategies draw shapes from pools.
The default profile (tests/conftest.py) draws one shape per test from narrow pools, chosen so that the
tests together cover every corner (K = 1, K > B, K = 300, bf16, 0 … 64 real rows); the
slow profile (`HYPOTHESIS_PROFILE=slow`, or the `@pytest.mark.slow` twin of each test) draws from the
wide pools.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import event
from hypothesis import settings
from hypothesis import strategies as st

from tests.reference import numpy_mr2 as ref_mr2

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
WIDE = PROFILE != "default"  # the unmarked tests draw from the wide pools under any other profile
SLOW = settings(settings.get_profile("slow"))  # settings of the @pytest.mark.slow twins

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def eps(dtype: str) -> float:
  """Machine epsilon of an input dtype (2⁻²³ for float32, 2⁻⁷ for bfloat16)."""
  return float(jnp.finfo(DTYPES[dtype]).eps)


EPS32 = eps("float32")

# ------------------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------------------

# Wide pools (slow profile). Every (B, K, d, dtype, devices) is a compile of each function (~1–3 s
# for MR2 with its gradient), so the pools are small; the padded tests put 0 … bucket real rows in
# a bucket, which covers every batch size of 1–64 with four compiles.
BATCH_SIZES = (1, 2, 3, 8, 13, 24, 64)   # unpadded (the registry entries take no `where`)
NUM_CLASSES = (1, 2, 3, 7, 64, 300)      # plus, one draw in twenty, any K in [2, 300]
DIMS = (1, 8)
BUCKETS = (8, 16, 32, 64)                # padded sizes (functions with `where`)
SHARDED_BATCH_SIZES = (8, 24, 64)        # divisible by 2, 4 and 8 devices
DEVICE_COUNTS = (2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Shape:
  """What a compiled function is specialised on: rows it sees, K, d, input dtype, devices."""
  batch: int
  num_classes: int
  dim: int
  dtype: str
  devices: int = 1


def _num_classes(min_classes: int):
  fixed = st.sampled_from([k for k in NUM_CLASSES if k >= min_classes])
  # One draw in twenty is any K in [max(2, min), 300] ("a few random ones": each a new compile).
  return st.integers(0, 19).flatmap(
      lambda i: st.integers(max(2, min_classes), 300) if i == 0 else fixed)


def wide_shapes(batch_sizes=BATCH_SIZES, *, min_classes: int = 1, dims=DIMS, devices=(1,)):
  """Any shape of the wide pools (devices: drawn from `devices`, dividing the batch)."""
  return st.builds(Shape, st.sampled_from(batch_sizes), _num_classes(min_classes),
                   st.sampled_from(dims), st.sampled_from(tuple(DTYPES)),
                   st.sampled_from(devices)).filter(lambda s: s.batch % s.devices == 0)


def pool_shape(pool, index: int, devices: bool = True):
  """The `index`-th shape of a narrow pool (cyclically); with `devices=False` on one device."""
  shape = pool[index % len(pool)]
  return st.just(shape if devices else dataclasses.replace(shape, devices=1))


F32, BF16 = "float32", "bfloat16"
# Narrow pools of the default profile. The i-th parametrised registry test draws SHARDED_POOL[i % 9]:
# on one device (properties a–e) and split over its devices (f), so that one single-device compile
# serves both tests; the pool alternates float32 and bfloat16 and, over the tests, covers K = 1, 2,
# K > B, K = 300, d = 1 … 16, 2/4/8 devices and the tiled representation margin (B = 64 on 2).
# Odd and small batch sizes (B = 1, …) come from the padded tests, whose real rows are 0 … bucket.
SHARDED_POOL = (
    Shape(8, 300, 4, F32, 8), Shape(24, 5, 4, BF16, 2), Shape(16, 7, 1, F32, 4),
    Shape(64, 12, 4, BF16, 8), Shape(32, 64, 4, F32, 4), Shape(64, 3, 4, F32, 2),
    Shape(24, 1, 4, BF16, 8), Shape(8, 2, 16, BF16, 2), Shape(16, 300, 4, BF16, 4),
)


# ------------------------------------------------------------------------------------------------
# Batches
# ------------------------------------------------------------------------------------------------

PATTERNS = ("uniform", "absent", "singletons", "one_class", "long_tail", "pairs")
SPREADS = {"separated": 0.1, "overlapping": 1.0, "collapsed": 0.0}
LOGIT_KINDS = ("gaussian", "ties", "confident")
# log10 of a scale: both ends on purpose, then anything in between.
SCALE_EXPONENTS = st.one_of(st.sampled_from((-3.0, 4.0, 0.0)), st.floats(-3.0, 4.0))


def make_labels(rng: np.random.Generator, rows: int, num_classes: int, pattern: str) -> np.ndarray:
  if pattern == "uniform":
    labels = rng.integers(0, num_classes, rows)
  elif pattern == "absent":  # a random half of the classes (at least one) never occurs
    kept = rng.permutation(num_classes)[:max(1, num_classes // 2)]
    labels = rng.choice(kept, rows)
  elif pattern == "singletons":  # every class at most once, as far as B ≤ K allows; the rest one class
    distinct = rng.permutation(num_classes)[:min(rows, num_classes)]
    labels = np.concatenate([distinct, np.full(rows - distinct.size, distinct[0] if rows else 0)])
  elif pattern == "one_class":
    labels = np.full(rows, rng.integers(num_classes))
  elif pattern == "long_tail":
    weights = (1.0 + rng.permutation(num_classes)) ** -1.5
    labels = rng.choice(num_classes, rows, p=weights / weights.sum())
  elif pattern == "pairs":  # every class present exactly twice, as far as B allows
    classes = rng.permutation(num_classes)
    labels = np.repeat(classes, 2)[:rows]
    labels = np.concatenate([labels, np.full(rows - labels.size, classes[0])])
  else:
    raise ValueError(pattern)
  return rng.permutation(np.asarray(labels, np.int32)[:rows])


@dataclasses.dataclass
class Batch:
  """One generated batch (inputs in the shape's dtype; `f64` gives the values the reference sees)."""
  shape: Shape
  labels: np.ndarray      # int32 [B]
  logits: np.ndarray      # [B, K] in shape.dtype
  features: np.ndarray    # [B, d] in shape.dtype
  feature_scale: float
  logit_scale: float
  description: str

  @property
  def rows(self) -> int:
    return self.labels.shape[0]

  @staticmethod
  def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)

  def permuted(self, order: np.ndarray) -> "Batch":
    return dataclasses.replace(self, labels=self.labels[order], logits=self.logits[order],
                               features=self.features[order])


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
  return np.array(jnp.asarray(x, DTYPES[dtype]))  # a writable copy


@st.composite
def batches(draw, shape: Shape, rows: int | None = None) -> Batch:
  """`rows` real rows (default shape.batch) of a batch of the given shape."""
  rows = shape.batch if rows is None else rows
  num_classes, dim = shape.num_classes, shape.dim
  pattern = draw(st.sampled_from(PATTERNS))
  spread = draw(st.sampled_from(tuple(SPREADS)))
  offset = draw(st.sampled_from((0.0, 3.0)))
  logit_kind = draw(st.sampled_from(LOGIT_KINDS))
  feature_scale = 10.0 ** draw(SCALE_EXPONENTS)
  logit_scale = 10.0 ** draw(SCALE_EXPONENTS)
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  labels = make_labels(rng, rows, num_classes, pattern)
  centres = rng.normal(size=(num_classes, dim))
  features = feature_scale * (offset + centres[labels]
                              + SPREADS[spread] * rng.normal(size=(rows, dim)))
  logits = rng.normal(size=(rows, num_classes))
  if logit_kind == "ties":
    logits = np.round(2 * logits) / 2
  elif logit_kind == "confident":
    logits[np.arange(rows), labels] += 5.0
  logits = logit_scale * logits
  present = np.unique(labels).size
  event(f"dtype={shape.dtype}")
  event(f"pattern={pattern}")
  if num_classes > rows:
    event("K > B")
  if rows and present == 1:
    event("one class in the batch")
  if present < num_classes:
    event("absent classes")
  return Batch(shape, labels, _cast(logits, shape.dtype), _cast(features, shape.dtype),
               feature_scale, logit_scale,
               f"{pattern}, {spread} classes, offset {offset}, {logit_kind} logits, feature scale "
               f"{feature_scale:.3g}, logit scale {logit_scale:.3g}, seed {seed}")


# ------------------------------------------------------------------------------------------------
# Padding (`where`)
# ------------------------------------------------------------------------------------------------

GARBAGE = ("zeros", "huge", "nan", "inf")


@dataclasses.dataclass
class Padded:
  """`batch` (the real rows) placed among padding rows: arrays of the bucket size."""
  batch: Batch
  labels: np.ndarray
  logits: np.ndarray
  features: np.ndarray
  where: np.ndarray       # bool [bucket]
  real: np.ndarray        # positions of the real rows, in order
  garbage: str

  @property
  def rows(self) -> int:
    return self.labels.shape[0]

  def describe(self) -> str:
    out_of_range = np.any((self.labels < 0) | (self.labels >= self.batch.shape.num_classes))
    return (f"{self.batch.description}; {self.rows - self.real.size} padding rows of "
            f"{self.garbage}{' with labels out of range' if out_of_range else ''} around the "
            f"real rows {self.real.tolist()}")

  def permuted(self, order: np.ndarray) -> "Padded":
    """The same rows in another order (`real` follows the real rows)."""
    inverse = np.argsort(order)
    return dataclasses.replace(self, labels=self.labels[order], logits=self.logits[order],
                               features=self.features[order], where=self.where[order],
                               real=inverse[self.real])


@st.composite
def padded_batches(draw, shape: Shape, min_real: int = 0) -> Padded:
  """0 … shape.batch real rows (0: every row is padding) padded to shape.batch with garbage."""
  real_rows = draw(st.integers(min_real, shape.batch))
  batch = draw(batches(shape, rows=real_rows))
  garbage = draw(st.sampled_from(GARBAGE))
  scattered = draw(st.booleans())
  out_of_range = draw(st.booleans())
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  size, pad = shape.batch, shape.batch - real_rows
  real = (np.sort(rng.permutation(size)[:real_rows]) if scattered
          else np.arange(real_rows))
  fill = {"zeros": 0.0, "huge": 1e30, "nan": np.nan, "inf": np.inf}[garbage]
  logits = np.full((size, shape.num_classes), fill)
  features = np.full((size, shape.dim), fill)
  if garbage in ("huge", "inf"):  # mixed signs
    logits *= rng.choice([-1.0, 1.0], logits.shape)
    features *= rng.choice([-1.0, 1.0], features.shape)
  labels = (rng.choice([-1, shape.num_classes], size) if out_of_range
            else rng.integers(0, shape.num_classes, size)).astype(np.int32)
  where = np.zeros(size, bool)
  logits = _cast(logits, shape.dtype)
  features = _cast(features, shape.dtype)
  logits[real], features[real], labels[real], where[real] = (batch.logits, batch.features,
                                                               batch.labels, True)
  if pad:
    event(f"padding: {garbage}{', scattered' if scattered else ''}"
          f"{', labels out of range' if out_of_range else ''}")
  if real_rows == 0:
    event("every row is padding")
  return Padded(batch, labels, logits, features, where, real, garbage)


# ------------------------------------------------------------------------------------------------
# States and class counts
# ------------------------------------------------------------------------------------------------

@st.composite
def class_stats_arrays(draw, num_classes: int, magnitude: float):
  """(A, V, seen) float32/bool [K] of a prior `ClassStats`: none, some or every class seen."""
  seen_kind = draw(st.sampled_from(("none", "some", "all")))
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  seen = {"none": np.zeros(num_classes, bool), "all": np.ones(num_classes, bool),
          "some": rng.random(num_classes) < 0.5}[seen_kind]
  a = np.where(seen, rng.gamma(2.0, 1.0, num_classes) * magnitude, 0.0).astype(np.float32)
  v = np.where(seen, rng.gamma(2.0, 1.0, num_classes) * magnitude, 0.0).astype(np.float32)
  return a, v, seen


@st.composite
def reweight_arrays(draw, num_classes: int):
  """(batch_counts, beta) float32 [K] of a prior `ReweightState`: fresh or after some batches."""
  fresh = draw(st.booleans())
  if fresh:
    return np.zeros(num_classes, np.float32), np.ones(num_classes, np.float32)
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  counts = rng.integers(0, 50, num_classes).astype(np.float32)
  earlier = np.maximum(counts - rng.integers(0, 5, num_classes), 0)
  beta = np.maximum(earlier, 1.0) ** -1.0
  return counts, (beta / beta.mean()).astype(np.float32)


@st.composite
def simplex_points(draw, num_classes: int, signed: bool = False) -> np.ndarray:
  """A distribution q [K] (float32, Σ = 1): uniform, random, or peaked with tiny entries; with
  `signed`, also weights that sum to 1 with negative entries (FairDRO's unclipped q)."""
  kinds = ("uniform", "random", "peaked") + (("signed",) if signed else ())
  kind = draw(st.sampled_from(kinds))
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  if kind == "uniform":
    q = np.ones(num_classes)
  elif kind == "random":
    q = rng.dirichlet(np.ones(num_classes))
  elif kind == "signed":
    q = 1.0 / num_classes + rng.normal(size=num_classes) / num_classes
    q = (q + (1.0 - q.sum()) / num_classes).astype(np.float32)
    return q
  else:
    q = np.exp(-30.0 * rng.random(num_classes))
  q = (q / q.sum()).astype(np.float32)
  return q / q.sum(dtype=np.float32)


@st.composite
def class_counts(draw, num_classes: int) -> np.ndarray:
  """Training-set counts n_c [K] (float32): balanced, long-tailed, or long-tailed with empty classes."""
  kind = draw(st.sampled_from(("balanced", "long_tail", "with_zeros")))
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  if kind == "balanced":
    counts = np.full(num_classes, 100.0)
  else:
    counts = np.floor(5000.0 * (1.0 + rng.permutation(num_classes)) ** -1.2)
    if kind == "with_zeros":
      counts[rng.random(num_classes) < 0.3] = 0.0
  return counts.astype(np.float32)


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------

MAX_MEMORY_MAPS = 30_000
_EXAMPLES_RUN = [0, time.time()]  # examples begun in this process, and when it started


def before_example() -> None:
  """Called first by every property check: `record_progress`, then `bound_compiled_code`."""
  record_progress()
  bound_compiled_code()


def record_progress(every: int = 25) -> None:
  """With PROPERTY_PROGRESS=<file> (set by `tests.run_slow_properties`), every `every` examples
  rewrites the file with "<examples begun> examples in <seconds> s": how far a slow twin is."""
  _EXAMPLES_RUN[0] += 1
  path = os.environ.get("PROPERTY_PROGRESS")
  if path and _EXAMPLES_RUN[0] % every == 0:
    with open(path, "w") as f:
      f.write(f"{_EXAMPLES_RUN[0]} examples in {time.time() - _EXAMPLES_RUN[1]:.0f} s\n")


def bound_compiled_code(limit: int = MAX_MEMORY_MAPS) -> None:
  """Drops JAX's compiled executables once the process holds more than `limit` memory mappings.

  Every XLA:CPU executable keeps ~200 mappings (MR2's step with its gradient: ~180, under shard_map
  ~250), and a slow run compiles hundreds of shapes: past the kernel's vm.max_map_count (65,530
  here) the next compile segfaults inside LLVM. Called before every example (`before_example`);
  the functions are compiled again when a shape comes back.
  """
  try:
    with open("/proc/self/maps") as maps:
      count = sum(1 for _ in maps)
  except OSError:
    return
  if count > limit:
    jax.clear_caches()
    event("compiled code dropped (memory maps)")

WORST: dict[str, float] = {}  # check → the largest |error| / atol seen (read by a report plugin)


def assert_close(actual, expected, atol, what: str) -> None:
  """|actual − expected| ≤ atol elementwise (atol may be an array); NaN only where expected is NaN."""
  actual = np.asarray(actual, np.float64)
  expected = np.asarray(expected, np.float64)
  atol = np.broadcast_to(np.asarray(atol, np.float64), expected.shape)
  both_nan = np.isnan(actual) & np.isnan(expected)
  same_inf = np.isinf(actual) & (actual == expected)
  error = np.where(both_nan | same_inf, 0.0, np.abs(actual - expected))
  bad = ~(error <= atol)
  if error.size:  # the worst |error| / atol seen per check (how tight the tolerances are)
    key = re.sub(r"\d+ (devices|dev|chunks)", r"n \1", what)
    ratio = float(np.max(np.where(atol > 0, error / np.maximum(atol, 1e-300),
                                  np.where(error > 0, np.inf, 0.0))))
    WORST[key] = max(WORST.get(key, 0.0), ratio)
  if np.any(bad):
    index = np.unravel_index(np.argmax(np.where(bad, error / np.maximum(atol, 1e-300), -1)),
                             bad.shape) if bad.ndim else ()
    raise AssertionError(
        f"{what}: {int(np.sum(bad))} of {bad.size} entries differ; worst at {index}: "
        f"actual {actual[index]!r}, expected {expected[index]!r}, |error| {error[index]:.3g} > "
        f"atol {atol[index]:.3g}")


def assert_finite(tree_or_array, what: str) -> None:
  for i, x in enumerate(np.atleast_1d(np.asarray(leaf, np.float64)) for leaf in
                        (tree_or_array if isinstance(tree_or_array, (list, tuple))
                         else [tree_or_array])):
    if not np.all(np.isfinite(x)):
      raise AssertionError(f"{what}[{i}]: {int(np.sum(~np.isfinite(x)))} non-finite entries")


# MR2 class statistics: the float64 reference update and its error scales (used by
# tests/harness/methods/test_properties_registry.py and tests/lib/test_properties_stats.py).

def class_norms(features, labels, num_classes):
  """max_i ‖φ_i‖₂ over each class's rows [K] (0 for absent classes)."""
  norms = np.linalg.norm(features, axis=1)
  out = np.zeros(num_classes)
  np.maximum.at(out, labels, norms)
  return out


def stats_reference(a_old, v_old, seen_old, features, labels, decay, p, where=None):
  """Reference EMA update and the per-class error scales of A and V (units of ε)."""
  num_classes = a_old.shape[0]
  a, v, seen = ref_mr2.update_class_stats(a_old, v_old, seen_old, features, labels, decay, p,
                                          where=where)
  valid = np.ones(len(labels), bool) if where is None else np.asarray(where)
  batch_a, batch_v, counts = ref_mr2.batch_class_moments(features, labels, num_classes, p,
                                                         where=valid)
  phi = class_norms(features[valid], labels[valid], num_classes)
  weight = np.where(seen_old, 1.0 - decay, 1.0)
  # ‖m‖_p² with m off by ~ε·Φ: 2·√a·Φ; v's centring likewise; the p-th powers and roots (p + 2)·a.
  # The second-order (ε·Φ)² is written as Φ²·2⁻⁷ (bf16's ε, generous for float32): a collapsed class
  # has v = 0 exactly, while the rounded mean leaves ~(ε·Φ)².
  second_order = phi ** 2 * eps("bfloat16")
  scale_a = np.where(counts > 0, weight * ((p + 2) * batch_a + 2 * phi * np.sqrt(batch_a)
                                           + second_order), 0.0)
  scale_v = np.where(counts > 0, weight * ((p + 2) * batch_v + 2 * phi * np.sqrt(batch_v)
                                           + second_order), 0.0)
  return (a, v, seen), (scale_a + 2 * np.abs(a), scale_v + 2 * np.abs(v)), (batch_a, batch_v,
                                                                             counts, phi)
