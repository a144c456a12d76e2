"""Seeds and sweeps as a batch axis: S runs of one config that differ only in `seed`, the run each
starts from (`init_from`, for a deferred method) and the values of the fields its method declares
traceable (`registry.traceable_fields`: MR2's λ, c̄, decay; the reweighting's α, γ, max_weight)
trained as one program.

    summaries = seed_axis.train_and_evaluate_seeds([config_0, config_1, config_2],
                                                   [workdir_0, workdir_1, workdir_2])

A sweep is such a stack whose members differ in a traceable field: the members' values of it are
one float32 array [S], an argument of the compiled step, each member's step reading its own value
(`steps.train_step(swept=...)`, `StepInfo.swept`); any other difference is refused, naming the
field, before a workdir is written. `compare --sweep` builds the members (values × seeds).

Each seed is planned and started as its solo run (`loop.plan`, `loop.start`: its data, its initial
state from `jax.random.key(seed)`, its workdir, checkpoints and the run it starts from). Their
train states — parameters, optimiser state, BatchNorm statistics, the loss's class statistics and
state, the dropout key — are stacked on a leading axis of size S and trained by one `jax.vmap`ped
`steps.train_step` (or, `by='map'`, the S solo steps in sequence inside one program: `lax.map`),
on a batch stacked from the S solo input pipelines: each seed sees exactly the rows, crops and
flips of its solo run. What a solo run does after a step (`loop_events.Events`:
the logging window, the epoch's passes, the checkpoint) is done per seed on that seed's slice, in
its own workdir, so checkpoints, resume, metrics.jsonl, summary.json and the reports are those of
S separate runs; `compare --stack_seeds` trains a method's seeds this way.

The numbers equal the solo runs' up to float order: a batched convolution may sum in another order
than S separate ones (tests/harness/train/test_seed_axis.py measures the difference on digits).
Runs under `parallel` 'none' (one device) and 'jit' (the batch axis sharded over a mesh, the seed
axis not); 'pmap' and 'shard_map' name their collective axis inside the step and are refused. One
program means one fate: a seed that diverges stops every seed (at its last good checkpoints), where
separate runs would let the others finish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import pickle
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.methods import registry
from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.data import input_pipeline
from experiments.train import checkpoints
from experiments.train import device_input
from experiments.train import loop
from experiments.train import loop_events
from experiments.train import metric_writer
from experiments.train import runners
from experiments.train import steps

# The fields in which the stacked runs may differ besides their method's traceable fields; every
# other field is the program's.
PER_SEED_FIELDS = ("seed", "init_from")
PARALLEL = ("none", "jit")
BY = ("vmap", "map")  # how the step runs over the seed axis (`make_stacked_runner`)


def stack(trees: Sequence[Any]) -> Any:
  """The trees' leaves stacked on a new leading axis, in the structure of the first tree (the
  train states of different seeds hold equal but distinct `apply_fn` and `tx` objects)."""
  treedef = jax.tree.structure(trees[0])
  columns = zip(*(jax.tree.leaves(tree) for tree in trees))
  return jax.tree.unflatten(treedef, [jnp.stack(column) for column in columns])


def take(tree: Any, seed_index: int) -> Any:
  """Seed `seed_index`'s slice of a stacked tree."""
  return jax.tree.map(lambda leaf: leaf[seed_index], tree)


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
  """A config's JSON dict by dotted field name."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def flat_config(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """A config's fields by dotted name, its method's sub-trees as a run reads them."""
  return _flat(json.loads(registry.with_method_trees(config).to_json_best_effort()))


def member_fields(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The fields in which stacked runs of `config.loss` may differ: `PER_SEED_FIELDS` and its
  method's traceable fields (`registry.traceable_fields`)."""
  return PER_SEED_FIELDS + registry.traceable_fields(str(config.loss))


