"""What a method declares, in one module of this package: `Method` (its batch objective, the config
sub-tree it owns and reads, the state it carries, a deferred start, its checks, its `Recipe` and,
where it has one, its per-example loss), and the typed values a loss reads besides the batch:
`StepInfo`, with `RecipeInputs` (what the method's recipe gives the loss in a step: the model
wrapper's outputs, the mix of a mixed batch, the rows' dataset positions) and `EpochPass`.

A method's functions see what they use, like optax's losses: their settings (`Method.settings`:
the fields of the method's validated sub-tree and the few shared fields it names, frozen) and its
state as one typed value (`Method.state_type`: a NamedTuple of the libraries' states), never the
whole config or the train state's dict. The registry (`experiments.methods.registry`) hands them
over and is built from the modules of this package and nothing else.

`Wrapper` is a method that composes with any method that has a per-example loss
(`Method.per_example`): the inverse reweighting (`experiments.methods.inverse_reweight`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import ml_collections

from experiments.common.errors import INF
from experiments.data.batches import PairDraw

# The two ranges most fields have, as `ConfigTree.ranges` writes them.
POSITIVE = ((0, False), (INF, False))
NON_NEGATIVE = ((0, True), (INF, False))



@dataclasses.dataclass(frozen=True)
class ConfigTree:
  """A method's config sub-tree (`config.<key>`): its defaults, numeric ranges and string choices.

  Attributes:
    defaults: () → {field: default}.
    ranges: ((field, (low, closed), (high, closed)), ...), checked before a run writes anything.
    choices: ((field, allowed values), ...).
    traceable: the numeric fields that the method's functions read only inside the compiled step,
      and only where the libraries take a traced value: the fields a sweep may vary within one
      program (`experiments.train.seed_axis`, the value a stacked array), every other field being
      the program's (a static branch, a shape, a host-side computation).
  """
  defaults: Callable[[], dict[str, Any]]
  ranges: tuple = ()
  choices: tuple = ()
  traceable: tuple[str, ...] = ()


class Mix(NamedTuple):
  """A mixed batch's partners: x̃ = λx + (1 − λ)x_π (mixup), or a paired batch's (GLMC)."""
  labels_b: jax.Array   # int [B] the partner rows' labels y_π
  lam: jax.Array        # λ, the step's mixing weight


class RecipeInputs(NamedTuple):
  """What a method's recipe gives its loss in a step (the one hand-over from the step to a loss).

  Attributes:
    outputs: the model wrapper's extra outputs by name (`experiments.models.Outputs`: per-row
      outputs cut to the loss's rows, per-model ones as they are), None for a bare model.
    mix: the mix of a mixed batch (`Recipe.mix`; mixup's, GLMC's pairs), None for a plain one.
    indices: int [B] the rows' training-set positions (`Recipe.indices`), None when not asked.
  """
  outputs: Mapping[str, jax.Array] | None = None
  mix: Mix | None = None
  indices: jax.Array | None = None

  def output(self, key: str, loss: str) -> jax.Array:
    """The model wrapper's output `key`, which the `loss` method reads (ValueError naming both)."""
    if not self.outputs or key not in self.outputs:
      raise ValueError(f"the {loss!r} loss reads the model output {key!r}, which its recipe's "
                       f"model wrapper adds: build the model with `train_state.build_model`")
    return self.outputs[key]


class StepInfo(NamedTuple):
  """What a loss may read besides the batch (arrays traced in the step, `axis_name` static)."""
  epoch: jax.Array                 # int, the current epoch (step // steps_per_epoch)
  step_in_epoch: jax.Array         # int
  class_counts: jax.Array          # float32 [K], training-set class counts n_c
  axis_name: str | None = None     # data-parallel axis (pmap / shard_map), None on one device
  rng: jax.Array | None = None     # this step's PRNG key (the same on every device), for losses
                                   # that draw (EQL); a pure function of (run seed, step)
  recipe: RecipeInputs = RecipeInputs()  # what the method's recipe gives its loss
  # A sweep member's values of traceable fields, {'<tree>.<field>': traced scalar}, set over the
  # config's by the registry before the loss sees its settings (`registry.make_loss_fn`); empty
  # outside a sweep.
  swept: Mapping[str, jax.Array] = {}


