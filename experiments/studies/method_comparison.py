"""Comparing methods on one recipe and seeds: method specs, the runs, the report (no flags: the
CLI is `experiments.compare`, the main job `experiments.demo`)."""

from __future__ import annotations

import copy
import json
import pathlib
import time

from experiments.train import checkpoints
from experiments.report import run_tables
from experiments.methods import registry
from experiments.train import loop
from experiments.train import seed_axis
from experiments.common import overrides
from experiments.common.errors import ConfigError
from experiments.configs import schema


def parse_method(spec: str) -> tuple[str, str, dict[str, object]]:
  """'name=loss:a.b=1:c=x' → (name, loss, {'a.b': 1, 'c': 'x'}); a bare loss is its own name. The
  assignments are `experiments.common.overrides.parse_override`'s `field=value`."""
  name, _, rest = spec.partition("=")
  if not rest:
    return spec, spec, {}
  loss, *assignments = rest.split(":")
  try:
    return name, loss, overrides.parse_overrides(assignments)
  except ConfigError as error:
    raise ConfigError(f"--methods: {name}: {error}") from None


def parse_sweep(texts) -> dict[str, list[object]]:
  """['mr2.lam=0,0.01,0.1'] → {'mr2.lam': [0, 0.01, 0.1]} (`compare --sweep`), each value as a
  `--methods` assignment reads it."""
  sweep: dict[str, list[object]] = {}
  for text in texts:
    field, equals, values = text.partition("=")
    if not equals or not field or not values:
      raise ConfigError(f"--sweep: {text!r} is not field=value,value,...")
    if field in sweep:
      raise ConfigError(f"--sweep: {field} is swept twice")
    sweep[field] = [overrides.parse_value(v) for v in values.split(",")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sweep[field]):
      raise ConfigError(f"--sweep: {field}'s values {sweep[field]} are not all numbers")
    if len(set(map(str, sweep[field]))) != len(sweep[field]):
      raise ConfigError(f"--sweep: {field}'s values {sweep[field]} repeat")
  return sweep


def parse_seeds(texts) -> list[int]:
  """['0-4'] or ['0', '2'] → the seeds (`compare --seeds`): numbers and inclusive ranges."""
  seeds = []
  for text in texts:
    first, dash, last = str(text).partition("-")
    try:
      seeds += list(range(int(first), int(last) + 1)) if dash else [int(first)]
    except ValueError:
      raise ConfigError(f"--seeds: {text!r} is neither a seed nor a range a-b") from None
  if len(set(seeds)) != len(seeds):
    raise ConfigError(f"--seeds: the seeds {seeds} repeat")
  return seeds


def _short(value: object) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_members(spec: str, sweep: dict[str, list[object]]) -> list[str]:
  """The method specs of a sweep's members of `spec` (one per combination of the swept values of
  the fields its loss reads, named `<name>-<field><value>...`), or [spec] when it reads none.

  Raises:
    ConfigError: a swept field of a sub-tree the loss reads that its method does not declare
      traceable (`registry.traceable_fields`), or that the spec itself sets, naming the field.
  """
  name, loss, assignments = parse_method(spec)
  trees = registry.method_trees(loss)
  mine = [field for field in sweep if field.split(".")[0] in trees]
  for field in mine:
    if field not in registry.traceable_fields(loss):
      raise ConfigError(
          f"--sweep: {field} is not a field {loss!r} declares traceable (it may vary within one "
          f"program: {list(registry.traceable_fields(loss))}); sweep it as separate --methods "
          f"variants")
    if field in assignments:
      raise ConfigError(f"--sweep: {field} is swept and also set by the method {spec!r}")
  if not mine:
    return [spec]
  _, _, rest = spec.partition("=")
  members = [(name, rest or loss)]   # (member name, `loss:assignments` of its spec)
  for field in mine:
    members = [(f"{member}-{field.split('.', 1)[1]}{_short(value)}", f"{body}:{field}={value!r}")
               for member, body in members for value in sweep[field]]
  return [f"{member}={body}" for member, body in members]