def check_stackable(configs: Sequence[ml_collections.ConfigDict],
                    sweep: Sequence[str] = ()) -> None:
  """Raises `ConfigError` unless the configs differ in `member_fields` only, no two of them are
  the same run (seed and swept values), and a swept field (`swept_fields`) has a number in every
  member."""
  if not configs:
    raise ConfigError("seed axis: no config given")
  if configs[0].parallel not in PARALLEL:
    raise ConfigError(f"seed axis: config.parallel={configs[0].parallel!r} is not one of "
                      f"{PARALLEL} (the stacked step has no collective axis)")
  allowed = member_fields(configs[0])
  flat = [flat_config(config) for config in configs]
  for index, (config, fields) in enumerate(zip(configs[1:], flat[1:]), 1):
    differing = sorted(k for k in flat[0].keys() | fields.keys()
                       if k not in allowed and flat[0].get(k) != fields.get(k))
    if differing:
      traceable = allowed[len(PER_SEED_FIELDS):]
      raise ConfigError(
          f"seed axis: the configs of run 0 (seed {configs[0].seed}) and run {index} (seed "
          f"{config.seed}) differ in "
          f"{differing}; only {PER_SEED_FIELDS} and the fields {configs[0].loss!r} declares "
          f"traceable {list(traceable)} may differ (train the others as separate runs)")
  swept = swept_fields(configs, flat, sweep)
  for field in swept:
    values = [fields.get(field) for fields in flat]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
      raise ConfigError(f"sweep: {field} must be a number in every member, got {values}")
  members = [(config.seed, *(fields[f] for f in swept)) for config, fields in zip(configs, flat)]
  if len(set(members)) != len(members):
    what = "seeds" if not swept else f"(seed, {', '.join(swept)}) members"
    listed = [m[0] for m in members] if not swept else members
    raise ConfigError(f"seed axis: the {what} {listed} repeat")


def swept_fields(configs: Sequence[ml_collections.ConfigDict],
                 flat: Sequence[dict[str, Any]] | None = None,
                 sweep: Sequence[str] = ()) -> tuple[str, ...]:
  """The traceable fields whose values differ between the configs, and those of `sweep` (the
  fields a sweep varies, traced and recorded even where these members agree: the new value of an
  extended sweep), in declaration order; `flat`: the configs' `flat_config`s where the caller has
  them. A field of `sweep` the method does not declare traceable is a `ConfigError`."""
  traceable = registry.traceable_fields(str(configs[0].loss))
  undeclared = [f for f in sweep if f not in traceable]
  if undeclared:
    raise ConfigError(f"sweep: {configs[0].loss!r} declares no traceable field {undeclared} "
                      f"(its traceable fields: {list(traceable)})")
  flat = flat or [flat_config(config) for config in configs]
  return tuple(f for f in traceable
               if f in sweep or len({json.dumps(fields.get(f)) for fields in flat}) > 1)


def swept_values(configs: Sequence[ml_collections.ConfigDict],
                 sweep: Sequence[str] = ()) -> dict[str, np.ndarray]:
  """{field: float32 [S], the members' values} of the swept fields (`swept_fields`)."""
  flat = [flat_config(config) for config in configs]
  return {field: np.asarray([float(fields[field]) for fields in flat], np.float32)
          for field in swept_fields(configs, flat, sweep)}


def check_same_program(runs: Sequence[loop.Plan]) -> None:
  """Raises `ConfigError` unless the planned runs train the same steps (a JTT sampler's epoch or a
  long-tailed subset may differ in size per seed)."""
  for run in runs[1:]:
    for field in ("steps_per_epoch", "total_steps", "views", "task", "process_batch"):
      if getattr(run, field) != getattr(runs[0], field):
        raise ConfigError(f"seed axis: seed {run.config.seed}'s {field} "
                          f"({getattr(run, field)}) differs from seed {runs[0].config.seed}'s "
                          f"({getattr(runs[0], field)}); train these seeds as separate runs")


@dataclasses.dataclass(frozen=True)
class StackedRunner:
  """The vmapped train step and the layouts it takes.

  Attributes:
    step: (stacked state, stacked batch) → (stacked state, stacked metrics), the state donated.
    place_state: a stacked host state → the step's layout.
    place_batch: a stacked host batch [S, B/P, ...] → the step's layout.
  """
  step: Callable[[Any, dict], tuple[Any, dict]]
  place_state: Callable[[Any], Any]
  place_batch: Callable[[dict], dict]


