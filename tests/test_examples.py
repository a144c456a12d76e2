"""examples/: each training example runs a few steps and its state changes as its docstring says;
the NNX heads (mr2_jax.nnx) compute what the linen heads compute.

The Flax tests skip without Flax (`pytest.importorskip`; no `import flax` statement here, so the
library-only run keeps this file and runs the optax example).
"""

import functools
import importlib
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax

EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
NUM_STEPS, REWEIGHT_START = 6, 3


def load_example(name):
  """The example `examples/<name>.py` as a module (examples/ is a folder of scripts, no package)."""
  spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                os.path.join(EXAMPLES_DIR, f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@functools.lru_cache(maxsize=None)
def run_example(name):
  """(module, result of its `main`), run once per test session and shared by the tests."""
  if name != "optax_train":
    pytest.importorskip("flax")
  module = load_example(name)
  return module, module.main(num_steps=NUM_STEPS, reweight_start=REWEIGHT_START)


def as_states(name, result, which):
  """(params, class_stats, reweight_state) of the example's result at 'start' or 'end'."""
  state = result[which]
  if name == "optax_train":
    return state["params"], state["class_stats"], state["reweight_state"]
  if name == "linen_train":
    return state.params, state.class_stats, state.reweight_state
  params = {key: state[key] for key in ("hidden", "head")}
  return params, state["class_stats"], state["reweight_state"]


@pytest.fixture(scope="module", params=["optax_train", "linen_train", "nnx_train"])
def example(request):
  module, result = run_example(request.param)
  return request.param, module, result


def test_losses_are_finite_and_params_change(example):
  name, _, result = example
  assert result["losses"].shape == (NUM_STEPS,)
  assert np.all(np.isfinite(result["losses"]))
  start, _, _ = as_states(name, result, "start")
  end, _, _ = as_states(name, result, "end")
  assert jax.tree.structure(start) == jax.tree.structure(end)
  for before, after in zip(jax.tree.leaves(start), jax.tree.leaves(end)):
    assert np.all(np.isfinite(after))
    assert not np.array_equal(before, after)


def test_class_statistics_of_seen_classes_are_set(example):
  name, module, result = example
  _, start, _ = as_states(name, result, "start")
  _, stats, _ = as_states(name, result, "end")
  assert not np.any(start.seen) and not np.any(start.sq_mean_norm)
  seen = np.asarray(stats.seen)
  assert seen.shape == (len(module.CLASS_COUNTS),) and seen.any()
  for values in (np.asarray(stats.sq_mean_norm), np.asarray(stats.mean_sq_deviation)):
    assert np.all(np.isfinite(values))
    assert np.all(values[~seen] == 0)
  assert np.all(np.asarray(stats.sq_mean_norm)[seen] > 0)
  assert np.all(np.asarray(stats.mean_sq_deviation)[seen] >= 0)


def test_reweighting_counts_only_after_its_start(example):
  name, _, result = example
  counts = result["batch_counts"]
  assert counts.shape[0] == NUM_STEPS
  # Before the start the state is the initial one: no counts, and β = 1.
  assert not np.any(counts[:REWEIGHT_START])
  _, _, start = as_states(name, result, "start")
  np.testing.assert_array_equal(start.beta, 1.0)
  # After it, each class's B_c grows by one per batch that holds the class.
  steps = np.diff(counts[REWEIGHT_START - 1:], axis=0)
  assert np.all((steps == 0) | (steps == 1)) and np.all(steps.sum(axis=1) >= 1)
  _, _, end = as_states(name, result, "end")
  np.testing.assert_array_equal(end.batch_counts, counts[-1])
  assert np.all(np.isfinite(end.beta)) and np.all(np.asarray(end.beta) > 0)


def test_optimizer_state_holds_only_the_params(example):
  name, _, result = example
  params, _, _ = as_states(name, result, "end")
  if name == "nnx_train":
    nnx = pytest.importorskip("flax.nnx")
    assert len(jax.tree.leaves(nnx.state(result["optimizer"].opt_state))) == len(
        jax.tree.leaves(params))
    return
  opt_state = result["opt_state"] if name == "optax_train" else result["end"].opt_state
  # sgd with momentum: (TraceState(trace), EmptyState()), the trace shaped as the params.
  assert jax.tree.structure(opt_state[0].trace) == jax.tree.structure(params)
  assert len(jax.tree.leaves(opt_state)) == len(jax.tree.leaves(params))


def test_nnx_optimizer_never_updates_float_only_class_statistics():
  """The property `ClassStatistics` is for, on statistics the loss differentiates through and that
  hold floats only: were the variable type a parameter (`class ClassStatistics(nnx.Param)`), the
  gradient would reach them and `nnx.Optimizer(..., wrt=nnx.Param)` would move them, and this
  assertion fails by itself (the example's `ClassStats` would crash on its boolean `seen` field
  before any assertion is reached)."""
  nnx = pytest.importorskip("flax.nnx")
  optax = pytest.importorskip("optax")
  mr2_nnx = importlib.import_module("mr2_jax.nnx")

  class Scaled(nnx.Module):
    def __init__(self):
      self.kernel = nnx.Param(jnp.ones((3,), jnp.float32))
      self.stats = mr2_nnx.ClassStatistics({"sq_mean_norm": jnp.full((3,), 2.0, jnp.float32),
                                            "variance": jnp.full((3,), 0.5, jnp.float32)})

    def __call__(self, x):
      stats = self.stats.get_value()
      return x * self.kernel[...] * (stats["sq_mean_norm"] + stats["variance"])

  model = Scaled()
  optimizer = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)
  before = {k: np.array(v) for k, v in model.stats.get_value().items()}
  kernel = np.array(model.kernel[...])
  grads = nnx.grad(lambda m: jnp.sum(m(jnp.arange(1.0, 4.0)) ** 2))(model)
  optimizer.update(model, grads)
  after = {k: np.array(v) for k, v in model.stats.get_value().items()}
  moved = [k for k in before if not np.array_equal(before[k], after[k])]
  assert not moved, f"the optimiser moved the statistics {moved}"
  assert not np.array_equal(kernel, np.array(model.kernel[...]))  # the parameter did move