def method_config(base, spec: str, seed: int):
  """(method name, a copy of `base` with the method's loss, `seed` and config overrides): the
  sub-trees the loss reads given first (`registry.with_method_trees`: the method's defaults under
  what `base` sets), the others kept (the deferred starts of `base`'s recipe decide which
  checkpoints the run keeps)."""
  name, loss, assignments = parse_method(spec)
  config = copy.deepcopy(base)
  config.loss, config.seed, config.progress_bar = loss, seed, False
  config = registry.with_method_trees(config)
  overrides.apply_overrides(config, assignments, context=f"--methods: {name}")
  return name, config


def shares_reference(config, reference_config: dict, reference_loss: str) -> bool:
  """Whether `config`'s run equals the reference run until its start epoch: a deferred loss whose
  `before` entry is the reference's loss, starting after epoch 0, in a config that differs from the
  reference's (JSON dict) only in the loss and its sub-trees — then it may start there."""
  entry = registry.get(config.loss)
  return (entry.start is not None and entry.before == reference_loss
          and registry.start_epoch(config) > 0
          and not checkpoints.init_from_differences(reference_config,
                                                    json.loads(config.to_json_best_effort())))


def deferred_source(config, earlier: list[tuple[str, str, dict]]) -> str | None:
  """The first of the `earlier` runs, (method, loss, config JSON) in list order, that `config`'s run
  equals until its start epoch (`shares_reference`), or None."""
  return next((name for name, loss, before in earlier
               if shares_reference(config, before, loss)), None)


def run_dir(workdir: pathlib.Path, method: str, seed: int) -> pathlib.Path:
  return workdir / method.replace("+", "_") / f"seed{seed}"


class RunCounter:
  """Counts the runs of one or more `compare` calls and says where they stand: "run 3 of 12",
  the time since the first run began and, from the mean time of the runs finished so far, about how
  long the rest will take."""

  def __init__(self, total: int):
    self.total, self.done, self.began = total, 0, time.perf_counter()

  def starting(self, what: str, runs: int = 1) -> str:
    first = self.done + 1
    which = f"run {first}" if runs == 1 else f"runs {first}-{first + runs - 1}"
    line = f"{which} of {self.total}: {what}"
    elapsed = time.perf_counter() - self.began
    if self.done:
      left = elapsed / self.done * (self.total - self.done)
      line += f"  ({elapsed:.0f} s elapsed, about {left:.0f} s left)"
    return line

  def finished(self) -> None:
    self.done += 1


def finished_apart(group: list[int], dirs) -> tuple[list[int], list[int]]:
  """(the finished runs of a stacked group, the others): a run whose folder holds its summary.json
  only re-evaluates its final state, so the new members of an extended sweep stack on their own."""
  done = [i for i in group if (pathlib.Path(dirs[i]) / "summary.json").is_file()]
  return done, [i for i in group if i not in done]