def make_stacked_runner(parallel: str, loss_fn, task: steps.Task, learning_rate_fn,
                        devices=None, by: str = "vmap",
                        swept: dict[str, np.ndarray] | None = None,
                        reads: Sequence[int] | None = None) -> StackedRunner:
  """`steps.train_step` over the leading (seed) axis of the state and the batch, jitted: `vmap`ped
  (one batched step; a convolution with per-seed weights becomes a grouped one) or, `by='map'`,
  `lax.map`ped (the seeds' steps in sequence inside one program, each the solo step); on one device
  ('none'), or with the batch axis sharded over a mesh of `devices` ('jit'). `swept`: the members'
  values of swept fields ({field: [S]}, `swept_values`), an argument of the compiled step mapped
  with the state. `reads` (`shared_pipelines`): member i trains on row `reads[i]` of the stacked
  batch, which then holds one batch per distinct pipeline; one row for all is not copied (`vmap`
  with the batch unmapped)."""
  solo = functools.partial(steps.train_step, loss_fn=loss_fn, task=task,
                           learning_rate_fn=learning_rate_fn, axis_name=None)
  if by not in BY:
    raise ConfigError(f"seed axis: by={by!r} is not one of {BY}")

  def member(state, batch, values):
    return solo(state, batch, swept=values or None)
  one_batch = reads is not None and len(set(reads)) == 1 and by == "vmap"

  def train(state, batch, values):
    if one_batch:   # every member reads the one batch: mapped over the state alone
      return jax.vmap(member, in_axes=(0, None, 0))(state, jax.tree.map(lambda x: x[0], batch),
                                                    values)
    if reads is not None and list(reads) != list(range(len(reads))):
      batch = jax.tree.map(lambda x: x[np.asarray(reads)], batch)
    if by == "vmap":
      return jax.vmap(member)(state, batch, values)
    return jax.lax.map(lambda three: member(*three), (state, batch, values))
  values = {field: jnp.asarray(v, jnp.float32) for field, v in (swept or {}).items()}
  jitted = jax.jit(train, donate_argnums=(0,))

  def step(state, batch):
    return jitted(state, batch, values)
  if parallel == "none":
    return StackedRunner(step, lambda state: state, lambda batch: batch)
  if parallel != "jit":
    raise ConfigError(f"seed axis: parallel {parallel!r} is not one of {PARALLEL}")
  layout = runners._MeshLayout(devices, axis_types=(jax.sharding.AxisType.Auto,))  # pylint: disable=protected-access
  rows = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec(None, runners.AXIS))

  def place_batch(batch):
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(rows, x), batch)
  return StackedRunner(step, layout.place_state, place_batch)


def start_seeds(runs: Sequence[loop.Plan], resume_from_previous: bool):
  """(managers, states, input states, step): each seed started as its solo run (`loop.start`), at
  one common step. Checkpoints are written seed after seed, so a run killed between two of them
  leaves the first seeds one checkpoint ahead: those resume from the common (older) step, their
  one later checkpoint deleted (training is deterministic: the same state is written again). Any
  other difference (a seed more than one checkpoint ahead, or without the common step) is refused
  before anything is deleted."""
  started = [loop.start(run, resume_from_previous) for run in runs]
  managers = [manager for manager, _, _ in started]
  latest = [manager.latest_step() for manager in managers]
  seeds = [run.config.seed for run in runs]
  by_run = {f"{r.workdir.parent.name}/{r.workdir.name}": step for r, step in zip(runs, latest)}
  if len(set(latest)) == 1:
    steps = {int(state.step) for _, state, _ in started}
    if len(steps) != 1:
      raise checkpoints.CheckpointError(f"seed axis: the seeds start at different steps {steps} "
                                        f"(seeds {seeds}); train them as separate runs")
    return managers, [s for _, s, _ in started], [i for _, _, i in started], steps.pop()
  if None in latest:
    raise checkpoints.CheckpointError(
        f"seed axis: some runs have checkpoints and others none (latest steps {by_run}); remove "
        "their checkpoints folders to start afresh, or train them as separate runs")
  common = min(step for step in latest if step is not None)
  for seed, manager in zip(seeds, managers):  # every seed checked before any is rolled back
    later = [s for s in manager.all_steps() if s > common]
    if later and (common not in manager.all_steps() or len(later) > 1):
      raise checkpoints.CheckpointError(
          f"seed axis: seed {seed}'s checkpoints {sorted(manager.all_steps())} are not one save "
          f"ahead of step {common}, the latest of the runs {by_run}; train them as separate "
          "runs")
  states, input_states = [], []
  for run, manager, (_, state, input_state) in zip(runs, managers, started):
    if manager.latest_step() != common:
      manager.delete(manager.latest_step())
      state, input_state = checkpoints.restore_step(manager, common, run.state, input_state=True)
      if not input_pipeline.REGISTRY[str(run.config.input_pipeline)].saves_state:
        input_state = None
    states.append(state)
    input_states.append(input_state)
  return managers, states, input_states, common