def test_nnx_optimizer_never_updates_the_class_statistics():
  nnx = pytest.importorskip("flax.nnx")
  mr2_nnx = importlib.import_module("mr2_jax.nnx")
  module, result = run_example("nnx_train")
  model, optimizer = result["model"], result["optimizer"]
  statistics = nnx.to_pure_dict(nnx.state(model, mr2_nnx.ClassStatistics))
  assert set(statistics) == {"class_stats", "reweight_state"}

  inputs, _ = module.make_dataset(0)
  params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  grads = nnx.grad(lambda model: jnp.sum(model(inputs[:8])[0] ** 2))(model)
  optimizer.update(model, grads)
  unchanged = jax.tree.map(np.array_equal, statistics,
                           nnx.to_pure_dict(nnx.state(model, mr2_nnx.ClassStatistics)))
  assert all(jax.tree.leaves(unchanged))
  changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), params,
                         nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  assert all(jax.tree.leaves(changed))


@pytest.mark.parametrize("head", ["CosineClassifier", "SupConProjection"])
def test_nnx_heads_equal_the_linen_heads_given_the_same_parameters(head):
  nnx = pytest.importorskip("flax.nnx")
  linen = importlib.import_module("mr2_jax.linen")
  mr2_nnx = importlib.import_module("mr2_jax.nnx")
  features = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
  if head == "CosineClassifier":
    linen_head = linen.CosineClassifier(num_classes=3, scale=30.0)
    nnx_head = mr2_nnx.CosineClassifier(6, 3, scale=30.0, rngs=nnx.Rngs(1))
  else:
    linen_head = linen.SupConProjection(features=4)
    nnx_head = mr2_nnx.SupConProjection(6, 4, rngs=nnx.Rngs(1))
  linen_params = linen_head.init(jax.random.key(0), features)["params"]
  nnx_state = nnx.state(nnx_head, nnx.Param)
  shapes = jax.tree.map(lambda x: (x.shape, x.dtype), linen_params)
  assert jax.tree.map(lambda x: (x.shape, x.dtype), nnx.to_pure_dict(nnx_state)) == shapes
  nnx.replace_by_pure_dict(nnx_state, linen_params)
  nnx.update(nnx_head, nnx_state)
  expected = linen_head.apply({"params": linen_params}, features)
  np.testing.assert_allclose(nnx_head(features), expected, rtol=1e-6, atol=1e-6)
  assert mr2_jax.CosineClassifier is linen.CosineClassifier