def compare(base, specs, seeds, workdir: pathlib.Path, report_dir: pathlib.Path, *,
            start_deferred_from_reference: bool = True, counter: RunCounter | None = None,
            stack_seeds: bool = False, stack_by: str = "vmap",
            sweep: dict[str, list[object]] | None = None) -> str:
  """Trains every (method, seed) in `workdir` (resuming finished or partial runs) and writes the
  report; returns its Markdown. The first method is the reference (ERM).

  With `start_deferred_from_reference`, a deferred method starts at its start epoch from the first
  earlier method of the list (same seed) whose run it equals until then (`shares_reference`: its
  `before` loss, the same config but for the loss): the reference for reweighting after CE, a
  pipeline's own run for the reweighting inside it (ETF-DR, GLMC, the released recipe's views).

  With `stack_seeds`, a method's seeds train as one program (`experiments.train.seed_axis`: the
  seeds on a leading axis, the step `vmap`ped or, `stack_by='map'`, `lax.map`ped), each in the
  folder and with the files of its solo run.

  `sweep` ({'<tree>.<field>': values}, `parse_sweep`): each method that reads a swept field trains
  as one program of its members (every combination of the values × `seeds`, `sweep_members`), each
  member a run of its own in the report (`<method>-<field><value>`); a field its method does not
  declare traceable is refused before anything runs. The reference cannot be swept.

  Before each run it prints "run i of n" with the time elapsed and about how long is left
  (`RunCounter`; pass one `counter` to count over several calls)."""
  sweep = sweep or {}
  members = {spec: sweep_members(spec, sweep) for spec in specs}
  if sweep:
    if len(members[specs[0]]) > 1:
      raise ConfigError(f"--sweep: the reference {parse_method(specs[0])[0]!r} (the first method) "
                        "is not swept; it fixes the groups of every member")
    for field in sweep:
      if not any(field.split(".")[0] in registry.method_trees(parse_method(spec)[1])
                 for spec in specs):
        raise ConfigError(f"--sweep: no method of {list(specs)} reads {field}")
  every = [member for spec in specs for member in members[spec]]
  counter = counter or RunCounter(len(every) * len(seeds))
  reference_name = parse_method(specs[0])[0]
  runs, earlier = {}, []   # earlier: (method, loss, {seed: config JSON}) in list order
  for spec in every:
    schema.validate(method_config(base, spec, seeds[0])[1])  # all checked before any run
  for spec in specs:
    configs, dirs, labels, records = [], [], [], []
    for member in members[spec]:
      method = parse_method(member)[0]
      member_configs, member_records = seed_configs(base, member, seeds, workdir, earlier,
                                                    start_deferred_from_reference)
      runs[method] = [run_dir(workdir, method, seed) for seed in seeds]
      configs += member_configs
      dirs += runs[method]
      labels += [(method, seed) for seed in seeds]
      records.append((method, parse_method(member)[1], member_records))
    stacked = stack_seeds or len(members[spec]) > 1
    groups = ([list(range(len(configs)))] if len(members[spec]) > 1
              else [list(range(len(seeds)))] if stack_seeds
              else [[i] for i in range(len(seeds))])
    if stacked:  # finished runs are re-evaluated apart: a sweep extended by values trains the new
      groups = [part for group in groups for part in finished_apart(group, dirs) if part]
    for group in groups:
      names = ", ".join(f"{labels[i][0]} seed {labels[i][1]}" for i in group)
      print(counter.starting(names, len(group)), flush=True)
      began = time.perf_counter()
      if stacked:
        summaries = seed_axis.train_and_evaluate_seeds(
            [configs[i] for i in group], [dirs[i] for i in group], by=stack_by,
            sweep=[f for f in sweep if f in registry.traceable_fields(parse_method(spec)[1])])
      else:
        summaries = [loop.train_and_evaluate(configs[group[0]], dirs[group[0]])]
      for i, summary in zip(group, summaries):
        counter.finished()
        source = configs[i].init_from
        shared = (f", epochs 0-{registry.start_epoch(configs[i])} from "
                  f"{pathlib.Path(source.rsplit(':', 1)[0]).parent.name}" if source else "")
        print(f"{labels[i][0]:>22s} seed {labels[i][1]}: test accuracy "
              f"{100 * summary['overall_accuracy']:5.1f} %  ({time.perf_counter() - began:.0f} s"
              f"{' for the stacked runs' if stacked else ''}, {summary['steps']} steps"
              f"{shared})", flush=True)
    earlier += records
  return run_tables.write_report(runs, reference_name, report_dir)


def seed_configs(base, spec, seeds, workdir: pathlib.Path, earlier, start_deferred: bool):
  """(the method's config per seed, {seed: config JSON as specified}): a deferred method's config
  starts from its source run's checkpoint of the same seed (`deferred_source`) when
  `start_deferred`."""
  configs, records = [], {}
  for seed in seeds:
    _, config = method_config(base, spec, seed)
    records[seed] = json.loads(config.to_json_best_effort())
    source = deferred_source(config, [(name, loss, before[seed]) for name, loss, before in earlier])
    if start_deferred and source is not None:
      config.init_from = (f"{run_dir(workdir, source, seed).resolve()}:"
                          f"{registry.start_epoch(config)}")
    configs.append(config)
  return configs, records