class SeedEvents:
  """The solo runs' `loop_events.Events`, one per seed, on a stacked state: the metrics window is
  accumulated stacked, and at a step where anything is due each seed's events run on its slice.
  Evaluation and checkpoint time of the other seeds is left out of a seed's images/s, as a solo
  run leaves out its own."""

  def __init__(self, runs, runner, managers, step: int):
    self.events = [loop_events.Events(run, runner, manager, step, show_progress=index == 0)
                   for index, (run, manager) in enumerate(zip(runs, managers))]
    self.window, self.window_steps = None, 0

  def after_step(self, step: int, stacked, metrics, input_states):
    """`Events.after_step` of every seed; returns the stacked state (changed by an epoch-end
    pass)."""
    first = self.events[0]
    self.window = metric_writer.accumulate(self.window, metrics)
    self.window_steps += 1
    if first.progress is not None:
      first.progress.update(first.run.config.batch_size)
    if not first.due(step):
      return stacked
    logs = first.logs(step)
    # The steps run asynchronously: wait for them here, inside the windows' training time, so that
    # the seeds' passes timed below hold no training.
    jax.block_until_ready((stacked, self.window))
    spent, states, changed = [], [], False
    waited = time.perf_counter()
    for index, events in enumerate(self.events):
      began = time.perf_counter()
      events.window, events.window_steps = take(self.window, index), self.window_steps
      state = take(stacked, index)
      seed_metrics = take(metrics, index)
      # The earlier seeds' passes and this seed's slicing fall in its window: not training time.
      events.window_start += time.perf_counter() - waited
      new_state = events.at(step, state, seed_metrics, input_states[index])
      changed |= new_state is not state
      states.append(new_state)
      spent.append(time.perf_counter() - began)
    for index, events in enumerate(self.events):
      # The later seeds' passes fall in this seed's window too (its next one, if it logged).
      events.window_start += sum(spent[index + 1:])
    if logs:
      self.window, self.window_steps = None, 0
    return stack(states) if changed else stacked

  def close(self) -> None:
    for events in self.events:
      events.close()


def shared_pipelines(runs, input_states) -> list[int]:
  """For each member, the position among the distinct pipelines of the one it reads: members with
  the same seed and the same input state (a sweep's values of one seed) get the same batches from
  their solo pipelines, so one pipeline serves them all (`stacked_batches`); the seeds of a plain
  stack read one each."""
  keys = [(run.config.seed, pickle.dumps(state)) for run, state in zip(runs, input_states)]
  distinct = list(dict.fromkeys(keys))
  return [distinct.index(key) for key in keys]


def stacked_batches(runs, input_states, step: int, place: Callable[[dict], dict],
                    device_crops: Sequence[Any] | None, reads: Sequence[int] | None = None):
  """(step, stacked batch, input states) from the members' solo input pipelines
  (`loop.train_input`), zipped: one pipeline per distinct entry of `reads` (`shared_pipelines`;
  default one per member), the batch holding one row per pipeline and the input states one per
  member; with `input_on_device`, each seed's images cut on the device (`device_crops`) before
  stacking."""
  reads = list(range(len(runs))) if reads is None else list(reads)
  first = [reads.index(r) for r in range(max(reads) + 1)]   # the member that owns each pipeline
  with contextlib.ExitStack() as stack_of_pipelines:
    pipelines = [stack_of_pipelines.enter_context(contextlib.closing(cast(Generator, (
        loop.train_input(runs[i], input_states[i]).batches(
            step, device_crops[i] if device_crops else (lambda batch: batch))))))
        for i in first]
    for items in zip(*pipelines):
      batch_steps = {batch_step for batch_step, _, _ in items}
      if len(batch_steps) != 1:
        raise DataError(f"seed axis: the seeds' pipelines gave the batches of steps "
                        f"{sorted(batch_steps)} together")
      batches = [batch for _, batch, _ in items]
      if device_crops:
        stacked = jax.tree.map(lambda *rows: jnp.stack(rows), *batches)
      else:
        stacked = place(jax.tree.map(lambda *rows: np.stack(rows), *batches))
      yield batch_steps.pop(), stacked, [items[r][2] for r in reads]


def device_crops_of(runs, solo_runner) -> list[Any] | None:
  """One `device_input.DeviceCrops` per seed (seeds with equal training images share one copy of
  the split on the device), or None without `input_on_device`."""
  if not runs[0].config.input_on_device:
    return None
  crops: list[Any] = []
  for run in runs:
    same = next((c for c, r in zip(crops, runs) if np.array_equal(r.train.images,
                                                                   run.train.images)), None)
    crops.append(same or device_input.DeviceCrops(run.config.parallel, run.train.images,
                                                  solo_runner.place_batch))
  return crops


