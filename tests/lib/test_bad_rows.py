"""Bad rows never enter carried state (docs: "Failure modes").

Every function of `mr2_jax` / `reweight_jax` that updates carried state (MR2's `ClassStats` through
`update_class_stats` and `mr2_loss`, the reweighting's `ReweightState` through
`inverse_reweighted_loss` and `mixed_inverse_reweighted_loss`, `NCAccumulator.update`, Group DRO's
q, LfF's `LfFState`) is given batches in which random real rows (inside `where`) hold a NaN, +inf or
−inf value in any array the state reads (features, per-example losses, the second loss of a mixed
row, either LfF model's logits), or a label outside [0, K) (the mixed rows' second label too;
traced only: eagerly that raises), beside padding rows of garbage in every array. Properties:

* the new state equals the float64 NumPy reference (tests/reference/, written from the specs) on
  the clean rows alone, and `skipped_rows` counts the bad real rows (padding counts nowhere);
* the loss of such a batch, and its gradient, are NaN (so `optax.apply_if_finite` skips the step);
* the same state, loss and count under `jit`, `pmap`, `jax.shard_map` (check_vma=True) and `jit`
  over an Explicit mesh (8 fake CPU devices, tests/conftest.py), and eagerly for non-finite values;
* inside `traced_checks()`, `checkify` flags both faults.

The unmarked tests draw `settings` of the default profile (6 examples); the `@pytest.mark.slow`
twins draw 1,000 each (`-m slow`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import checkify
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import mr2_jax
import reweight_jax as rw
from tests import strategies as S
from tests.covering import covering
from tests.reference import numpy_comparisons as ref_comparisons
from tests.reference import numpy_jtt_lff as ref_lff
from tests.reference import numpy_mixed_labels as ref_mixed
from tests.reference import numpy_mr2 as ref_mr2
from tests.reference import numpy_reweight as ref_reweight

AXIS = "batch"
DEVICES = 8
BATCH = 16  # two rows per device
K = 4
DIM = 3
NUM_EXAMPLES = 40  # LfF's training set
KINDS = ("nan", "inf", "-inf", "label_high", "label_low")  # written into `values` and `labels`
OTHER_KINDS = ("other_nan", "other_inf", "other_-inf")  # written into `other`
LABEL_B_KINDS = ("label_b_high", "label_b_low")  # written into `labels_b`
NON_FINITE = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
MODES = ("jit", "pmap", "shard_map", "explicit")
RTOL, ATOL = 2e-5, 1e-6


class Batch(NamedTuple):
  """One batch: `values` and `other` the function's two float row inputs (features, losses or
  logits: `Stateful.fn` says which), `labels` [B] and `labels_b` [B] (a mixed row's second label),
  `indices` [B] (LfF's dataset positions), `where` the real rows, `bad` the real rows made bad."""
  values: np.ndarray
  other: np.ndarray
  labels: np.ndarray
  indices: np.ndarray
  where: np.ndarray
  bad: np.ndarray
  labels_b: np.ndarray


def make_batch(seed: int, rows: list[tuple[int, str]], padding: list[int], value_shape: tuple,
               other_shape: tuple) -> Batch:
  """A batch with the listed (row, kind) bad real rows and garbage padding rows."""
  rng = np.random.default_rng(seed)
  values = rng.normal(size=(BATCH, *value_shape)).astype(np.float32)
  other = rng.normal(size=(BATCH, *other_shape)).astype(np.float32)
  labels = rng.integers(0, K, BATCH).astype(np.int32)
  labels[:K] = np.arange(K)  # every class has a row (perhaps a bad one)
  labels_b = rng.integers(0, K, BATCH).astype(np.int32)
  indices = rng.permutation(NUM_EXAMPLES)[:BATCH].astype(np.int32)
  where = np.ones(BATCH, bool)
  bad = np.zeros(BATCH, bool)
  for row in padding:  # padding: garbage that must count nowhere, and never as skipped
    where[row] = False
    values[row] = np.nan
    other[row] = np.inf
    labels[row] = K + 7
    labels_b[row] = -5
  for row, kind in rows:
    if not where[row]:
      continue
    bad[row] = True
    array, kind = (other, kind[len("other_"):]) if kind.startswith("other_") else (values, kind)
    if kind in NON_FINITE:
      flat = array.reshape(BATCH, -1)  # a view: writes reach the array
      flat[row, rng.integers(flat.shape[1])] = NON_FINITE[kind]
    elif kind.startswith("label_b"):
      labels_b[row] = K + 2 if kind == "label_b_high" else -1
    else:
      labels[row] = K + 2 if kind == "label_high" else -1
  return Batch(values, other, labels, indices, where, bad, labels_b)


@st.composite
def batches(draw, value_shape, other_shape=(), kinds=KINDS):
  seed = draw(st.integers(0, 2**31 - 1))
  positions = st.integers(0, BATCH - 1)
  rows = draw(st.lists(st.tuples(positions, st.sampled_from(kinds)), min_size=1, max_size=4))
  padding = draw(st.lists(positions, max_size=3))
  return make_batch(seed, rows, padding, value_shape, other_shape)


# ------------------------------------------------------------------------------------------------
# The stateful functions: fn(batch arrays, state, axis_name) -> (loss or None, new state, skipped)
# and the float64 reference of the new state on the clean rows.
# ------------------------------------------------------------------------------------------------


class Stateful(NamedTuple):
  """`kinds`: the faults drawn, one per array the state reads (a function whose state reads
  `other` or `labels_b` is given bad values there too)."""
  fn: Callable[..., Any]
  state: Callable[[], Any]
  reference: Callable[[Batch, np.ndarray], Any]  # (batch, clean rows) -> expected new state
  value_shape: tuple
  other_shape: tuple = ()
  has_loss: bool = True
  kinds: tuple = KINDS


def _stats0():
  """Statistics after an earlier batch that saw classes 0 and 1."""
  rng = np.random.default_rng(0)
  return mr2_jax.update_class_stats(mr2_jax.init_class_stats(K), rng.normal(size=(6, DIM)),
                                    np.array([0, 0, 1, 1, 1, 0], np.int32))


def _stats_reference(batch, clean, p=2.0, decay=0.9):
  stats = _stats0()
  a, v, seen = ref_mr2.update_class_stats(stats.sq_mean_norm, stats.mean_sq_deviation, stats.seen,
                                          batch.values, batch.labels, decay, p, where=clean)
  return {"A": a, "V": v, "seen": seen}


def _stats_out(stats):
  return {"A": stats.sq_mean_norm, "V": stats.mean_sq_deviation, "seen": stats.seen}


def _update_class_stats(arrays, stats, axis_name):
  new = mr2_jax.update_class_stats(stats, arrays["values"], arrays["labels"], where=arrays["where"],
                                   axis_name=axis_name)
  return None, _stats_out(new), new.skipped_rows


def _mr2_loss(arrays, stats, axis_name):
  features = arrays["values"]
  logits = features @ jnp.ones((DIM, K)) + arrays["other"]
  loss, new, _ = mr2_jax.mr2_loss(logits, features, arrays["labels"], stats, lam=0.5,
                                  where=arrays["where"], axis_name=axis_name)
  return loss, _stats_out(new), new.skipped_rows


REWEIGHT_COUNTS = np.array([3, 0, 5, 1], np.float32)


def _reweight_state():
  return rw.ReweightState(jnp.asarray(REWEIGHT_COUNTS), jnp.ones(K, jnp.float32))


def _counts_reference(labels, clean):
  present = np.bincount(labels[clean], minlength=K) > 0
  return {"batch_counts": REWEIGHT_COUNTS + present,
          "beta": ref_reweight.macro_factor(REWEIGHT_COUNTS, 1.0)}


def _inverse(arrays, state, axis_name):
  loss, new, _ = rw.inverse_reweighted_loss(
      arrays["values"], arrays["labels"], state, alpha=0.1, prior=jnp.ones(K), gamma=1.0,
      where=arrays["where"], axis_name=axis_name)
  return loss, {"batch_counts": new.batch_counts, "beta": new.beta}, new.skipped_rows


def _mixed(arrays, state, axis_name):
  loss, new, _ = rw.mixed_inverse_reweighted_loss(
      arrays["values"], arrays["other"], arrays["labels"], arrays["labels_b"], 0.6,
      state, alpha=0.0, prior=jnp.ones(K), gamma=1.0, where=arrays["where"], axis_name=axis_name)
  return loss, {"batch_counts": new.batch_counts, "beta": new.beta}, new.skipped_rows


def _mixed_reference(batch, clean):
  out = ref_mixed.mixed_reweight_step(batch.values, batch.other, batch.labels, batch.labels_b, 0.6,
                                      REWEIGHT_COUNTS, np.ones(K), np.ones(K), where=clean)
  return {"batch_counts": out["batch_counts"], "beta": out["beta"]}


def _nc(arrays, accumulator, axis_name):
  new = accumulator.update(arrays["values"], arrays["labels"], per_example_loss=arrays["other"],
                           where=arrays["where"], axis_name=axis_name)
  return None, {"counts": new.counts, "class_means": new.class_means,
                "within_scatter": new.within_scatter, "loss_sums": new.loss_sums}, \
      new.skipped_rows


def _nc_reference(batch, clean):
  """Sums of the definition over the clean rows, in float64 (the accumulator starts empty)."""
  h, y, loss = batch.values.astype(np.float64), batch.labels, batch.other.astype(np.float64)
  counts = np.zeros(K)
  means = np.zeros((K, DIM))
  loss_sums = np.zeros(K)
  for c in range(K):
    rows = clean & (y == c)
    counts[c] = rows.sum()
    if counts[c]:
      means[c] = h[rows].mean(axis=0)
      loss_sums[c] = loss[rows].sum()
  centred = np.where(clean[:, None], h - means[np.where(clean, y, 0)], 0.0)
  return {"counts": counts, "class_means": means, "within_scatter": centred.T @ centred,
          "loss_sums": loss_sums}


Q0 = np.array([0.1, 0.2, 0.3, 0.4], np.float32)


def _group_dro(arrays, q, axis_name):
  loss, new_q, aux = rw.baselines.group_dro_loss(arrays["values"], arrays["labels"], q, eta=0.5,
                                       where=arrays["where"], axis_name=axis_name)
  return loss, {"q": new_q}, aux.skipped_rows


def _group_dro_reference(batch, clean):
  _, new_q, _ = ref_comparisons.group_dro_step(batch.values[clean], batch.labels[clean], Q0, 0.5)
  return {"q": new_q}


DATASET_LABELS = np.random.default_rng(1).integers(0, K, NUM_EXAMPLES).astype(np.int32)


def _lff(arrays, state, axis_name):
  logits_biased = arrays["values"]
  loss, new, _ = rw.baselines.lff_loss(logits_biased, arrays["other"], arrays["labels"], arrays["indices"],
                             state, DATASET_LABELS, where=arrays["where"], axis_name=axis_name)
  return loss, {"ema_biased": new.ema_biased, "ema_debiased": new.ema_debiased,
                "seen": new.seen}, new.skipped_rows


def _lff_reference(batch, clean):
  reference = ref_lff.LfFReference(DATASET_LABELS, K)
  if clean.any():  # the reference's step divides by the batch size
    reference.step(batch.values[clean], batch.other[clean], batch.labels[clean],
                   batch.indices[clean])
  return {"ema_biased": reference.ema_biased, "ema_debiased": reference.ema_debiased,
          "seen": reference.seen}


FUNCTIONS = {
    "update_class_stats": Stateful(_update_class_stats, _stats0, _stats_reference, (DIM,),
                                   has_loss=False),
    "mr2_loss": Stateful(_mr2_loss, _stats0, _stats_reference, (DIM,), (K,)),
    "inverse_reweighted_loss": Stateful(_inverse, _reweight_state,
                                        lambda b, c: _counts_reference(b.labels, c), ()),
    "mixed_inverse_reweighted_loss": Stateful(_mixed, _reweight_state, _mixed_reference, (), (),
                                              kinds=KINDS + OTHER_KINDS + LABEL_B_KINDS),
    "nc_accumulator": Stateful(_nc, lambda: rw.NCAccumulator.init(K, DIM), _nc_reference, (DIM,),
                               (), has_loss=False, kinds=KINDS + OTHER_KINDS),
    "group_dro_loss": Stateful(_group_dro, lambda: jnp.asarray(Q0), _group_dro_reference, ()),
    "lff_loss": Stateful(_lff, lambda: rw.baselines.init_lff_state(NUM_EXAMPLES), _lff_reference, (K,),
                         (K,), kinds=KINDS + OTHER_KINDS),
}


def _arrays(batch: Batch) -> dict:
  return {"values": batch.values, "other": batch.other, "labels": batch.labels,
          "labels_b": batch.labels_b, "indices": batch.indices, "where": batch.where}


def _mesh():
  return jax.make_mesh((DEVICES,), (AXIS,))


@functools.cache
def compiled(name: str, mode: str):
  """`(arrays, state) -> (loss, state, skipped)` of a function under one parallel mode."""
  fn = FUNCTIONS[name].fn
  if mode == "jit":
    return jax.jit(lambda arrays, state: fn(arrays, state, None))
  if mode == "pmap":
    pmapped = jax.pmap(lambda a, s: _pmean_loss(fn(a, s, AXIS)), axis_name=AXIS,
                       in_axes=(0, None))  # one function: traced and compiled once per case

    def run(arrays, state):
      local = {k: v.reshape(DEVICES, -1, *v.shape[1:]) for k, v in arrays.items()}
      return jax.tree.map(lambda x: x[0], pmapped(local, state))
    return run
  mesh = _mesh()
  if mode == "shard_map":
    step = jax.jit(jax.shard_map(lambda a, s: _pmean_loss(fn(a, s, AXIS)), mesh=mesh,
                                 in_specs=(P(AXIS), P()), out_specs=P()))
  else:
    step = jax.jit(lambda a, s: fn(a, s, None))

  def placed(arrays, state):  # rows over the Explicit mesh axis, state replicated
    arrays = jax.device_put(arrays, NamedSharding(mesh, P(AXIS)))
    state = jax.device_put(state, NamedSharding(mesh, P()))
    return step(arrays, state)
  return placed


def _pmean_loss(out):
  loss, new, skipped = out
  return (None if loss is None else jax.lax.pmean(loss, AXIS)), new, skipped


def _assert_state(actual, expected, what):
  for key, value in expected.items():
    value = np.asarray(value)
    got = np.asarray(actual[key])
    if value.dtype == bool:
      np.testing.assert_array_equal(got, value, err_msg=f"{what}: {key}")
    else:
      scale = max(np.max(np.abs(value), initial=0.0), 1.0)
      np.testing.assert_allclose(got, value, rtol=RTOL, atol=ATOL * scale, err_msg=f"{what}: {key}")


def check(name: str, batch: Batch, mode: str):
  spec = FUNCTIONS[name]
  loss, new, skipped = compiled(name, mode)(_arrays(batch), spec.state())
  clean = batch.where & ~batch.bad
  _assert_state(new, spec.reference(batch, clean), f"{name} [{mode}]")
  assert int(skipped) == int(batch.bad.sum()), (name, mode, int(skipped), batch.bad)
  if spec.has_loss:  # NaN with a bad real row; padding alone counts nowhere
    assert np.isnan(loss) == batch.bad.any(), (name, mode, loss)


def _strategy(name):
  spec = FUNCTIONS[name]
  return batches(spec.value_shape, spec.other_shape, spec.kinds)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
@given(data=st.data())
def test_bad_rows_leave_the_state_of_the_clean_rows(name, mode, data):
  check(name, data.draw(_strategy(name)), mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
@S.SLOW
@given(data=st.data())
def test_bad_rows_leave_the_state_of_the_clean_rows_slow(name, mode, data):
  check(name, data.draw(_strategy(name)), mode)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_eager_non_finite_rows_are_left_out_and_counted(name):
  """Eagerly (no `jit`): a non-finite value is a value, not an error, and is treated alike."""
  spec = FUNCTIONS[name]
  rows = [(1, "nan"), (6, "inf"), (9, "-inf")]
  if "other_nan" in spec.kinds:
    rows += [(4, "other_nan"), (14, "other_-inf")]
  # The padding row keeps its garbage labels: eagerly only real rows' labels are checked.
  batch = make_batch(3, rows, [12], spec.value_shape, spec.other_shape)
  loss, new, skipped = spec.fn({k: jnp.asarray(v) for k, v in _arrays(batch).items()},
                               spec.state(), None)
  _assert_state(new, spec.reference(batch, batch.where & ~batch.bad), f"{name} [eager]")
  assert int(skipped) == len(rows)
  if spec.has_loss:
    assert np.isnan(loss)


@pytest.mark.parametrize("name", [n for n, s in FUNCTIONS.items() if s.has_loss])
def test_loss_gradient_is_nan_so_apply_if_finite_skips_the_step(name):
  spec = FUNCTIONS[name]
  batch = make_batch(4, [(2, "nan")], [], spec.value_shape, spec.other_shape)
  arrays = {k: jnp.asarray(v) for k, v in _arrays(batch).items()}
  state = spec.state()

  def loss_fn(params):
    scaled = {**arrays, "values": arrays["values"] * params["scale"]}
    return spec.fn(scaled, state, None)[0]

  params = {"scale": jnp.float32(1.0)}
  grads = jax.grad(loss_fn)(params)
  assert np.isnan(grads["scale"])
  optimizer = optax.apply_if_finite(optax.sgd(0.1, momentum=0.9), max_consecutive_errors=5)
  opt_state = optimizer.init(params)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  chex.assert_trees_all_equal(optax.apply_updates(params, updates), params)
  assert int(opt_state.notfinite_count) == 1


def test_clean_batch_has_no_skipped_rows_and_a_finite_loss():
  for name, spec in FUNCTIONS.items():
    batch = make_batch(5, [], [3, 11], spec.value_shape, spec.other_shape)
    loss, new, skipped = compiled(name, "jit")(_arrays(batch), spec.state())
    _assert_state(new, spec.reference(batch, batch.where), name)
    assert int(skipped) == 0, name
    if spec.has_loss:
      assert np.isfinite(loss), name


def test_skipped_rows_accumulate_over_steps():
  stats = mr2_jax.init_class_stats(K)
  step = jax.jit(lambda s, f, y: mr2_jax.update_class_stats(s, f, y))
  for bad in (1, 2, 0):
    batch = make_batch(bad, [(r, "nan") for r in range(bad)], [], (DIM,), ())
    stats = step(stats, batch.values, batch.labels)
  assert int(stats.skipped_rows) == 3
  chex.assert_tree_all_finite((stats.sq_mean_norm, stats.mean_sq_deviation))


# Every function and every fault in the default run; the rest of the product in the slow run.
@pytest.mark.parametrize("name, kind", covering([
    (name, kind) for name, spec in FUNCTIONS.items()
    for kind in ("nan", "label_high", "other_nan", "label_b_high") if kind in spec.kinds]))
def test_checkify_flags_every_fault(name, kind):
  spec = FUNCTIONS[name]
  batch = make_batch(6, [(5, kind)], [], spec.value_shape, spec.other_shape)
  step = jax.jit(lambda arrays, state: spec.fn(arrays, state, None))
  with mr2_jax.traced_checks():
    err, _ = checkify.checkify(step, errors=checkify.user_checks)(_arrays(batch), spec.state())
  message = err.get()
  assert message is not None, (name, kind)
  expected = "non-finite" if kind.endswith("nan") else "must lie in"
  assert expected in message, message
  # Outside traced_checks() nothing is emitted (the fast path).
  err, _ = checkify.checkify(step, errors=checkify.user_checks)(_arrays(batch), spec.state())
  assert err.get() is None


def test_an_empty_batch_changes_no_state():
  """B = 0 (the last shard of an evaluation pass): every state is returned unchanged, nothing
  skipped, and the losses are 0 (`mr2_loss` included: its representation margin has no anchor
  and gives an empty [0] result)."""
  empty = {"values": np.zeros((0, DIM), np.float32), "other": np.zeros((0, K), np.float32),
           "labels": np.zeros((0,), np.int32), "labels_b": np.zeros((0,), np.int32),
           "indices": np.zeros((0,), np.int32), "where": np.zeros((0,), bool)}
  for name, spec in FUNCTIONS.items():
    arrays = {**empty, "values": np.zeros((0, *spec.value_shape), np.float32),
              "other": np.zeros((0, *spec.other_shape), np.float32)}
    loss, new, skipped = spec.fn(arrays, spec.state(), None)
    nothing = Batch(arrays["values"], arrays["other"], arrays["labels"], arrays["indices"],
                    arrays["where"], np.zeros((0,), bool), arrays["labels_b"])
    _assert_state(new, spec.reference(nothing, nothing.where), f"{name} [B = 0]")
    assert int(skipped) == 0, name
    if spec.has_loss:
      assert float(loss) == 0.0, (name, loss)


@pytest.mark.parametrize("mode", ["jit", "pmap"])
@pytest.mark.parametrize("variant", ["k>b", "per_device", "lam=0"])
def test_mr2_paths_beyond_the_default_leave_bad_rows_out(variant, mode):
  """The sorted path (K > B), `stats_reduction='per_device'` and λ = 0 (the statistics' own psum,
  no gathered rows): the state after a batch with bad rows equals the state of the clean rows (the
  same call with them outside `where`), and the count is the bad rows'."""
  many = 40
  rng = np.random.default_rng(11)
  features = rng.normal(size=(BATCH, DIM)).astype(np.float32)
  num_classes = many if variant == "k>b" else K
  labels = rng.integers(0, num_classes // 2, BATCH).astype(np.int32)
  bad = np.zeros(BATCH, bool)
  bad[[1, 6, 11]] = True
  features[1, 0], features[6, 2] = np.nan, np.inf
  labels[11] = num_classes + 5
  logits = rng.normal(size=(BATCH, num_classes)).astype(np.float32)
  kwargs = dict(lam=0.0 if variant == "lam=0" else 0.5,
                stats_reduction="per_device" if variant == "per_device" else "exact")

  def run(features, labels, where, axis_name):
    _, new, _ = mr2_jax.mr2_loss(logits_of(features), features, labels,
                                 mr2_jax.init_class_stats(num_classes), where=where,
                                 axis_name=axis_name, **kwargs)
    return new

  def logits_of(features):
    return features @ jnp.ones((DIM, num_classes)) * 0.1

  clean_labels = np.where(bad, 0, labels).astype(np.int32)
  clean_features = np.where(bad[:, None], 0.0, features).astype(np.float32)
  if mode == "jit":
    dirty = jax.jit(lambda f, y, w: run(f, y, w, None))(features, labels, np.ones(BATCH, bool))
    clean = jax.jit(lambda f, y, w: run(f, y, w, None))(clean_features, clean_labels, ~bad)
  else:
    step = jax.pmap(lambda f, y, w: run(f, y, w, AXIS), axis_name=AXIS)

    def split(x):
      return x.reshape(DEVICES, -1, *x.shape[1:])
    dirty = jax.tree.map(lambda x: x[0], step(split(features), split(labels),
                                              split(np.ones(BATCH, bool))))
    clean = jax.tree.map(lambda x: x[0], step(split(clean_features), split(clean_labels),
                                              split(~bad)))
  assert int(dirty.skipped_rows) == 3 and int(clean.skipped_rows) == 0
  chex.assert_trees_all_close(dirty._replace(skipped_rows=0), clean._replace(skipped_rows=0),
                              rtol=1e-6, atol=1e-7)


def test_overflowing_features_leave_their_class_out_of_the_statistics():
  """Finite features whose squared norm overflows float32 would make A_k, V_k inf for good: the
  class keeps its statistics for that batch and its rows are counted."""
  stats = _stats0()
  features = np.ones((4, DIM), np.float32)
  features[0] = 3e19
  new = mr2_jax.update_class_stats(stats, features, np.array([0, 0, 2, 2], np.int32))
  chex.assert_tree_all_finite((new.sq_mean_norm, new.mean_sq_deviation))
  np.testing.assert_array_equal(new.sq_mean_norm[0], stats.sq_mean_norm[0])
  assert int(new.skipped_rows) == 2 and bool(new.seen[2])


def test_checkify_flags_non_finite_logits_of_mr2_loss():
  batch = make_batch(7, [], [], (DIM,), (K,))
  logits = batch.other.copy()
  logits[3, 1] = np.nan
  step = jax.jit(lambda z, f, y: mr2_jax.mr2_loss(z, f, y, _stats0())[0])
  with mr2_jax.traced_checks():
    err, loss = checkify.checkify(step, errors=checkify.user_checks)(logits, batch.values,
                                                                     batch.labels)
  assert np.isnan(loss) and err.get() is not None and err.get().startswith("logits: 1 real rows")
