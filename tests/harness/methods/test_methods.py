"""experiments.methods: a method is one module (its objective, config sub-tree, state, recipe and
per-example loss), the registry is built from those modules alone, the inverse reweighting wraps
every method with a per-example loss, and a method the trainer has never seen — one new module,
with a model wrapper, two views, dataset positions, a sampler and a config sub-tree of its own —
trains through the unchanged config schema, loop and step, alone and with the reweighting."""

import ast
import importlib
import json
import pathlib
import sys
import textwrap

import jax
import ml_collections
import numpy as np
import pytest

from experiments.methods import registry
from experiments.methods.method import Mix
from experiments.methods.method import RecipeInputs
from experiments.methods.method import StepInfo
from experiments import methods
from experiments.common.errors import ConfigError
from experiments.configs import default
from experiments.configs import schema
from experiments.configs import digits_lt
from experiments.data import batches as batches_lib
from experiments.data import loading
from experiments.train import loop
from experiments.train import recipes
from experiments.train import steps
from experiments.train import train_state

HARNESS = pathlib.Path(__file__).resolve().parents[3] / "experiments"
KIT = ("method", "batch_means", "registry")  # the modules of experiments.methods that declare no method
PER_EXAMPLE = ("balanced_softmax", "ce", "eql", "etf_dr", "focal", "glmc", "jtt", "ldam",
               "logit_adjust", "mr2")


def test_the_registry_is_the_methods_of_the_method_modules_and_their_reweighted_forms():
  modules = registry.method_modules()
  assert sorted(m.__name__.rsplit(".", 1)[1] for m in modules) == sorted(
      p.stem for p in (HARNESS / "methods").glob("*.py") if p.stem not in ("__init__", *KIT))
  declared = [m for module in modules for m in getattr(module, "METHODS", ())]
  wrapped = [f"{m.name}+inverse_reweight" if m.name != "ce" else "inverse_reweight"
             for m in declared if m.per_example is not None]
  assert sorted(registry.REGISTRY) == sorted([m.name for m in declared] + wrapped)
  assert sorted(m.name for m in declared if m.per_example is not None) == sorted(PER_EXAMPLE)
  trees = {key for m in declared for key in m.trees} | {"reweight"}
  assert set(registry.CONFIG_TREES) == trees
  assert not trees & set(default.get_config())  # no method's field among the shared ones


def test_a_deferred_entry_trains_on_its_before_entrys_recipe_and_pairs_are_mixed_on_the_device():
  for name, entry in registry.REGISTRY.items():
    if entry.start is not None:  # one model and one batch layout for both phases
      assert entry.recipe == registry.get(entry.before).recipe, name
    assert (entry.recipe.pair is None) == (entry.recipe.mix is None), name
  assert registry.get("focal").recipe == registry.get("ce").recipe


def test_what_a_loss_reads_besides_the_batch_is_one_typed_structure():
  assert StepInfo._fields == ("epoch", "step_in_epoch", "class_counts", "axis_name", "rng",
                              "recipe", "swept")
  assert RecipeInputs._fields == ("outputs", "mix", "indices")
  assert Mix._fields == ("labels_b", "lam")
  assert isinstance(StepInfo(0, 0, None).recipe, RecipeInputs)


def _imports(path: pathlib.Path) -> set[str]:
  tree = ast.parse(path.read_text())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      names.update({node.module, *(f"{node.module}.{a.name}" for a in node.names)})
    elif isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
  return names


def test_no_package_below_the_studies_imports_a_methods_code():
  """Only the registry reaches the method modules (by discovery); the trainer, the configs and the
  report see what a method declares through it (the kit types excepted)."""
  for package in ("common", "data", "models", "configs", "train", "report"):
    for path in (HARNESS / package).rglob("*.py"):
      reached = {".".join(n.split(".")[:3]) for n in _imports(path)
                 if n.startswith("experiments.methods.")} - {f"experiments.methods.{k}" for k in KIT}
      assert not reached, f"{path.relative_to(HARNESS)} imports {sorted(reached)}"