def train_seeds(runs, managers, states, input_states, step: int, by: str = "vmap",
                swept: dict[str, np.ndarray] | None = None):
  """The steps from `step` to the runs' `total_steps`, all seeds in one step over the seed axis
  (`make_stacked_runner`, with the sweep's values `swept`); returns (the solo runner the
  evaluations use, the seeds' states in its layout, step)."""
  run = runs[0]
  config = run.config
  loss_fn = registry.make_loss_fn(config)
  solo = runners.make_runner(config.parallel, loss_fn, run.task, run.learning_rate_fn)
  reads = shared_pipelines(runs, input_states)
  stacked_runner = make_stacked_runner(config.parallel, loss_fn, run.task, run.learning_rate_fn,
                                       by=by, swept=swept, reads=reads)
  stacked = stacked_runner.place_state(stack([jax.device_get(s) for s in states]))
  events = SeedEvents(runs, solo, managers, step)
  crops = device_crops_of(runs, solo)
  batches = stacked_batches(runs, input_states, step, stacked_runner.place_batch, crops, reads)
  try:
    stacked, step = loop.run_steps(batches, stacked, step, run.total_steps, stacked_runner.step,
                                   events.after_step)
  finally:
    batches.close()  # the seeds' pipelines and their threads
    for manager in managers:
      manager.wait_until_finished()
    events.close()
  host = jax.device_get(stacked)
  return solo, [solo.place_state(take(host, index)) for index in range(len(runs))], step


def train_and_evaluate_seeds(configs: Sequence[ml_collections.ConfigDict],
                             workdirs: Sequence[str | os.PathLike], *,
                             max_steps: int | None = None, resume_from_previous: bool = False,
                             by: str = "vmap", sweep: Sequence[str] = ()
                             ) -> list[dict[str, Any]]:
  """Trains the configs (one per seed or sweep member, equal but for `member_fields`) as one
  program, each in its workdir as `loop.train_and_evaluate` would, and writes each one's
  summary.json (a sweep member's records its values under 'sweep').

  Args:
    configs: one config per seed or member (see `check_stackable`).
    workdirs: one output folder per config, laid out as a solo run's.
    max_steps: stop after this global step (tests); the schedule still follows `num_epochs`.
    resume_from_previous: as in `loop.train_and_evaluate`, per seed.
    by: 'vmap' (one batched step: a convolution with per-seed weights becomes one grouped
      convolution, what should fill an accelerator) or 'map' (the seeds' solo steps in sequence in
      one program, `lax.map`). Neither pays on a CPU: a ResNet-32 on this 2-core CPU trained three
      seeds at 39 images/s together vmapped and about 5 mapped, against 179 for one run alone
      (results/benchmarks/RESULTS.md, "Seeds as a batch axis"); train seeds as separate runs there.
    sweep: the traceable fields the members' sweep varies ('<tree>.<field>'), traced and recorded
      in each summary even where these members agree (`swept_fields`).

  Returns:
    The seeds' summary dicts, in the order of `configs`.
  """
  if len(configs) != len(workdirs):
    raise ConfigError(f"seed axis: {len(configs)} configs for {len(workdirs)} workdirs")
  if len({pathlib.Path(w).resolve() for w in workdirs}) != len(workdirs):
    raise ConfigError("seed axis: two seeds share a workdir")
  check_stackable(configs, sweep)
  if by not in BY:
    raise ConfigError(f"seed axis: by={by!r} is not one of {BY}")
  runs = [loop.plan(config, workdir, max_steps) for config, workdir in zip(configs, workdirs)]
  check_same_program(runs)
  swept = swept_values(configs, sweep)
  managers, states, input_states, step = start_seeds(runs, resume_from_previous)
  solo, states, step = train_seeds(runs, managers, states, input_states, step, by, swept)
  # How it ran: stacked with these seeds, the step vmapped or mapped over them; a sweep member's
  # values.
  record = {"seed_axis": [config.seed for config in configs], "seed_axis_by": by}
  def member(config):
    return {"sweep": {f: flat_config(config)[f] for f in swept}} if swept else {}
  return [loop.summarize(run, solo, state, step, record={**record, **member(run.config)})
          for run, state in zip(runs, states)]
