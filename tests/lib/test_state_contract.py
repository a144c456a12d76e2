"""Every state the libraries carry across steps, from its `init`: it can be donated to a jitted step
(`donate_argnums`: no two leaves share a buffer), and it round-trips through pickle, orbax and
`flax.serialization` (alone and inside a Flax `TrainState`) as the same type with the same values.

The states: MR2's `ClassStats`, the reweighting's `ReweightState`, `NCAccumulator`, Group DRO's and
FairDRO's q and `LfFState`. `test_every_init_is_listed` keeps the table complete: a new public
`init_*` (or `.init`) fails it until it is added here. Flax and orbax are optional: their tests
skip where they are not installed (the library-only job).
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mr2_jax
import reweight_jax
from reweight_jax import baselines
from tests import batch_calls

K, DIM, BATCH, NUM_EXAMPLES = 5, 3, 8, 12


def _batch():
  rng = np.random.default_rng(0)
  return dict(features=jnp.asarray(rng.normal(size=(BATCH, DIM)), jnp.float32),
              logits=jnp.asarray(rng.normal(size=(BATCH, K)), jnp.float32),
              labels=jnp.asarray(rng.integers(0, K, BATCH), jnp.int32),
              losses=jnp.asarray(rng.random(BATCH) + 0.1, jnp.float32),
              losses_b=jnp.asarray(rng.random(BATCH) + 0.1, jnp.float32),
              indices=jnp.asarray(rng.permutation(NUM_EXAMPLES)[:BATCH], jnp.int32),
              where=jnp.asarray(np.arange(BATCH) < BATCH - 1))


class Carried(NamedTuple):
  """A state: how it starts (`init`) and one step of the function that carries it."""
  init: Callable[[], Any]
  step: Callable[[Any, dict], Any]


STATES = {
    "mr2_jax.init_class_stats": Carried(
        lambda: mr2_jax.init_class_stats(K),
        lambda s, b: mr2_jax.mr2_loss(b["logits"], b["features"], b["labels"], s,
                                      where=b["where"])[1]),
    "reweight_jax.init_reweight_state": Carried(
        lambda: reweight_jax.init_reweight_state(K),
        lambda s, b: reweight_jax.inverse_reweighted_loss(
            b["losses"], b["labels"], s, alpha=0.5, prior=jnp.full((K,), 1.0 / K), gamma=0.9,
            where=b["where"])[1]),
    "reweight_jax.NCAccumulator.init": Carried(
        lambda: reweight_jax.NCAccumulator.init(K, DIM),
        lambda s, b: s.update(b["features"], b["labels"], per_example_loss=b["losses"],
                              where=b["where"])),
    "reweight_jax.baselines.init_group_dro_q": Carried(
        lambda: baselines.init_group_dro_q(K),
        lambda q, b: baselines.group_dro_loss(b["losses"], b["labels"], q, where=b["where"])[1]),
    "reweight_jax.baselines.init_fairdro_q": Carried(
        lambda: baselines.init_fairdro_q(K),
        lambda q, b: baselines.fairdro_update(
            q, baselines.fairdro_best_response(jnp.linspace(0.5, 2.0, K)), 1, 10)),
    "reweight_jax.baselines.init_lff_state": Carried(
        lambda: baselines.init_lff_state(NUM_EXAMPLES),
        lambda s, b: baselines.lff_update_ema(s, b["indices"], b["losses"], b["losses_b"],
                                              where=b["where"])),
}


def _public_inits():
  found = set()
  for qualified, value in batch_calls.public_symbols():
    if inspect.isfunction(value) and qualified.rsplit(".", 1)[1].startswith("init"):
      found.add(qualified)
    elif inspect.isclass(value) and callable(getattr(value, "init", None)) and hasattr(
        value, "_fields"):
      found.add(f"{qualified}.init")
  return found


def test_every_init_is_listed():
  assert _public_inits() == set(STATES)


def _stepped(name):
  """The state after one eager step, so that a round trip carries values other than the init's."""
  carried = STATES[name]
  return carried.step(carried.init(), _batch())


@pytest.mark.parametrize("name", sorted(STATES))
def test_the_init_state_can_be_donated_to_a_jitted_step(name):
  """`jax.jit(step, donate_argnums=0)` on the init state (a leaf shared by two fields is 'donated
  twice', an error), then on the jitted and the eager step's output, as a training loop does."""
  carried = STATES[name]
  batch = _batch()
  step = jax.jit(carried.step, donate_argnums=0)
  expected = jax.tree.map(np.asarray, jax.jit(carried.step)(carried.init(), batch))
  state = step(carried.init(), batch)
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, state), expected)
  jax.block_until_ready(step(state, batch))
  jax.block_until_ready(step(carried.step(carried.init(), batch), batch))  # an eager step's output
  identity = jax.jit(lambda s: jax.tree.map(lambda x: x, s), donate_argnums=0)
  jax.block_until_ready(identity(carried.init()))


def _assert_same_state(restored, state):
  if not isinstance(state, jax.Array):  # a bare q may come back as a NumPy array
    assert type(restored) is type(state)
  chex.assert_trees_all_equal_structs(restored, state)
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, restored), jax.tree.map(np.asarray, state))
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    assert np.asarray(got).dtype == np.asarray(want).dtype


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_state_round_trips_through_pickle(name):
  state = _stepped(name)
  _assert_same_state(pickle.loads(pickle.dumps(state)), state)


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_state_round_trips_through_flax_serialization(name):
  serialization = pytest.importorskip("flax.serialization")
  state = _stepped(name)
  restored = serialization.from_bytes(STATES[name].init(), serialization.to_bytes(state))
  _assert_same_state(restored, state)
  state_dict = serialization.to_state_dict(state)
  _assert_same_state(serialization.from_state_dict(STATES[name].init(), state_dict), state)


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_state_round_trips_inside_a_flax_train_state(name):
  serialization = pytest.importorskip("flax.serialization")
  train_state = importlib.import_module("flax.training.train_state")

  class TrainState(train_state.TrainState):
    loss_state: Any

  def make(loss_state):
    return TrainState.create(apply_fn=None, params={"w": jnp.arange(3.0)}, tx=optax.sgd(0.1),
                             loss_state=loss_state)

  state = make(_stepped(name))
  restored = serialization.from_bytes(make(STATES[name].init()), serialization.to_bytes(state))
  _assert_same_state(restored.loss_state, state.loss_state)
  chex.assert_trees_all_equal(restored.params, state.params)


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_state_round_trips_through_orbax(name, tmp_path):
  ocp = pytest.importorskip("orbax.checkpoint")
  state = _stepped(name)
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(tmp_path / "state", {"loss_state": state})  # a q alone is no pytree to orbax
  checkpointer.wait_until_finished()
  restored = checkpointer.restore(tmp_path / "state", {"loss_state": STATES[name].init()})
  _assert_same_state(restored["loss_state"], state)