def test_mixup_is_added_to_the_methods_recipe_where_the_method_takes_it():
  config = digits_lt.get_config()
  plain = recipes.of(config)
  assert (plain.model, plain.pair, plain.mix, plain.sampler, plain.epoch_end) == (None,) * 5
  config.mixup_alpha = 0.4
  recipe = recipes.of(config)
  assert (recipe.pair.func, recipe.pair.args, recipe.mix) == (recipes.mixup_pair, (0.4,),
                                                               recipes.mixup_mix)
  config.loss, config.head = "etf_dr", "etf"
  # The method's hooks bound to its settings (its sub-tree), not the config.
  model = recipes.of(config).model
  assert model.func is registry.get("etf_dr").recipe.model
  assert model.args == (ml_collections.FrozenConfigDict(registry.method_tree("etf_dr")),)
  assert recipes.of(config).mix is recipes.mixup_mix
  config.loss = "supcon"
  with pytest.raises(ConfigError, match="does not take mixup batches"):
    schema.validate_method(config)
  # From the losses' reads_mix (tests/harness/methods/test_registry.py checks each flag against its loss): the
  # cross-entropy family and ETF-DR; GLMC reads its own pairs' mix, not mixup's.
  assert sorted(n for n in registry.REGISTRY if registry.takes_mixup(n)) == sorted([
      "ce", "inverse_reweight", "jtt", "jtt+inverse_reweight", "etf_dr",
      "etf_dr+inverse_reweight"])


def test_lookup_of_an_unknown_method_names_it():
  with pytest.raises(ConfigError, match="unknown loss 'nope'"):
    registry.get("nope")


def _traced_step(config):
  """One train step of `config` traced abstractly (no compute) on a real batch of its recipe."""
  split = loading.load_split("digits", "train")
  recipe = recipes.of(config)
  steps_per_epoch = batches_lib.steps_per_epoch(split, config.batch_size)
  task = steps.Task(tuple(float(c) for c in split.class_counts), steps_per_epoch,
                    mix=recipe.mix, indices=recipe.indices)
  lr_fn = train_state.create_learning_rate_fn(config, steps_per_epoch)
  model = train_state.build_model(config, 10)
  state = train_state.create_train_state(config, model, split.images.shape[1:], 10, lr_fn,
                                         jax.random.key(0), train_labels=split.labels)
  batch = next(batches_lib.train_batches(
      split, config.batch_size, seed=0, epoch=0, augment=False, views=recipe.views,
      pair=None if recipe.pair is None else recipe.pair(split)))
  return jax.eval_shape(lambda s, b: steps.train_step(
      s, b, loss_fn=registry.make_loss_fn(config), task=task, learning_rate_fn=lr_fn), state, batch)


@pytest.mark.parametrize("method", PER_EXAMPLE)
def test_every_method_with_a_per_example_loss_runs_with_the_reweighting_from_the_config(method):
  """`--config.loss=<method>+inverse_reweight` (`inverse_reweight` for CE): the config validates
  and the trainer's step traces with the reweighting counters in the state, both phases."""
  config = digits_lt.get_config()
  config.loss = "inverse_reweight" if method == "ce" else f"{method}+inverse_reweight"
  config = registry.with_method_trees(config)
  config.batch_size, config.reweight.start_epoch = 32, 1
  config.head = "etf" if method == "etf_dr" else config.head
  if method == "jtt":
    config.jtt.stage1 = "<stage-1 workdir>"
  schema.validate(config)
  assert registry.get(config.loss).before == method
  state, metrics = _traced_step(config)
  assert "reweight" in state.loss_state and "class_weight" in metrics
  assert set(registry.init_loss_state(config, 10, np.zeros(4, np.int32))) == {
      *registry.get(method).state, *registry.get(method).example_state, "reweight"}


