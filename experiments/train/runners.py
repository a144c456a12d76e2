"""The steps of `experiments.train.steps` compiled for a way of running, with the matching data placement.

`config.parallel`: 'none' (jit on one device), 'jit' (`jax.jit` over a batch sharded on a mesh of
every device of every process, Auto axis: the steps see the global batch and XLA partitions them,
the pod mode of MaxText and big_vision), 'pmap' (`jax.pmap` over this process's devices) or
'shard_map' (`jax.jit` of `jax.shard_map` with its default `check_vma=True`, over a
`jax.make_mesh` mesh with its default axis types: the steps see their device's rows and reduce on
axis 'batch').
The step bodies are the same; under 'pmap' and 'shard_map' collectives run on axis 'batch'.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.configs import schema
from experiments.train import steps

AXIS = "batch"


@dataclasses.dataclass(frozen=True)
class Runner:
  """The compiled steps and the layouts they take.

  Attributes:
    step: (state, batch) → (state, metrics), the state donated.
    eval_step: (state, sums, batch) → (sums, features) (`steps.eval_step`).
    ncc_step: (sums, features, mask, classifier, bias) → sums (`steps.ncc_step`).
    num_devices: devices the global batch is split over (all processes together).
    place_state: host (unreplicated) pytree → the layout the steps take for state / sums.
    place_batch: this process's batch [B/P, ...] → the layout the steps take.
    to_host: a state, sums or metrics in the steps' layout → one host (NumPy) copy.
    batch_to_host: per-example outputs (features) → this process's rows as NumPy [B/P, ...].
  """
  step: Any
  eval_step: Any
  ncc_step: Any
  num_devices: int
  place_state: Any
  place_batch: Any
  to_host: Any
  batch_to_host: Any


def _steps(loss_fn, task, learning_rate_fn, axis_name):
  return (functools.partial(steps.train_step, loss_fn=loss_fn, task=task,
                            learning_rate_fn=learning_rate_fn, axis_name=axis_name),
          functools.partial(steps.eval_step, axis_name=axis_name),
          functools.partial(steps.ncc_step, axis_name=axis_name))


PARALLEL = schema.PARALLEL


def axis_name(parallel: str) -> str | None:
  """The collective axis the model and the loss reduce over under `parallel`: None where the steps
  see the global batch ('none', 'jit'), 'batch' where they see a device's rows."""
  return None if parallel in ("none", "jit") else AXIS


def make_runner(parallel: str, loss_fn, task: steps.Task, learning_rate_fn,
                devices=None) -> Runner:
  """The three steps for `parallel` (one of `PARALLEL`); `devices` restricts jit / pmap /
  shard_map to a subset (tests run 1, 2, 4 and 8 devices)."""
  if parallel not in PARALLEL:
    raise ValueError(f"parallel: {parallel!r} is not one of {PARALLEL}")
  if parallel == "none":
    train, evaluate, ncc = _steps(loss_fn, task, learning_rate_fn, None)
    return Runner(jax.jit(train, donate_argnums=(0,)), jax.jit(evaluate), jax.jit(ncc), 1,
                  lambda s: s, lambda b: b, jax.device_get, np.asarray)
  if parallel == "jit":
    return _jit_runner(loss_fn, task, learning_rate_fn, devices)
  train, evaluate, ncc = _steps(loss_fn, task, learning_rate_fn, AXIS)
  if parallel == "pmap":
    devices = jax.local_devices() if devices is None else list(devices)
    n = len(devices)
    return Runner(
        jax.pmap(train, axis_name=AXIS, donate_argnums=(0,), devices=devices),
        jax.pmap(evaluate, axis_name=AXIS, devices=devices),
        jax.pmap(ncc, axis_name=AXIS, in_axes=(0, 0, 0, None, None), devices=devices), n,
        lambda s: replicate(s, n), lambda b: shard(b, n),
        lambda t: jax.device_get(unreplicate(t)),
        lambda x: np.asarray(x).reshape(-1, *x.shape[2:]))
  layout = _MeshLayout(devices)
  mesh, P = layout.mesh, jax.sharding.PartitionSpec

  def sharded(fn, in_specs, out_specs):
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)

  return Runner(
      jax.jit(sharded(train, (P(), P(AXIS)), P()), donate_argnums=(0,)),
      jax.jit(sharded(evaluate, (P(), P(), P(AXIS)), (P(), P(AXIS)))),
      jax.jit(sharded(ncc, (P(), P(AXIS), P(AXIS), P(), P()), P())),
      layout.num_devices, layout.place_state, layout.place_batch, layout.to_host,
      layout.batch_to_host)


