"""The loss registry (`config.loss` → its `Method`), built from the other modules of this package
and nothing else.

Every module of `experiments.methods` that declares `METHODS` (a tuple of `Method`) adds those
methods; one that declares `WRAPPER` (the inverse reweighting) adds the wrapper around every method
with a per-example loss (`<method>+<wrapper>`; plain `<wrapper>` over the method it stands for).
Adding a method is one new module here and its test: the trainer, the config schema, the linear
probe and the benchmarks take it by name.

Every entry has one signature once built from a config (`make_loss_fn`):

    loss_fn(logits, features, labels, loss_state, step_info) → (loss, new_loss_state, metrics)

`loss` is this device's share of the global-batch loss (`lax.pmean` of the shares, and of their
gradients, is the global value), `loss_state` the train state's dict of the state the entry
carries (the checkpoint's layout) and `metrics` a dict of arrays to log. The registry is the one
place that hands a method what it reads: its settings (`Method.settings`, not the config), its
typed state out of that dict (`Method.state_of`) and, where it declares `reads_mix`, the mix. A deferred entry (`start` names the config field of its start epoch)
trains as its `before` entry until that epoch — the before entry's state updates only, its own
state untouched — and the two are a `lax.cond`, so a step computes one of them, never both. In a sweep
(`experiments.train.seed_axis`) the step's `StepInfo.swept` holds the member's values of the
fields its method declares traceable (`traceable_fields`), set over the config's before the
settings are read.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import methods as methods_package
from experiments.common.errors import ConfigError
from experiments.common.errors import field_value
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import StepInfo
from experiments.methods.method import Wrapper


def method_modules() -> list[ModuleType]:
  """The modules of `experiments.methods` that declare methods or a wrapper, by name."""
  found = []
  for info in sorted(pkgutil.iter_modules(methods_package.__path__), key=lambda m: m.name):
    module = importlib.import_module(f"{methods_package.__name__}.{info.name}")
    if hasattr(module, "METHODS") or hasattr(module, "WRAPPER"):
      found.append(module)
  return found


REGISTRY: dict[str, Method] = {}
CONFIG_TREES: dict[str, ConfigTree] = {}
WRAPPERS: dict[str, Wrapper] = {}


def _add_trees(owner: str, trees) -> list[str]:
  for key in trees:
    if key in CONFIG_TREES:
      raise ValueError(f"{owner}: the config sub-tree {key!r} is registered already")
  CONFIG_TREES.update(trees)
  return list(trees)


def _check_declaration(method: Method) -> None:
  """What `Method` says of a declared method's settings and state, checked once at registration."""
  if len(method.reads) > 1:
    raise ValueError(f"{method.name}: a method reads one config sub-tree (its settings), got "
                     f"{method.reads}")
  fields = set(method.state) | set(method.example_state)
  declared = set() if method.state_type is None else set(method.state_type._fields)
  if fields != declared:
    raise ValueError(f"{method.name}: state_type's fields {sorted(declared)} are not its state's "
                     f"keys {sorted(fields)}")
  clash = [f for key in method.reads if key in CONFIG_TREES
           for f in method.shared if f in CONFIG_TREES[key].defaults()]
  if clash:
    raise ValueError(f"{method.name}: shared fields {clash} are also fields of its sub-tree")


def _add(method: Method) -> list[str]:
  """Adds `method`, and each wrapper around it where it has a per-example loss."""
  if method.name in REGISTRY:
    raise ValueError(f"the method {method.name!r} is registered already")
  REGISTRY[method.name] = method
  added = [method.name]
  if method.per_example is not None:
    for wrapper in WRAPPERS.values():
      added += _add(wrapper.around(method))
  return added


def register(module: ModuleType) -> tuple[list[str], list[str]]:
  """Registers the methods (or the wrapper) a module declares; returns (entries, sub-trees) added."""
  names, trees = [], []
  if hasattr(module, "WRAPPER"):
    wrapper = module.WRAPPER
    _check_declaration(wrapper.own())
    WRAPPERS[wrapper.name] = wrapper
    trees += _add_trees(wrapper.name, wrapper.trees)
    for base in [m for m in REGISTRY.values() if m.per_example is not None]:
      names += _add(wrapper.around(base))
  for method in getattr(module, "METHODS", ()):
    trees += _add_trees(method.name, method.trees)
    _check_declaration(method)
    names += _add(method)
  return names, trees


