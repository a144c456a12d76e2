"""What a method declares, in one module of this package: `Method` (its batch objective, the config
sub-trees it owns and reads, the state it carries, a deferred start, its checks, its `Recipe` and,
where it has one, its per-example loss), and the typed values a loss reads besides the batch:
`StepInfo`, with `RecipeInputs` (what the method's recipe gives the loss in a step: the model
wrapper's outputs, the mix of a mixed batch, the rows' dataset positions) and `EpochPass`.

`Wrapper` is a method that composes with any method that has a per-example loss
(`Method.per_example`): the inverse reweighting (`experiments.methods.inverse_reweight`). The
registry (`experiments.methods.registry`) is built from the modules of this package and nothing
else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

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
  """
  defaults: Callable[[], dict[str, Any]]
  ranges: tuple = ()
  choices: tuple = ()


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
    state: the method's loss state after the step.
    metrics: the method's metrics.
    total: (the wrapper's mean of the rows) → the method's loss: the identity where the method's
      loss is that mean; GLMC's puts it in place of its re-balanced term.
  """
  losses: jax.Array
  losses_b: jax.Array | None
  state: dict
  metrics: dict
  total: Callable[[jax.Array], jax.Array] = lambda mean: mean


# (config, logits, features, labels, loss_state, StepInfo) → (loss, loss_state, metrics)
LossApply = Callable[..., tuple[jax.Array, dict, dict]]


@dataclasses.dataclass(frozen=True)
class Recipe:
  """What the trainer provides to a method besides the batch loss (the plain recipe: nothing).

  Attributes:
    model: (config, base model) → the model it trains: a wrapper that keeps the base model's
      parameters where they are (`nn.share_scope`) and, in training mode, returns
      `experiments.models.Outputs` with the outputs its loss reads (`RecipeInputs.outputs`).
    views: augmented views per example in a training batch; the step runs the model on the V·B
      views (view-major) with the labels (and positions, partners' labels) repeated per view.
    sampler: (config, training split, read_run) → (the dataset positions one epoch draws from, a
      record written to the run's sampler.json), for a method that trains on an edited training
      set; `read_run(workdir, field)` is another run's model over this training set
      (`experiments.train.run_features.read_run`), given by the trainer.
    pair: (config, training split) → draw(rng, global batch rows, H, W) →
      `experiments.data.batches.PairDraw`: each row's partner in a paired batch, the step's λ and
      CutMix box, drawn on the host (`experiments.data.batches.train_batches(pair=...)`).
    mix: (batch) → (images, `Mix`): how the step mixes a paired batch on the device.
    indices: the loss reads the rows' dataset positions (`RecipeInputs.indices`).
    epoch_end: (config, loss_state, EpochPass, epoch, num_epochs) → loss_state, for a method whose
      state is set from a pass over the training set after each epoch; the trainer runs that pass
      (eval mode, no augmentation) only for such a method.
  """
  model: Callable[[Any, Any], Any] | None = None
  views: int = 1
  sampler: Callable[..., tuple] | None = None
  pair: Callable[[Any, Any], Callable[..., PairDraw]] | None = None
  mix: Callable[[dict], tuple[Any, Mix]] | None = None
  indices: bool = False
  epoch_end: Callable[..., dict] | None = None


PLAIN = Recipe()


@dataclasses.dataclass(frozen=True)
class Method:
  """One method: the registry entry `name` (`config.loss`).

  Attributes:
    name: its name in the registry.
    loss: (config, logits, features, labels, loss_state, StepInfo) → (this device's share of the
      global-batch loss, loss_state, metrics), once started.
    trees: the config sub-trees it owns, {key: ConfigTree} (added to every config,
      `experiments.configs.default`).
    reads: the config sub-trees it reads (its own and others').
    state: the per-class loss-state fields it carries, {field: init(num_classes)}.
    example_state: per-example loss-state fields, {field: init(training labels int [N])}.
    start: the config field of a deferred method's start epoch (None: from the first step).
    before: the method trained before `start`.
    check: extra config checks (raise ConfigError naming the field).
    reads_mix: its loss reads `RecipeInputs.mix` and weighs each row against both labels: whether
      it trains on mixed batches (mixup); checked against what the loss reads at every trace.
    recipe: what the trainer provides besides the batch loss.
    per_example: (config, logits, features, labels, loss_state, StepInfo) → `PerExample`, for a
      method whose loss is a mean of per-example losses: what a `Wrapper` weighs.
    per_example_check: config checks of the per-example form (MR2's: the paper form).
    state_summary: (config, final loss state) → {name: list} the run's summary.json reports of
      the state it carries (MR2's margins γ_k, Group DRO's q).
  """
  name: str
  loss: LossApply
  trees: Mapping[str, ConfigTree] = dataclasses.field(default_factory=dict)
  reads: tuple[str, ...] = ()
  state: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
  example_state: Mapping[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
  start: str | None = None
  before: str = "ce"
  check: Callable[[Any], None] | None = None
  reads_mix: bool = False
  recipe: Recipe = PLAIN
  per_example: Callable[..., PerExample] | None = None
  per_example_check: Callable[[Any], None] | None = None
  state_summary: Callable[[Any, dict], dict] | None = None


@dataclasses.dataclass(frozen=True)
class Wrapper:
  """A method that composes with any method that has a per-example loss.

  `around(base)` is the method `<base>+<name>` (for `over`, the method it is published over,
  plain `<name>`): it reads the base's sub-trees and its own, carries both states, trains as the
  base until its start epoch, and on the base's recipe.

  Attributes:
    name: its name.
    over: the method `name` alone stands for (the inverse reweighting: CE).
    loss: (config, PerExample, labels, loss_state, StepInfo) → (the weighted mean of the rows,
      loss_state, metrics).
    trees, state, start, state_summary: as `Method`'s, its own.
  """
  name: str
  over: str
  loss: Callable[..., tuple[jax.Array, dict, dict]]
  trees: Mapping[str, ConfigTree] = dataclasses.field(default_factory=dict)
  state: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
  start: str | None = None
  state_summary: Callable[[Any, dict], dict] | None = None

  def name_around(self, base: str) -> str:
    return self.name if base == self.over else f"{base}+{self.name}"

  def around(self, base: Method) -> Method:
    """The method `base` with this wrapper (`base.per_example` required)."""
    if base.per_example is None:
      raise ValueError(f"the {base.name!r} method has no per-example loss to wrap")
    per_example, wrapped = base.per_example, self.loss

    def loss(config, logits, features, labels, state, info):
      rows = per_example(config, logits, features, labels, state, info)
      mean, state, metrics = wrapped(config, rows, labels, rows.state, info)
      return rows.total(mean), state, {**rows.metrics, **metrics}
    rows_doc = (per_example.__doc__ or "").strip()
    loss.__doc__ = (f"{base.name}'s per-example loss" + (f" ({rows_doc})" if rows_doc else "")
                    + f" weighted by {self.name}: {(wrapped.__doc__ or '').strip()}")

    checks = [c for c in (base.check, base.per_example_check) if c is not None]

    def both_checks(config):
      for each in checks:
        each(config)

    summaries = [f for f in (base.state_summary, self.state_summary) if f is not None]

    def state_summary(config, loss_state):
      return {key: value for each in summaries for key, value in each(config, loss_state).items()}

    return Method(name=self.name_around(base.name), loss=loss,
                  reads=(*base.reads, *self.trees), state={**base.state, **self.state},
                  example_state=base.example_state, start=self.start, before=base.name,
                  check=checks[0] if len(checks) == 1 else (both_checks if checks else None),
                  reads_mix=base.reads_mix, recipe=base.recipe,
                  state_summary=state_summary if summaries else None)