class _MeshLayout:
  """A 1-D mesh of `devices` (all devices of all processes by default) on axis 'batch', with
  `jax.make_mesh`'s default axis types unless `axis_types` is given, and the placements of the
  'jit' and 'shard_map' runners: state replicated, batch split along its first axis (each process
  gives its own rows)."""

  def __init__(self, devices=None, axis_types=None):
    devices = jax.devices() if devices is None else list(devices)
    self.num_devices = len(devices)
    self.mesh = jax.make_mesh((len(devices),), (AXIS,), axis_types, devices=devices)
    P = jax.sharding.PartitionSpec
    self.replicated = jax.sharding.NamedSharding(self.mesh, P())
    self.batch_sharded = jax.sharding.NamedSharding(self.mesh, P(AXIS))

  def place_batch(self, batch):
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(self.batch_sharded, x), batch)

  @staticmethod
  def to_host(tree):
    return jax.tree.map(lambda x: jax.device_get(x.addressable_data(0)), tree)

  @staticmethod
  def batch_to_host(x):
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])

  def place_state(self, state):
    # From host values: a global array spanning other processes' devices cannot be made from a
    # local device buffer. Typed PRNG keys travel as their raw key data.
    def place(leaf):
      leaf = jnp.asarray(leaf)
      if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(place(jax.random.key_data(leaf)),
                                        impl=jax.random.key_impl(leaf))
      return jax.device_put(np.asarray(leaf), self.replicated)
    return jax.tree.map(place, state)


def _jit_runner(loss_fn, task, learning_rate_fn, devices) -> Runner:
  """'jit': the one-device steps (no axis name) under `jax.jit`, on a batch sharded over the mesh
  and a replicated state; XLA partitions the per-class sums and the gradient reduction (automatic
  partitioning: the mesh axis is Auto-typed, as in MaxText's and big_vision's trainers, so that
  the harness's own reshapes and permutations of the batch, e.g. the view-major flatten of two
  views, are partitioned by XLA instead of being sharding-type errors; the libraries' functions
  also run on Explicit axes, tests/lib/test_sharding_modes.py)."""
  layout = _MeshLayout(devices, axis_types=(jax.sharding.AxisType.Auto,))
  train, evaluate, ncc = _steps(loss_fn, task, learning_rate_fn, None)
  return Runner(jax.jit(train, donate_argnums=(0,)), jax.jit(evaluate), jax.jit(ncc),
                layout.num_devices, layout.place_state, layout.place_batch, layout.to_host,
                layout.batch_to_host)


def shard(batch, num_devices):
  """[B, ...] → [num_devices, B / num_devices, ...] for pmap."""
  return jax.tree.map(lambda x: x.reshape(num_devices, -1, *x.shape[1:]), batch)


def replicate(tree, num_devices):
  """A copy of `tree` per local device, stacked on a leading axis (the pmap input layout)."""
  return jax.tree.map(lambda leaf: jnp.stack([leaf] * num_devices), tree)


def unreplicate(tree):
  """Device 0's copy of a replicated tree (all copies are equal: every update is all-reduced)."""
  return jax.tree.map(lambda leaf: leaf[0], tree)