class EpochPass(NamedTuple):
  """Per-class sums of a pass over the training set (float32 [K] each, reduced over devices)."""
  loss_sums: jax.Array     # Σ cross-entropy
  correct: jax.Array       # correct predictions
  counts: jax.Array        # examples


class PerExample(NamedTuple):
  """A method's per-example loss, for a wrapper that weighs the rows (the inverse reweighting).

  Attributes:
    losses: float [B] ℓ_i against the labels.
    losses_b: float [B] against the partner labels of a mixed batch (None for a plain batch).
    state: the method's typed loss state after the step (None for a method without one).
    metrics: the method's metrics.
    total: (the wrapper's mean of the rows) → the method's loss: the identity where the method's
      loss is that mean; GLMC's puts it in place of its re-balanced term.
  """
  losses: jax.Array
  losses_b: jax.Array | None
  state: Any
  metrics: dict
  total: Callable[[jax.Array], jax.Array] = lambda mean: mean


# (settings, logits, features, labels, state, StepInfo) → (loss, state, metrics): `settings` the
# method's (`Method.settings`), `state` its typed state (`Method.state_type`, None without one).
LossApply = Callable[..., tuple[jax.Array, Any, dict]]


@dataclasses.dataclass(frozen=True)
class Recipe:
  """What the trainer provides to a method besides the batch loss (the plain recipe: nothing).

  Each hook takes the method's settings first (`Method.settings`); the trainer calls them bound
  (`experiments.train.recipes.of`).

  Attributes:
    model: (settings, base model) → the model it trains: a wrapper that keeps the base model's
      parameters where they are (`nn.share_scope`) and, in training mode, returns
      `experiments.models.Outputs` with the outputs its loss reads (`RecipeInputs.outputs`).
    views: augmented views per example in a training batch; the step runs the model on the V·B
      views (view-major) with the labels (and positions, partners' labels) repeated per view.
    sampler: (settings, training split, read_run) → (the dataset positions one epoch draws from, a
      record written to the run's sampler.json), for a method that trains on an edited training
      set; `read_run(workdir, field)` is another run's model over this training set
      (`experiments.train.run_features.read_run`), given by the trainer.
    pair: (settings, training split) → draw(rng, global batch rows, H, W) →
      `experiments.data.batches.PairDraw`: each row's partner in a paired batch, the step's λ and
      CutMix box, drawn on the host (`experiments.data.batches.train_batches(pair=...)`).
    mix: (batch) → (images, `Mix`): how the step mixes a paired batch on the device.
    indices: the loss reads the rows' dataset positions (`RecipeInputs.indices`).
    epoch_end: (settings, state, EpochPass, epoch, num_epochs) → state (the method's typed
      state), for a method whose state is set from a pass over the training set after each epoch;
      the trainer runs that pass (eval mode, no augmentation) only for such a method.
  """
  model: Callable[[Any, Any], Any] | None = None
  views: int = 1
  sampler: Callable[..., tuple] | None = None
  pair: Callable[[Any, Any], Callable[..., PairDraw]] | None = None
  mix: Callable[[dict], tuple[Any, Mix]] | None = None
  indices: bool = False
  epoch_end: Callable[..., Any] | None = None


PLAIN = Recipe()


def sub_config(config, tree: str | None, shared: tuple[str, ...] = ()
               ) -> ml_collections.FrozenConfigDict:
  """The fields of `config.<tree>` (none for None) and the shared (top-level) fields `shared`, as
  one frozen ConfigDict: what a method's functions read of a config."""
  fields = {} if tree is None else config[tree].to_dict()
  fields.update({name: config[name] for name in shared})
  return ml_collections.FrozenConfigDict(fields)


