"""Comparing methods on one recipe and seeds: method specs, the runs, the report (no flags: the
CLI is `experiments.compare`, the main job `experiments.demo`)."""

from __future__ import annotations

import copy
import json
import pathlib
import time

from experiments.train import checkpoints
from experiments.report import run_tables
from experiments import losses
from experiments.train import loop
from experiments.common import overrides
from experiments.common.errors import ConfigError
from experiments.configs import default


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


def method_config(base, spec: str, seed: int):
  """(method name, a copy of `base` with the method's loss, `seed` and config overrides)."""
  name, loss, assignments = parse_method(spec)
  config = copy.deepcopy(base)
  config.loss, config.seed, config.progress_bar = loss, seed, False
  overrides.apply_overrides(config, assignments, context=f"--methods: {name}")
  return name, config


def shares_reference(config, reference_config: dict, reference_loss: str) -> bool:
  """Whether `config`'s run equals the reference run until its start epoch: a deferred loss whose
  `before` entry is the reference's loss, starting after epoch 0, in a config that differs from the
  reference's (JSON dict) only in the loss and its sub-trees — then it may start there."""
  entry = losses.get(config.loss)
  return (entry.start is not None and entry.before == reference_loss
          and losses.start_epoch(config) > 0
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

  def starting(self, what: str) -> str:
    line = f"run {self.done + 1} of {self.total}: {what}"
    elapsed = time.perf_counter() - self.began
    if self.done:
      left = elapsed / self.done * (self.total - self.done)
      line += f"  ({elapsed:.0f} s elapsed, about {left:.0f} s left)"
    return line

  def finished(self) -> None:
    self.done += 1


def compare(base, specs, seeds, workdir: pathlib.Path, report_dir: pathlib.Path, *,
            start_deferred_from_reference: bool = True, counter: RunCounter | None = None) -> str:
  """Trains every (method, seed) in `workdir` (resuming finished or partial runs) and writes the
  report; returns its Markdown. The first method is the reference (ERM).

  With `start_deferred_from_reference`, a deferred method starts at its start epoch from the first
  earlier method of the list (same seed) whose run it equals until then (`shares_reference`: its
  `before` loss, the same config but for the loss): the reference for reweighting after CE, a
  pipeline's own run for the reweighting inside it (ETF-DR, GLMC, the released recipe's views).

  Before each run it prints "run i of n" with the time elapsed and about how long is left
  (`RunCounter`; pass one `counter` to count over several calls)."""
  counter = counter or RunCounter(len(specs) * len(seeds))
  reference_name = parse_method(specs[0])[0]
  runs, earlier = {}, []   # earlier: (method, loss, {seed: config JSON}) in list order
  for spec in specs:
    default.validate(method_config(base, spec, seeds[0])[1])  # all checked before any run
  for spec in specs:
    method = parse_method(spec)[0]
    runs[method], configs = [], {}
    for seed in seeds:
      _, config = method_config(base, spec, seed)
      configs[seed] = json.loads(config.to_json_best_effort())
      start = losses.start_epoch(config)
      source = deferred_source(config, [(name, loss, before[seed])
                                        for name, loss, before in earlier])
      if start_deferred_from_reference and source is not None:
        config.init_from = f"{run_dir(workdir, source, seed).resolve()}:{start}"
      print(counter.starting(f"{method}, seed {seed}"), flush=True)
      began = time.perf_counter()
      summary = loop.train_and_evaluate(config, run_dir(workdir, method, seed))
      counter.finished()
      shared = f", epochs 0-{start} from {source}" if config.init_from else ""
      print(f"{method:>22s} seed {seed}: test accuracy {100 * summary['overall_accuracy']:5.1f} %"
            f"  ({time.perf_counter() - began:.0f} s, {summary['steps']} steps{shared})",
            flush=True)
      runs[method].append(run_dir(workdir, method, seed))
    earlier.append((method, parse_method(spec)[1], configs))
  return run_tables.write_report(runs, reference_name, report_dir)
