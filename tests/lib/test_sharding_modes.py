"""Every function that reduces over the batch, under today's sharding APIs, equals one device.

On the 8 fake CPU devices of tests/conftest.py, each case (a loss or a per-class statistic of
`mr2_jax` / `reweight_jax`, with a small linear model in front so that gradients reach replicated
parameters and batch-sharded inputs) is run

* on one device, `jax.jit` of the global batch (the reference);
* `jit_explicit`: `jax.jit` over arrays laid out with `NamedSharding` on `jax.make_mesh((8,),
  ('batch',))` with its default (Explicit) axis type, batch rows `P('batch')`, parameters and state
  `P()`, no `axis_name`: the library sees the global batch and XLA partitions it;
* `jit_explicit_set_mesh`: the same inside `jax.set_mesh(mesh)` (the context JAX recommends);
* `shard_map_vma`: `jax.shard_map` over that Explicit mesh with its default `check_vma=True` and the
  library's `axis_name='batch'`; the loss is differentiated as `lax.pmean(share)` (the recipe of the
  docstrings), per-class state and aux are returned with `out_specs=P()` (statically replicated).

Loss, gradients (parameters and inputs), new state and aux equal the one-device values at float32
tolerances, and every per-class result of `jit_explicit` is replicated. Under `check_vma=True` the
gradient of the share itself is N_devices times the global gradient (the docstrings' warning). Bad
labels give the same errors (eagerly), NaN and state (under `jit` and `shard_map`) and `checkify`
messages (inside `traced_checks()`) over an Explicit mesh as on one device.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import mr2_jax
import reweight_jax as rw

AXIS = "batch"
DEVICES = 8
BATCH = 32  # global rows: 4 per device
NUM_CLASSES = 6  # K ≤ B: slot k is class k
MANY_CLASSES = 40  # K > B: compacted slots (jnp.unique), the class-sorted paths on one device
IN_DIM, DIM = 5, 4
RTOL, ATOL = 2e-5, 1e-6


def _mesh():
  mesh = jax.make_mesh((DEVICES,), (AXIS,))
  assert mesh.axis_types == (jax.sharding.AxisType.Explicit,)  # today's default
  return mesh


class Case(NamedTuple):
  """`fn(params, batch, state, axis_name) -> (shares, replicated, per_example)`.

  shares: a tuple of scalars, each this device's share under `axis_name` (the global value
  without); the first is differentiated. replicated: per-class state and aux, global values.
  per_example: arrays with the batch's rows. `batch['x']` [B, IN_DIM] is the model's input.
  """
  fn: Callable[..., Any]
  params: dict
  batch: dict
  state: Any
  differentiable: bool = True


def _ce(logits, labels):
  return rw.cross_entropy_loss(logits, labels)


def _labels(rng, batch, num_classes, used=None):
  return rng.integers(0, used or num_classes, batch).astype(np.int32)


def _inputs(rng, num_classes=NUM_CLASSES, padding=True, used=None):
  where = np.ones(BATCH, bool)
  if padding:
    where[[3, 17, 18]] = False  # padding rows on two devices
  batch = {"x": rng.normal(size=(BATCH, IN_DIM)).astype(np.float32),
           "labels": _labels(rng, BATCH, num_classes, used), "where": where}
  params = {"w": (0.7 * rng.normal(size=(IN_DIM, num_classes))).astype(np.float32),
            "v": rng.normal(size=(IN_DIM, DIM)).astype(np.float32)}
  return params, batch


def _mr2_stats(rng, num_classes):
  """Statistics after one earlier batch that saw some of the classes."""
  labels = rng.integers(0, num_classes // 2 + 1, 12).astype(np.int32)
  features = rng.normal(size=(12, DIM)).astype(np.float32)
  return mr2_jax.update_class_stats(mr2_jax.init_class_stats(num_classes), features, labels)


def _mr2_case(rng, form, num_classes=NUM_CLASSES, used=None):
  params, batch = _inputs(rng, num_classes, used=used)
  stats = _mr2_stats(rng, num_classes)

  def fn(params, batch, stats, axis_name):
    x = batch["x"]
    loss, new_stats, aux = mr2_jax.mr2_loss(
        x @ params["w"], x @ params["v"], batch["labels"], stats, lam=0.5, form=form,
        where=batch["where"], axis_name=axis_name)
    return (loss,), (new_stats, aux), ()
  return Case(fn, params, batch, stats)


def _update_class_stats_case(rng, num_classes=NUM_CLASSES, p=2.0):
  params, batch = _inputs(rng, num_classes)
  stats = _mr2_stats(rng, num_classes)

  def fn(params, batch, stats, axis_name):
    new_stats = mr2_jax.update_class_stats(stats, batch["x"] @ params["v"], batch["labels"], p=p,
                                           where=batch["where"], axis_name=axis_name)
    return (), new_stats, ()
  return Case(fn, params, batch, stats, differentiable=False)


def _representation_margin_case(rng):
  params, batch = _inputs(rng, used=3)  # classes of ~10 rows: positives across devices

  def fn(params, batch, state, axis_name):
    del state
    per_anchor = mr2_jax.representation_margin_loss(
        batch["x"] @ params["v"], batch["labels"], 0.4, where=batch["where"],
        axis_name=axis_name, num_classes=NUM_CLASSES)
    # Equal local batches: the mean of the local rows is this device's share of the global mean.
    return (jnp.mean(per_anchor ** 2),), (), (per_anchor,)
  return Case(fn, params, batch, ())


def _reweight_state(rng, num_classes):
  return rw.ReweightState(jnp.asarray(rng.integers(0, 5, num_classes), jnp.float32),
                          jnp.asarray(rng.uniform(0.5, 2, num_classes), jnp.float32))


def _inverse_case(rng, stop_gradient, num_classes=NUM_CLASSES, used=None):
  params, batch = _inputs(rng, num_classes, used=used)
  state = _reweight_state(rng, num_classes)
  prior = rw.class_prior(rng.integers(1, 100, num_classes), "inv_freq")

  def fn(params, batch, state, axis_name):
    loss, new_state, aux = rw.inverse_reweighted_loss(
        _ce(batch["x"] @ params["w"], batch["labels"]), batch["labels"], state, alpha=0.3,
        prior=prior, gamma=1.0, max_weight=3.0, stop_gradient=stop_gradient,
        where=batch["where"], axis_name=axis_name)
    return (loss,), (new_state, aux._replace(example_weights=())), (aux.example_weights,)
  return Case(fn, params, batch, state)


def _mixed_inverse_case(rng, num_classes=NUM_CLASSES):
  params, batch = _inputs(rng, num_classes)
  batch["labels_b"] = batch["labels"][rng.permutation(BATCH)]
  state = _reweight_state(rng, num_classes)
  prior = rw.class_prior(rng.integers(1, 100, num_classes), "inv_sqrt_freq")

  def fn(params, batch, state, axis_name):
    logits = batch["x"] @ params["w"]
    loss, new_state, aux = rw.mixed_inverse_reweighted_loss(
        _ce(logits, batch["labels"]), _ce(logits, batch["labels_b"]), batch["labels"],
        batch["labels_b"], 0.7, state, alpha=0.0, prior=prior, gamma=1.0, max_weight=10.0,
        where=batch["where"], axis_name=axis_name)
    per_example = (aux.example_weights_a, aux.example_weights_b)
    return (loss,), (new_state, aux._replace(example_weights_a=(), example_weights_b=())), \
        per_example
  return Case(fn, params, batch, state)


def _nc_case(rng):
  params, batch = _inputs(rng)
  accumulator = rw.NCAccumulator.init(NUM_CLASSES, DIM).update(
      rng.normal(size=(10, DIM)).astype(np.float32), rng.integers(0, 3, 10).astype(np.int32),
      per_example_loss=rng.uniform(0, 2, 10).astype(np.float32))

  def fn(params, batch, accumulator, axis_name):
    features = batch["x"] @ params["v"]
    accumulator = accumulator.update(
        features, batch["labels"], per_example_loss=_ce(batch["x"] @ params["w"], batch["labels"]),
        where=batch["where"], axis_name=axis_name)
    accumulator = accumulator.update_ncc(features, params["w"][:DIM].T, where=batch["where"],
                                         axis_name=axis_name)
    return (), (accumulator, accumulator.finalize(params["w"][:DIM].T)), ()
  return Case(fn, params, batch, accumulator, differentiable=False)


def _per_class_correct_case(rng):
  params, batch = _inputs(rng)

  def fn(params, batch, state, axis_name):
    del state
    predictions = jnp.argmax(batch["x"] @ params["w"], axis=-1)
    return (), mr2_jax.per_class_correct(predictions, batch["labels"], NUM_CLASSES,
                                         where=batch["where"], axis_name=axis_name), ()
  return Case(fn, params, batch, (), differentiable=False)


def _per_class_loss_sums_case(rng):
  params, batch = _inputs(rng)

  def fn(params, batch, state, axis_name):
    del state
    losses = _ce(batch["x"] @ params["w"], batch["labels"])
    return (), rw.per_class_loss_sums(losses, batch["labels"], NUM_CLASSES, where=batch["where"],
                                      axis_name=axis_name), ()
  return Case(fn, params, batch, (), differentiable=False)


def _group_dro_case(rng):
  params, batch = _inputs(rng, used=NUM_CLASSES - 1)  # the last class absent
  q = jnp.asarray(rng.dirichlet(np.ones(NUM_CLASSES)), jnp.float32)

  def fn(params, batch, q, axis_name):
    loss, new_q, aux = rw.baselines.group_dro_loss(
        _ce(batch["x"] @ params["w"], batch["labels"]), batch["labels"], q, eta=0.9,
        adjustment=rw.baselines.group_dro_adjustment(jnp.arange(NUM_CLASSES) + 1.0, 0.5),
        where=batch["where"], axis_name=axis_name)
    return (loss,), (new_q, aux), ()
  return Case(fn, params, batch, q)


def _fairdro_case(rng):
  params, batch = _inputs(rng)
  q = rw.baselines.fairdro_best_response(jnp.asarray(rng.uniform(0, 2, NUM_CLASSES), jnp.float32), 0.5)

  def fn(params, batch, q, axis_name):
    loss, aux = rw.baselines.fairdro_loss(_ce(batch["x"] @ params["w"], batch["labels"]), batch["labels"],
                                q, where=batch["where"], axis_name=axis_name)
    return (loss,), aux, ()
  return Case(fn, params, batch, q)


def _eql_case(rng):
  params, batch = _inputs(rng)
  rare = rw.baselines.eql_rare_classes(np.array([900, 300, 120, 40, 12, 5], np.float32), 0.05)
  # β per global row (`eql_dropped_at`), the same whichever device holds the row.
  batch["dropped"] = np.asarray(rw.baselines.eql_dropped_at(jax.random.key(3), np.arange(BATCH),
                                                  NUM_CLASSES))

  def fn(params, batch, state, axis_name):
    del state
    per_example = rw.baselines.eql_loss(batch["x"] @ params["w"], batch["labels"], rare, batch["dropped"],
                              where=batch["where"])
    count = jnp.sum(batch["where"].astype(jnp.float32))
    devices = 1
    if axis_name is not None:
      count, devices = jax.lax.psum(count, axis_name), jax.lax.axis_size(axis_name)
    return (devices * jnp.sum(per_example) / count,), (), (per_example,)
  return Case(fn, params, batch, ())


def _lff_case(rng):
  num_examples = 48
  params, batch = _inputs(rng)
  params["w_debiased"] = (0.5 * rng.normal(size=(IN_DIM, NUM_CLASSES))).astype(np.float32)
  dataset_labels = rng.integers(0, NUM_CLASSES, num_examples).astype(np.int32)
  batch["indices"] = rng.permutation(num_examples)[:BATCH].astype(np.int32)
  batch["labels"] = dataset_labels[batch["indices"]]
  seen = rng.random(num_examples) < 0.5
  state = rw.baselines.LfFState(jnp.asarray(np.where(seen, rng.uniform(0, 2, num_examples), 0), jnp.float32),
                      jnp.asarray(np.where(seen, rng.uniform(0, 2, num_examples), 0), jnp.float32),
                      jnp.asarray(seen))

  def fn(params, batch, state, axis_name):
    x = batch["x"]
    loss, new_state, aux = rw.baselines.lff_loss(
        x @ params["w"], x @ params["w_debiased"], batch["labels"], batch["indices"], state,
        dataset_labels, where=batch["where"], axis_name=axis_name)
    return (loss,), new_state, tuple(aux)
  return Case(fn, params, batch, state)


def _supcon_case(rng):
  params, batch = _inputs(rng, used=4)

  def fn(params, batch, state, axis_name):
    del state
    loss, aux = rw.baselines.supcon_loss(
        mr2_jax.l2_normalize(batch["x"] @ params["v"]), batch["labels"], where=batch["where"],
        axis_name=axis_name, num_classes=NUM_CLASSES)
    return (loss,), aux.num_anchors, (aux.per_anchor, aux.num_positives)
  return Case(fn, params, batch, ())


def _supcon_views_case(rng):
  # `stack_views` under each layout: the view-major batch moves rows between devices under jit.
  params, batch = _inputs(rng, used=4)

  def fn(params, batch, state, axis_name):
    del state
    z = batch["x"] @ params["v"]
    views = mr2_jax.l2_normalize(jnp.stack([z, jnp.tanh(z)], axis=1))
    projections, labels, where = rw.baselines.stack_views(views, batch["labels"], where=batch["where"])
    loss, aux = rw.baselines.supcon_loss(projections, labels, where=where, axis_name=axis_name,
                                    num_classes=NUM_CLASSES)
    return (loss,), aux.num_anchors, ()
  return Case(fn, params, batch, ())


def _etf_dr_case(rng):
  params, batch = _inputs(rng)
  classifier = rw.baselines.etf_classifier(NUM_CLASSES, 8, seed=1)
  params["v"] = rng.normal(size=(IN_DIM, 8)).astype(np.float32)

  def fn(params, batch, state, axis_name):
    del state
    scale = rw.baselines.given_ew(batch["labels"], NUM_CLASSES, where=batch["where"], axis_name=axis_name)
    loss, per_example = rw.baselines.dot_regression_loss(
        rw.baselines.etf_normalize(batch["x"] @ params["v"]), batch["labels"], classifier,
        class_scale=scale, where=batch["where"], axis_name=axis_name)
    return (loss,), scale, (per_example,)
  return Case(fn, params, batch, ())


def _glmc_case(rng):
  params, batch = _inputs(rng)
  batch["labels_b"] = _labels(rng, BATCH, NUM_CLASSES)
  for name in ("w_l", "w_cb", "w_cb_l"):
    params[name] = (0.5 * rng.normal(size=(IN_DIM, NUM_CLASSES))).astype(np.float32)
  params["v_l"] = rng.normal(size=(IN_DIM, DIM)).astype(np.float32)
  weights = rw.baselines.glmc_class_weights(np.array([900, 300, 120, 40, 12, 5], np.float32), 1.2)

  def fn(params, batch, state, axis_name):
    del state
    x = batch["x"]
    z_g, z_l = x @ params["v"], x @ params["v_l"]
    loss, aux = rw.baselines.glmc_loss(
        x @ params["w"], x @ params["w_l"], x @ params["w_cb"], x @ params["w_cb_l"],
        jnp.tanh(z_g), z_g, jnp.tanh(z_l), z_l, batch["labels"], batch["labels_b"], lam=0.42,
        class_weights=weights, alpha=0.6, w_con=4.0, where=batch["where"], axis_name=axis_name)
    return (loss, *aux), (), ()
  return Case(fn, params, batch, ())


CASES = {
    "mr2_loss[released]": lambda rng: _mr2_case(rng, "released"),
    "mr2_loss[paper, k>b]": lambda rng: _mr2_case(rng, "paper", MANY_CLASSES, used=20),
    "update_class_stats": _update_class_stats_case,
    "update_class_stats[p=5, k>b]": lambda rng: _update_class_stats_case(rng, MANY_CLASSES, 5.0),
    "representation_margin_loss": _representation_margin_case,
    "inverse_reweighted_loss[gradient_flow]": lambda rng: _inverse_case(rng, False),
    "inverse_reweighted_loss[stop_gradient]": lambda rng: _inverse_case(rng, True),
    "inverse_reweighted_loss[k>b]": lambda rng: _inverse_case(rng, False, MANY_CLASSES, 20),
    "mixed_inverse_reweighted_loss": _mixed_inverse_case,
    "nc_accumulator": _nc_case,
    "per_class_correct": _per_class_correct_case,
    "per_class_loss_sums": _per_class_loss_sums_case,
    "group_dro_loss": _group_dro_case,
    "fairdro_loss": _fairdro_case,
    "eql_loss": _eql_case,
    "lff_loss": _lff_case,
    "supcon_loss": _supcon_case,
    "supcon_loss[stack_views]": _supcon_views_case,
    "dot_regression_loss": _etf_dr_case,
    "glmc_loss": _glmc_case,
}


def _global_step(case: Case):
  """(shares, replicated, per_example, gradients of shares[0] wrt (params, x)) on the global batch,
  without `axis_name` (one device, or `jit` over NamedSharding arrays)."""
  def step(params, batch, state):
    def objective(params, x):
      shares, replicated, per_example = case.fn(params, {**batch, "x": x}, state, None)
      return shares[0], (shares, replicated, per_example)
    if not case.differentiable:
      return case.fn(params, batch, state, None) + ((),)
    (_, outputs), grads = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(
        params, batch["x"])
    return outputs + (grads,)
  return step


def _shard_map_step(case: Case, mesh):
  """The same under `jax.shard_map` (default check_vma=True) with `axis_name`: the shares are
  pmean-ed, and `jax.grad` of the pmean is the global gradient (JAX sums a replicated parameter's
  cotangent over the devices itself)."""
  def local(params, batch, state):
    def objective(params, x):
      shares, replicated, per_example = case.fn(params, {**batch, "x": x}, state, AXIS)
      shares = jax.lax.pmean(shares, AXIS)
      return shares[0], (shares, replicated, per_example)
    if not case.differentiable:
      shares, replicated, per_example = case.fn(params, batch, state, AXIS)
      return jax.lax.pmean(shares, AXIS), replicated, per_example, ()
    (_, outputs), grads = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(
        params, batch["x"])
    return outputs + (grads,)
  gradient_specs = (P(), P(AXIS)) if case.differentiable else ()
  return jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P()),
                       out_specs=(P(), P(), P(AXIS), gradient_specs))


def _place(case: Case, mesh):
  rows, replicated = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
  return (jax.device_put(case.params, replicated), jax.device_put(case.batch, rows),
          jax.device_put(case.state, replicated))


def _assert_close(actual, expected):
  # Sums over 8 devices add in another order: float32 rounding of the largest entry, no more.
  def close(a, e):
    a, e = np.asarray(a), np.asarray(e)
    scale = np.max(np.abs(e[np.isfinite(e)]), initial=0.0) if e.dtype.kind == "f" else 0.0
    np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL * max(scale, 1.0))
  chex.assert_trees_all_equal_structs(actual, expected)
  jax.tree.map(close, actual, expected)


_REFERENCE = {}


def _reference(name):
  """The one-device result of a case (computed once per case and process)."""
  if name not in _REFERENCE:
    case = CASES[name](np.random.default_rng(sum(map(ord, name))))
    _REFERENCE[name] = case, jax.jit(_global_step(case))(case.params, case.batch, case.state)
  return _REFERENCE[name]


@pytest.mark.parametrize("name", list(CASES))
def test_jit_over_explicit_named_sharding_equals_one_device(name):
  case, expected = _reference(name)
  mesh = _mesh()
  actual = jax.jit(_global_step(case))(*_place(case, mesh))
  _assert_close(actual, expected)
  shares, replicated, per_example, grads = actual
  # Per-class results are replicated (each device holds the global value); rows stay sharded.
  for leaf in jax.tree.leaves((shares, replicated, grads[:1] if grads else ())):
    assert leaf.sharding.is_fully_replicated, (name, leaf.sharding)
  for leaf in jax.tree.leaves((per_example, grads[1:])):
    assert leaf.sharding.spec[0] == AXIS, (name, leaf.sharding)


@pytest.mark.parametrize("name", ["mr2_loss[released]", "inverse_reweighted_loss[k>b]", "lff_loss"])
def test_jit_inside_set_mesh_equals_one_device(name):
  # The context JAX recommends: arrays created inside the function (zeros of per-class sums) are
  # then typed on the mesh too.
  case, expected = _reference(name)
  mesh = _mesh()
  with jax.set_mesh(mesh):
    actual = jax.jit(_global_step(case))(*_place(case, mesh))
  _assert_close(actual, expected)


@pytest.mark.parametrize("name", list(CASES))
def test_shard_map_with_check_vma_equals_one_device(name):
  case, expected = _reference(name)
  mesh = _mesh()
  actual = jax.jit(_shard_map_step(case, mesh))(*_place(case, mesh))
  _assert_close(actual, expected)


@pytest.mark.parametrize("name", ["mr2_loss[released]", "inverse_reweighted_loss[gradient_flow]"])
def test_shard_map_gradient_of_the_share_is_devices_times_the_global_gradient(name):
  # Under check_vma=True the returned loss is still this device's share: the gradient of the share
  # itself (not of its pmean) wrt a replicated parameter arrives summed over the devices by JAX,
  # N_devices × the global gradient; wrt a row it is the sum of every device's share's, likewise.
  case, expected = _reference(name)
  mesh = _mesh()

  def local(params, batch, state):
    def share(params, x):
      return case.fn(params, {**batch, "x": x}, state, AXIS)[0][0]
    value, grads = jax.value_and_grad(share, argnums=(0, 1))(params, batch["x"])
    return jax.lax.psum(value, AXIS), grads

  total, grads = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P()),
                                       out_specs=(P(), (P(), P(AXIS)))))(*_place(case, mesh))
  _assert_close(total / DEVICES, expected[0][0])
  _assert_close(jax.tree.map(lambda g: g / DEVICES, grads), expected[3])


# ------------------------------------------------------------------------------------------------
# Bad labels under an Explicit mesh: the same errors and NaN as on one device
# ------------------------------------------------------------------------------------------------

def _bad_label_calls():
  stats = mr2_jax.init_class_stats(NUM_CLASSES)
  state = rw.init_reweight_state(NUM_CLASSES)
  prior = jnp.ones(NUM_CLASSES)

  def mr2(logits, features, labels, axis_name=None):
    loss, new_stats, _ = mr2_jax.mr2_loss(logits, features, labels, stats, form="released",
                                          axis_name=axis_name)
    return loss, new_stats

  def inverse(logits, features, labels, axis_name=None):
    del features
    loss, new_state, _ = rw.inverse_reweighted_loss(_ce(logits, jnp.clip(labels, 0, 5)), labels,
                                                    state, alpha=0.0, prior=prior, gamma=1.0,
                                                    axis_name=axis_name)
    return loss, new_state
  return {"mr2_loss": mr2, "inverse_reweighted_loss": inverse}


@pytest.mark.parametrize("name", ["mr2_loss", "inverse_reweighted_loss"])
def test_bad_labels_under_explicit_named_sharding(name):
  fn = _bad_label_calls()[name]
  rng = np.random.default_rng(11)
  logits = rng.normal(size=(BATCH, NUM_CLASSES)).astype(np.float32)
  features = rng.normal(size=(BATCH, DIM)).astype(np.float32)
  labels = rng.integers(0, NUM_CLASSES, BATCH).astype(np.int32)
  labels[[5, 30]] = [NUM_CLASSES, -1]  # on two devices
  mesh = _mesh()
  rows = NamedSharding(mesh, P(AXIS))
  sharded = [jax.device_put(x, rows) for x in (logits, features, labels)]
  # Eagerly: the same ValueError naming the argument.
  with pytest.raises(ValueError, match=r"labels: class labels must lie in \[0, 6\)"):
    fn(*sharded)
  # Under jit: a NaN loss, and the bad rows count in no class statistic (as on one device).
  loss, state = jax.jit(fn)(*sharded)
  loss1, state1 = jax.jit(fn)(logits, features, labels)
  assert np.isnan(loss) and np.isnan(loss1)
  _assert_close(state, state1)
  # Under shard_map (check_vma=True, axis_name): the same NaN share and state.
  def local(*arrays):
    loss, state = fn(*arrays, axis_name=AXIS)
    return jax.lax.pmean(loss, AXIS), state
  loss, state = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P(AXIS), out_specs=P()))(
      *sharded)
  assert np.isnan(loss)
  _assert_close(state, state1)
  good = labels.copy()
  good[[5, 30]] = labels[0]
  # Inside traced_checks(), checkify reports the range (from either device's rows).
  with mr2_jax.traced_checks():
    checked = checkify.checkify(jax.jit(fn), errors=checkify.user_checks)
    err, _ = checked(*sharded)
    ok, _ = checked(*sharded[:2], jax.device_put(good, rows))
  assert "labels: class labels must lie in [0, 6); got values from -1 to 6" in str(err.get())
  assert ok.get() is None
  # A shape error names the argument whatever the layout.
  with pytest.raises(ValueError, match="labels"):
    jax.jit(fn)(*sharded[:2], jax.device_put(labels.reshape(8, 4), NamedSharding(mesh, P(AXIS))))


# ------------------------------------------------------------------------------------------------
# checkify's own limit under shard_map (JAX's), as docs/guides/failure_modes.md states it
# ------------------------------------------------------------------------------------------------

FAILURE_MODES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "failure_modes.md"


def test_checkify_under_shard_map_names_the_argument_on_auto_axes_only_as_documented():
  """On Auto mesh axes `checkify` of a `shard_map` step names the bad argument; on Explicit axes
  (`jax.make_mesh`'s default) `checkify` itself raises `ShardingTypeError`, for a bare
  `checkify.check` too, while `jit` over the same Explicit sharding names it. The Failure-modes
  page says so; when a JAX release lifts the limit, this test fails and the page should change."""
  labels = np.arange(BATCH, dtype=np.int32) % NUM_CLASSES
  labels[5] = NUM_CLASSES
  logits = np.zeros((BATCH, NUM_CLASSES), np.float32)

  def checked_shard_map(mesh, fn):
    rows = NamedSharding(mesh, P(AXIS))
    step = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))
    with mr2_jax.traced_checks():
      err, _ = checkify.checkify(step, errors=checkify.user_checks)(
          jax.device_put(logits, rows), jax.device_put(labels, rows))
    return err.get()

  def bare(logits, labels):
    checkify.check(jnp.all(labels < NUM_CLASSES), "labels: out of range", debug=True)
    return _ce(logits, labels)

  auto = jax.make_mesh((DEVICES,), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,))
  assert "labels: class labels must lie in [0, 6)" in checked_shard_map(auto, _ce)
  explicit = _mesh()
  for fn in (_ce, bare):
    with pytest.raises(Exception) as raised:  # JAX exports no name for the type
      checked_shard_map(explicit, fn)
    assert type(raised.value).__name__ == "ShardingTypeError", raised.value
  rows = NamedSharding(explicit, P(AXIS))
  with mr2_jax.traced_checks():
    err, _ = checkify.checkify(jax.jit(_ce), errors=checkify.user_checks)(
        jax.device_put(logits, rows), jax.device_put(labels, rows))
  assert "labels: class labels must lie in [0, 6)" in err.get()
  if FAILURE_MODES.exists():
    page = " ".join(FAILURE_MODES.read_text().split())
    assert "under `jax.shard_map` over Explicit mesh axes, the default of `jax.make_mesh`" in page
    assert "`ShardingTypeError`" in page and "`shard_map` over Auto axes" in page