@dataclasses.dataclass(frozen=True)
class Method:
  """One method: the registry entry `name` (`config.loss`).

  Its functions take the method's settings first (`settings`: its sub-tree's fields and the
  shared fields it names, validated and frozen) and, where they read or set the loss state, its
  typed state (a `state_type`, None for a method without state); its checks alone take the whole
  config, as part of the config's one check (`experiments.configs.schema.validate`), since they
  may relate fields across it (LDAM's scale to the head).

  Attributes:
    name: its name in the registry.
    loss: (settings, logits, features, labels, state, StepInfo) → (this device's share of the
      global-batch loss, the new state, metrics), once started.
    trees: the config sub-tree it owns, {key: ConfigTree}: in the config of a run that trains it
      (`experiments.configs.schema.complete`), its defaults under what the config sets.
    reads: the config sub-tree it reads, its own or another method's (LDAM-DRW: LDAM's); at most
      one for a method declared in a module, its own and the wrapper's for a wrapped one.
    shared: the shared (top-level) config fields its functions read besides (GLMC's α_e:
      `num_epochs`), added to its settings.
    state: the per-class loss-state fields it carries, {field: init(num_classes)}: their keys in
      the train state's `loss_state` (the checkpoint's layout).
    example_state: per-example loss-state fields, {field: init(training labels int [N])}.
    state_type: the NamedTuple its functions take as their state, one field per key of `state`
      and `example_state` (the libraries' typed states: MR2's `ClassStats`, ...); None without.
    start: the config field of a deferred method's start epoch (None: from the first step).
    before: the method trained before `start`.
    check: extra config checks (raise ConfigError naming the field).
    reads_mix: its loss weighs each row against both labels of a mixed batch
      (`RecipeInputs.mix`): whether it trains on mixed batches (mixup). Declared here once: the
      registry gives a loss that does not declare it no mix, and
      tests/harness/methods/test_registry.py checks that each loss that does depends on it.
    recipe: what the trainer provides besides the batch loss.
    per_example: (settings, logits, features, labels, state, StepInfo) → `PerExample`, for a
      method whose loss is a mean of per-example losses: what a `Wrapper` weighs.
    per_example_check: config checks of the per-example form (MR2's: the paper form).
    state_summary: (settings, final state) → {name: list} the run's summary.json reports of the
      state it carries (MR2's margins γ_k, Group DRO's q).
  """
  name: str
  loss: LossApply
  trees: Mapping[str, ConfigTree] = dataclasses.field(default_factory=dict)
  reads: tuple[str, ...] = ()
  shared: tuple[str, ...] = ()
  state: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
  example_state: Mapping[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
  state_type: type | None = None
  start: str | None = None
  before: str = "ce"
  check: Callable[[Any], None] | None = None
  reads_mix: bool = False
  recipe: Recipe = PLAIN
  per_example: Callable[..., PerExample] | None = None
  per_example_check: Callable[[Any], None] | None = None
  state_summary: Callable[[Any, Any], dict] | None = None

  def settings(self, config) -> Any:
    """What its functions read of `config` (`sub_config` of its sub-tree and shared fields)."""
    return sub_config(config, self.reads[0] if self.reads else None, self.shared)

  def state_of(self, loss_state: Mapping[str, Any]) -> Any:
    """Its typed state from the train state's `loss_state` dict (None without state)."""
    if self.state_type is None:
      return None
    return self.state_type(**{field: loss_state[field] for field in self.state_type._fields})

  def state_fields(self, state) -> dict[str, Any]:
    """{key: value} of its typed state in the train state's `loss_state` dict."""
    return {} if state is None else state._asdict()

  def summarize(self, settings, state) -> dict[str, list]:
    """`state_summary` of its final state ({} without one)."""
    return {} if self.state_summary is None else self.state_summary(settings, state)

  @property
  def recipe_method(self) -> "Method":
    """The method whose recipe, settings and state its recipe's hooks take (a wrapped method's:
    its base)."""
    return self


class Both(NamedTuple):
  """A wrapped method's two parts of a value (settings, state): its base method's and the
  wrapper's own."""
  base: Any
  own: Any


@dataclasses.dataclass(frozen=True)
class Wrapper:
  """A method that composes with any method that has a per-example loss.

  `around(base)` is the method `<base>+<name>` (for `over`, the method it is published over,
  plain `<name>`): it reads the base's sub-tree and its own, carries both states, trains as the
  base until its start epoch, and on the base's recipe.

  Attributes:
    name: its name.
    over: the method `name` alone stands for (the inverse reweighting: CE).
    loss: (settings, PerExample, labels, state, StepInfo) → (the weighted mean of the rows, the new
      state, metrics), its own settings and state.
    trees, state, state_type, start, state_summary: as `Method`'s, its own.
  """
  name: str
  over: str
  loss: Callable[..., tuple[jax.Array, Any, dict]]
  trees: Mapping[str, ConfigTree] = dataclasses.field(default_factory=dict)
  state: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
  state_type: type | None = None
  start: str | None = None
  state_summary: Callable[[Any, Any], dict] | None = None

  def name_around(self, base: str) -> str:
    return self.name if base == self.over else f"{base}+{self.name}"

  def own(self) -> Method:
    """Its own part as a method (its settings, state and summary), for `Wrapped`."""
    return Method(name=self.name, loss=self.loss, trees=self.trees, reads=tuple(self.trees),
                  state=self.state, state_type=self.state_type,
                  state_summary=self.state_summary)

  def around(self, base: Method) -> "Wrapped":
    """The method `base` with this wrapper (`base.per_example` required)."""
    if base.per_example is None:
      raise ValueError(f"the {base.name!r} method has no per-example loss to wrap")
    per_example, wrapped = base.per_example, self.loss

    def loss(settings: Both, logits, features, labels, state: Both, info):
      rows = per_example(settings.base, logits, features, labels, state.base, info)
      mean, own, metrics = wrapped(settings.own, rows, labels, state.own, info)
      return rows.total(mean), Both(rows.state, own), {**rows.metrics, **metrics}
    rows_doc = (per_example.__doc__ or "").strip()
    loss.__doc__ = (f"{base.name}'s per-example loss" + (f" ({rows_doc})" if rows_doc else "")
                    + f" weighted by {self.name}: {(wrapped.__doc__ or '').strip()}")

    checks = [c for c in (base.check, base.per_example_check) if c is not None]

    def both_checks(config):
      for each in checks:
        each(config)

    return Wrapped(name=self.name_around(base.name), loss=loss,
                   reads=(*base.reads, *self.trees), state={**base.state, **self.state},
                   example_state=base.example_state, start=self.start, before=base.name,
                   check=checks[0] if len(checks) == 1 else (both_checks if checks else None),
                   reads_mix=base.reads_mix, recipe=base.recipe, base=base, wrapper=self.own())


@dataclasses.dataclass(frozen=True)
class Wrapped(Method):
  """A method with a wrapper around it (`Wrapper.around`): its settings and state are `Both`
  (the base method's, the wrapper's own), and its recipe is the base's."""
  base: Method | None = None
  wrapper: Method | None = None

  def settings(self, config) -> Both:
    return Both(self.base.settings(config), self.wrapper.settings(config))

  def state_of(self, loss_state: Mapping[str, Any]) -> Both:
    return Both(self.base.state_of(loss_state), self.wrapper.state_of(loss_state))

  def state_fields(self, state: Both) -> dict[str, Any]:
    return {**self.base.state_fields(state.base), **self.wrapper.state_fields(state.own)}

  def summarize(self, settings: Both, state: Both) -> dict[str, list]:
    return {**self.base.summarize(settings.base, state.base),
            **self.wrapper.summarize(settings.own, state.own)}

  @property
  def recipe_method(self) -> Method:
    return self.base
