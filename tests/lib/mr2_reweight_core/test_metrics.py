"""mr2_reweight_core.metrics.per_class_loss_sums (re-exported by reweight_jax) against a float64
NumPy reference: padding rows of any value, labels out of range (an error eagerly, not counted under
jit, as `per_class_correct`), bfloat16 losses summed in float32, and the psum over devices;
`class_mean` (NaN for a class without examples)."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reweight_jax
from mr2_reweight_core import metrics

EPS32 = float(jnp.finfo(jnp.float32).eps)
BUCKETS = (8, 16)  # padded batch sizes: the jitted function compiles once per (size, K)


def reference_sums(losses, labels, where, num_classes):
  """float64 Σ_{i: y_i = k, where_i, 0 <= y_i < K} ℓ_i, Σ |ℓ_i| and the counts."""
  keep = where & (labels >= 0) & (labels < num_classes)
  values = np.asarray(losses, np.float64)[keep]
  sums, abs_sums = np.zeros(num_classes), np.zeros(num_classes)
  np.add.at(sums, labels[keep], values)
  np.add.at(abs_sums, labels[keep], np.abs(values))
  return sums, abs_sums, np.bincount(labels[keep], minlength=num_classes)


@functools.lru_cache(maxsize=None)
def jitted(num_classes):
  return jax.jit(functools.partial(metrics.per_class_loss_sums, num_classes=num_classes))


@given(data=st.data())
def test_loss_sums_match_the_float64_reference_on_the_real_rows(data):
  """Property: (sums, counts) over the rows with where = True equal the float64 reference (sums to
  the float32 bound B·ε·Σ|ℓ|, counts exactly), whatever the padding rows hold; under jit a real row
  with a label outside [0, K) is not counted either."""
  num_classes = data.draw(st.sampled_from([1, 3, 10]), label="K")
  batch = data.draw(st.sampled_from(BUCKETS), label="B")
  real = data.draw(st.integers(0, batch), label="real rows")
  under_jit = data.draw(st.booleans(), label="jit")
  garbage = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e30, 0.0]), label="padding loss")
  rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
  scale = 10.0 ** rng.uniform(-3, 4)
  losses = (scale * rng.exponential(size=batch)).astype(np.float32)
  labels = rng.integers(0, num_classes, batch).astype(np.int32)
  where = np.zeros(batch, bool)
  where[rng.permutation(batch)[:real]] = True
  losses[~where] = garbage
  if under_jit:  # out-of-range labels on padding rows and on some real rows: never counted
    outside = rng.random(batch) < 0.3
    labels[outside] = rng.choice([-1, num_classes, num_classes + 7], outside.sum())
  run = jitted(num_classes) if under_jit else functools.partial(
      metrics.per_class_loss_sums, num_classes=num_classes)
  sums, counts = run(losses, labels, where=where)
  chex.assert_shape((sums, counts), (num_classes,))
  chex.assert_type((sums, counts), jnp.float32)
  want, abs_sums, want_counts = reference_sums(losses, labels, where, num_classes)
  np.testing.assert_array_equal(counts, want_counts)
  bound = batch * EPS32 * abs_sums
  assert np.all(np.abs(np.asarray(sums, np.float64) - want) <= bound), (sums, want, bound)


def test_without_where_every_row_counts_and_absent_classes_are_zero():
  losses = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
  sums, counts = reweight_jax.per_class_loss_sums(losses, np.array([0, 2, 2, 0], np.int32), 4)
  np.testing.assert_array_equal(sums, [9.0, 0.0, 6.0, 0.0])
  np.testing.assert_array_equal(counts, [2.0, 0.0, 2.0, 0.0])
  with np.errstate(invalid="ignore"):
    class_loss = metrics.class_mean(sums, counts)  # L_k = sums / counts, NaN for an absent class
  np.testing.assert_array_equal(class_loss, [4.5, np.nan, 3.0, np.nan])


def test_bfloat16_losses_are_summed_in_float32():
  losses = jnp.full((300,), 1.0 + 2.0**-7, jnp.bfloat16)  # bf16 sums would stall at 256
  sums, _ = metrics.per_class_loss_sums(losses, jnp.zeros((300,), jnp.int32), 1)
  chex.assert_type(sums, jnp.float32)
  np.testing.assert_allclose(sums, [300 * (1.0 + 2.0**-7)], rtol=EPS32 * 300)


def test_sharded_sums_are_the_global_sums():
  """psum over `axis_name` of sums and counts: each device gets the global batch's result
  (half-integer losses, so every order of summation is exact)."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 5, 64).astype(np.int32)
  losses = (rng.integers(0, 40, 64) / 2).astype(np.float32)
  where = np.arange(64) % 7 != 3
  want = metrics.per_class_loss_sums(losses, labels, 5, where=where)

  @functools.partial(jax.pmap, axis_name="batch")
  def sharded(losses, labels, where):
    return metrics.per_class_loss_sums(losses, labels, 5, where=where, axis_name="batch")

  shard = lambda t: t.reshape(8, 8)  # noqa: E731
  got = sharded(shard(losses), shard(labels), shard(where))
  for device in range(8):
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[device], got), want)


@pytest.mark.parametrize("call, error, message", [
    (lambda: metrics.per_class_loss_sums(np.ones(3, np.float32), np.zeros(4, np.int32), 2),
     ValueError, "per_example_loss: leading dimension"),
    (lambda: metrics.per_class_loss_sums(np.ones((4, 1), np.float32), np.zeros(4, np.int32), 2),
     ValueError, "per_example_loss: expected rank 1"),
    (lambda: metrics.per_class_loss_sums(np.ones(4, np.int32), np.zeros(4, np.int32), 2),
     TypeError, "per_example_loss"),
    (lambda: metrics.per_class_loss_sums(np.ones(2, np.float32), np.array([0, 2], np.int32), 2),
     ValueError, "labels"),
    (lambda: metrics.per_class_loss_sums(np.ones(2, np.float32), np.zeros(2, np.int32), 2,
                                         where=np.ones(3, bool)),
     ValueError, "where"),
])
def test_bad_input_names_the_argument(call, error, message):
  with pytest.raises(error, match=message):
    call()


def test_class_mean_is_nan_for_absent_classes():
  sums = np.array([3.0, 0.0, 5.0])
  counts = np.array([2.0, 0.0, 4.0])
  out = metrics.class_mean(sums, counts)
  np.testing.assert_allclose(out[[0, 2]], [1.5, 1.25])
  assert np.isnan(out[1])
  np.testing.assert_allclose(metrics.class_mean(np.ones((3, 2)), counts)[2], [0.25, 0.25])