# A method the trainer does not know, in a module of its own: CE plus a penalty on a projection
# head's outputs (weight `toy.penalty`, range-checked), trained on two views of the first half of
# the training set, logging the largest dataset position it saw; its per-example loss lets the
# reweighting wrap it.
TOY_MODULE = textwrap.dedent('''
    """A toy method: CE + penalty · |projection|² on two views of the first half of the data."""
    import jax.numpy as jnp
    import numpy as np

    import reweight_jax
    from experiments.methods.method import NON_NEGATIVE
    from experiments.methods.method import ConfigTree
    from experiments.methods.method import Method
    from experiments.methods.method import PerExample
    from experiments.methods.method import Recipe
    from experiments.methods.supcon import WithProjection

    TREE = ConfigTree(lambda: dict(penalty=1e-3), ranges=(("penalty", *NON_NEGATIVE),))
    SAMPLED = {}


    def rows(toy, logits, features, labels, state, info):
      projection = info.recipe.output("projection", "toy")
      per_example = (reweight_jax.cross_entropy_loss(logits, labels)
                     + toy.penalty * jnp.sum(projection ** 2, axis=-1))
      return PerExample(per_example, None, state, {
          "max_index": jnp.max(info.recipe.indices).astype(jnp.float32),
          "rows": jnp.asarray(labels.shape[0], jnp.float32)})


    def toy_loss(toy, logits, features, labels, state, info):
      out = rows(toy, logits, features, labels, state, info)
      return jnp.mean(out.losses), state, out.metrics


    def first_half(toy, train, read_run):
      positions = np.arange(len(train.labels) // 2)
      SAMPLED["size"] = len(positions)
      return positions, {"toy_sampler": {"examples": len(positions)}}


    METHODS = (Method("toy", toy_loss, trees={"toy": TREE}, reads=("toy",), per_example=rows,
                      recipe=Recipe(model=lambda toy, base: WithProjection(base, features=8),
                                    views=2, indices=True, sampler=first_half)),)
    ''')


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
  (tmp_path / "toy_method.py").write_text(TOY_MODULE)
  monkeypatch.syspath_prepend(str(tmp_path))
  module = importlib.import_module("toy_method")
  yield module
  sys.modules.pop("toy_method", None)


def test_a_new_method_is_one_module_and_trains_through_the_unchanged_trainer(toy_module, tmp_path):
  """One run of `toy+inverse_reweight` from epoch 1: the new method alone in epoch 0, wrapped by
  the reweighting after (one step per epoch: the sampled half of a small training set)."""
  with registry.registered(toy_module) as added:
    assert added == ["toy", "toy+inverse_reweight"]
    assert registry.method_tree("toy").penalty == 1e-3  # the module's defaults
    config = digits_lt.get_config()
    config.loss, config.num_epochs, config.warmup_epochs, config.batch_size = (
        "toy+inverse_reweight", 3, 0, 32)
    config = registry.with_method_trees(config)
    config.max_train_per_class, config.reweight.start_epoch = 30, 1
    config.log_every_steps, config.progress_bar, config.nc_metrics = 1, False, False
    config.toy.penalty = -1.0
    with pytest.raises(ConfigError, match=r"config\.toy\.penalty"):
      loop.train_and_evaluate(config, tmp_path / "refused")
    config.toy.penalty = 1e-3
    summary = loop.train_and_evaluate(config, tmp_path / "toy")
  assert "toy" not in registry.REGISTRY and "toy" not in registry.CONFIG_TREES
  rows = [json.loads(line) for line in (tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()
          if '"max_index"' in line]
  assert [r["step"] for r in rows] == [1, 2, 3]
  assert all(r["rows"] == 2 * 32 for r in rows)  # two views of each example reach the loss
  assert all(0 <= r["max_index"] < toy_module.SAMPLED["size"] for r in rows)  # sampled half
  history = [json.loads(line) for line in
             (tmp_path / "toy" / "class_history.jsonl").read_text().splitlines()]
  weights = [np.isfinite(np.array(r["class_weight"], float)).any() for r in history
             if "class_weight" in r]
  assert weights == [False, True, True]  # the reweighting's weights from its start epoch on
  assert summary["toy_sampler"] == {"examples": toy_module.SAMPLED["size"]}
  assert len(summary["reweight_batch_counts"]) == 10 and np.isfinite(summary["overall_accuracy"])