@contextlib.contextmanager
def registered(module: ModuleType) -> Iterator[list[str]]:
  """The registry with `module`'s methods for the `with` block (a method defined outside the
  package, in a test), the entries added yielded."""
  names, trees = register(module)
  try:
    yield names
  finally:
    for name in names:
      REGISTRY.pop(name)
    for key in trees:
      CONFIG_TREES.pop(key)
    if hasattr(module, "WRAPPER"):
      WRAPPERS.pop(module.WRAPPER.name)


def _build(modules: Iterable[ModuleType]) -> None:
  """Wrappers first, so that each method is followed by its wrapped forms."""
  modules = list(modules)
  for module in modules:
    if hasattr(module, "WRAPPER"):
      _check_declaration(module.WRAPPER.own())
      WRAPPERS[module.WRAPPER.name] = module.WRAPPER
      _add_trees(module.WRAPPER.name, module.WRAPPER.trees)
  for module in modules:
    for method in getattr(module, "METHODS", ()):
      _add_trees(method.name, method.trees)
      _check_declaration(method)
      _add(method)


_build(method_modules())


# ------------------------------------------------------------------------------------------------
# Using an entry
# ------------------------------------------------------------------------------------------------

def get(name: str) -> Method:
  if name not in REGISTRY:
    raise ConfigError(f"config.loss: unknown loss {name!r}; expected one of {tuple(REGISTRY)}")
  return REGISTRY[name]


def start_epoch(config) -> int:
  """The epoch from which `config.loss` itself trains (0 when it is not deferred)."""
  entry = get(config.loss)
  return 0 if entry.start is None else int(field_value(with_method_trees(config), entry.start))


def phases(name: str) -> list[Method]:
  """The entry and, when deferred, the entry it trains as before its start."""
  entry = get(name)
  return [entry] if entry.start is None else [entry, get(entry.before)]


def method_trees(name: str) -> tuple[str, ...]:
  """The config sub-trees a run of entry `name` reads: its own (`Method.reads`) and, for a
  deferred entry, those of the entry it trains as before its start."""
  keys = []
  for entry in phases(name):
    keys += [key for key in entry.reads if key not in keys]
  return tuple(keys)


def method_tree(key: str, given=None) -> ml_collections.ConfigDict:
  """Sub-tree `key` as a run reads it: its method's defaults (`CONFIG_TREES`) with the fields
  `given` (what a config sets) over them.

  Raises:
    ConfigError: a field the sub-tree does not have, or a value of another type, naming it.
  """
  tree = ml_collections.ConfigDict(CONFIG_TREES[key].defaults())
  if given is None:
    return tree
  if not hasattr(given, "items"):
    raise ConfigError(f"config.{key}: the {key!r} method's sub-tree is a ConfigDict of fields "
                      f"{sorted(tree)}, got {given!r}")
  for field, value in given.items():
    if field not in tree:
      raise ConfigError(f"config.{key}.{field}: not a field of the {key!r} sub-tree; expected "
                        f"one of {sorted(tree)}")
    try:
      tree[field] = value
    except TypeError as error:
      raise ConfigError(f"config.{key}.{field}: {error}") from None
  return tree


def traceable_fields(name: str) -> tuple[str, ...]:
  """'<tree>.<field>' of every field of the sub-trees entry `name` reads (`method_trees`) that its
  method declares traceable (`ConfigTree.traceable`): the fields in which the members of a sweep
  may differ within one program."""
  return tuple(f"{key}.{field}" for key in method_trees(name)
               for field in CONFIG_TREES[key].traceable)


def with_swept(config, swept) -> ml_collections.ConfigDict:
  """A copy of `config` with the sweep member's values `swept` ({'<tree>.<field>': value}, traced
  scalars inside the step) set over its fields; its settings are then read as a run reads them."""
  config = copy.deepcopy(config)
  for path, value in swept.items():
    key, field = path.split(".", 1)
    with config[key].ignore_type():
      config[key][field] = value
  return config


def with_method_trees(config, keys: Iterable[str] | None = None) -> ml_collections.ConfigDict:
  """A copy of `config` with the sub-trees `keys` (default: those `config.loss` reads,
  `method_trees`) as a run reads them (`method_tree`); the rest as it is. What the functions
  here read a method's settings from, and where a method's field is set in code (a study's method
  spec, a test), the sub-tree to set it in."""
  config = copy.deepcopy(config)
  with config.unlocked():
    for key in (method_trees(config.loss) if keys is None else keys):
      config[key] = method_tree(key, config.get(key))
  return config


def start_fields() -> set[str]:
  """The config fields of every deferred entry's start epoch."""
  return {entry.start for entry in REGISTRY.values() if entry.start is not None}


def takes_mixup(name: str) -> bool:
  """Whether method `name` trains on mixup batches: its loss reads the mix (`Method.reads_mix`, in
  both phases of a deferred entry) and its recipe has no paired batches of its own (GLMC's) and one
  view."""
  recipe = get(name).recipe
  return (all(e.reads_mix for e in phases(name)) and recipe.pair is None and recipe.views == 1)


def init_loss_state(config, num_classes: int, train_labels=None) -> dict[str, Any]:
  """The loss state of `config.loss` (its own and its before entry's fields) for K classes;
  per-example fields (LfF's) need the training labels int [N]."""
  inits, example_inits = {}, {}
  for entry in phases(config.loss):
    inits.update(entry.state)
    example_inits.update(entry.example_state)
  state = {}
  for field in sorted({*inits, *example_inits}):
    if field in example_inits:
      if train_labels is None:
        raise ValueError(f"loss {config.loss!r} carries per-example state ({field!r}): pass the "
                         f"training labels (train_labels)")
      state[field] = example_inits[field](np.asarray(train_labels))
    else:
      state[field] = inits[field](num_classes)
  return state


def _with_metrics_of(branch, other_shapes: dict) -> Callable[[], tuple]:
  """`branch` with the metrics only the other branch of a cond has, as NaN (not computed)."""
  def padded():
    loss, state, metrics = branch()
    for key, shape in other_shapes.items():
      if key not in metrics:
        metrics[key] = jnp.full(shape.shape, jnp.nan if jnp.issubdtype(shape.dtype, jnp.floating)
                                else 0, shape.dtype)
    return loss, state, metrics
  return padded


def state_summary(config, loss_state: dict[str, Any]) -> dict[str, list]:
  """What `config.loss` reports of the state a run ends with (`Method.state_summary`: MR2's
  margins γ_k, the reweighting's batch counts B_c, Group DRO's and FairDRO's q), nothing for the
  others; a deferred entry reports its before entry's state too."""
  config = with_method_trees(config)
  out = {}
  for entry in phases(config.loss):
    out.update(entry.summarize(entry.settings(config), entry.state_of(loss_state)))
  return out


def _applied(name: str, config) -> Callable[..., tuple]:
  """Entry `name`'s loss on the train state's `loss_state` dict: its settings bound, its typed
  state taken out of the dict and put back, the mix given only where it declares `reads_mix`
  (a loss that does not is given none), its value at least float32: entries differ in the dtype
  they compute in (MR2 keeps bfloat16 logits' dtype, the reductions of the others are float32),
  and the two branches of a deferred entry's `lax.cond` must agree."""
  entry = get(name)
  config = with_method_trees(config)
  settings = entry.settings(config)

  def apply(logits, features, labels, loss_state, info: StepInfo):
    if not entry.reads_mix:
      info = info._replace(recipe=info.recipe._replace(mix=None))
    # A sweep member's traced values over the config's (`StepInfo.swept`; the trace alone).
    given = entry.settings(with_swept(config, info.swept)) if info.swept else settings
    loss, state, metrics = entry.loss(given, logits, features, labels,
                                      entry.state_of(loss_state), info)
    return (loss.astype(jnp.promote_types(loss.dtype, jnp.float32)),
            {**loss_state, **entry.state_fields(state)}, metrics)
  return apply


def make_loss_fn(config) -> Callable[..., tuple[jax.Array, dict, dict]]:
  """loss_fn(logits, features, labels, loss_state, step_info) → (loss, loss_state, metrics) of
  `config.loss` (the loss at least float32); a deferred entry switches from its before entry at
  its start epoch in a `lax.cond` (one branch runs per step) — or not at all when it starts at
  epoch 0."""
  entry = get(config.loss)
  start = start_epoch(config)
  if start == 0:
    return _applied(config.loss, config)

  def loss_fn(logits, features, labels, loss_state, info: StepInfo):
    after_branch, before_branch = (
        functools.partial(_applied(e, config), logits, features, labels, loss_state, info)
        for e in (config.loss, entry.before))
    after_shapes, before_shapes = jax.eval_shape(after_branch), jax.eval_shape(before_branch)
    return jax.lax.cond(info.epoch >= start,
                        _with_metrics_of(after_branch, before_shapes[2]),
                        _with_metrics_of(before_branch, after_shapes[2]))

  return loss_fn
