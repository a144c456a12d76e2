"""Section 'against' of `experiments.benchmarks.run`: the loss benchmark of `loss_scaling` (the same
jitted loss + statistics, forward and backward, on the same batch, at every size of its 'scaling'
section) timed for several versions of the libraries side by side, so that a change is measured
against the code before it in one run.

A version is a source tree that holds `mr2_jax`, `reweight_jax` and `mr2_reweight_core`: this
checkout, or a `git worktree add /tmp/v0 <commit>` of an earlier one. Every version is imported into
this one process (`import_version`: its packages are imported from its tree, then taken out of
`sys.modules` again, so that the next tree's are imported afresh; each keeps its own modules), and
its functions are built by `loss_scaling._loss_fns` on the same batch. The calls alternate version
by version: each round calls every version's compiled function once, in an order that reverses from
round to round, so that two versions' calls are made a fraction of a millisecond apart, by the same
threads. (Versions in separate worker processes, interleaved in turns, were tried first: on this
2-core machine a version ran up to 1.2× slower interleaved than alone or in one process, whichever
it was, so that the ratios measured the processes, not the code.)

Each loss is timed per call of its jitted function (dispatch included) and per iteration of its
compiled loop (`_loss_fns`; inputs not hoisted). A version's time is the median over its calls; its
ratio to the first version is given of the medians, as the median of the calls' paired ratios
(each call over the first version's call of the same round), and of the 10th percentiles. Each
version's call floor (`timing.call_floor`: a compiled function of the same arrays in and out that
computes nothing) is timed in rounds of its own, right after the calls, so that a call's time above
it, the loss's own work, can be told from dispatch. (Until 2026-12-06 the floors were alternated in
the same rounds as the calls; the last version, called next to them, then followed a call that
computes nothing and read up to 1.2× slower on calls of 0.1 ms than the same code placed
elsewhere.) Each size also records the share of CPU time stolen and the load average while it was
timed; a tree named twice measures the noise of the run.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys
import time
import types

import jax
import numpy as np

from experiments.benchmarks.loss_scaling import SIZES
from experiments.benchmarks.loss_scaling import _loss_fns
from experiments.benchmarks.timing import call_floor
from experiments.benchmarks.timing import cpu_ticks
from experiments.benchmarks.timing import steal_share
from experiments.benchmarks.timing import summarize_times
from experiments.benchmarks.timing import warm_up

LIBRARIES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
LOOP = 10  # iterations of the compiled loop (`_loss_fns`' looped call)


def _is_library(module: str) -> bool:
  return module.split(".")[0] in LIBRARIES


def import_version(tree: str | os.PathLike) -> dict[str, types.ModuleType]:
  """{'mr2_jax': …, 'reweight_jax': …} imported from `tree`; `sys.modules` is left as it was (the
  version's modules live on in the functions that use them)."""
  tree = pathlib.Path(tree).resolve()
  for name in LIBRARIES:
    if not (tree / name / "__init__.py").exists():
      raise FileNotFoundError(f"versions: {tree} holds no package {name}.")
  saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_library(name)}
  sys.path.insert(0, str(tree))
  try:
    libraries = {name: importlib.import_module(name) for name in ("mr2_jax", "reweight_jax")}
    imported = {name: module for name, module in sys.modules.items() if _is_library(name)}
  finally:
    sys.path.remove(str(tree))
    for name in list(sys.modules):
      if _is_library(name):
        del sys.modules[name]
    sys.modules.update(saved)
  for name, module in imported.items():
    path = pathlib.Path(getattr(module, "__file__", None) or tree).resolve()
    if tree not in path.parents:
      raise RuntimeError(f"versions: {name} of {tree} was imported from {path}.")
  return libraries


def _commit(tree: pathlib.Path) -> str:
  """A tree's HEAD commit, '+changes' when its libraries differ from it."""
  def git(*args):
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout
  head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
  return head + ("+changes" if git("status", "--porcelain", "--", *LIBRARIES).strip() else "")


def _alternated(calls: list, rounds: int) -> list[list[float]]:
  """Seconds of each call, `rounds` times, one call of each per round, the order reversed every
  other round."""
  seconds = [[] for _ in calls]
  for r in range(rounds):
    for i in (range(len(calls)) if r % 2 == 0 else reversed(range(len(calls)))):
      start = time.perf_counter()
      jax.block_until_ready(calls[i]())
      seconds[i].append(time.perf_counter() - start)
  return seconds


def _timed(seconds: list[float], first: list[float]) -> dict:
  ratios = np.asarray(seconds) / np.asarray(first)
  return {**summarize_times(seconds), "p10_ms": float(1e3 * np.percentile(seconds, 10)),
          "paired_ratio_median": float(np.median(ratios)),
          "paired_ratio_p25_p75": [float(np.percentile(ratios, 25)),
                                   float(np.percentile(ratios, 75))]}


def bench_against(versions: dict[str, str], *, quick: bool = False, sizes=None,
                  rounds: int | None = None, loop_rounds: int | None = None) -> dict:
  """Every size's losses for each version {label: source tree}, alternated call by call; the first
  version is the reference of the ratios. `loop_rounds` 0 times calls only."""
  if sizes is None:
    sizes = [(128, 64, 10), (512, 2048, 1000)] if quick else SIZES
  rounds = rounds or (20 if quick else 200)
  loop_rounds = (5 if quick else 20) if loop_rounds is None else loop_rounds
  trees = {label: pathlib.Path(tree).resolve() for label, tree in versions.items()}
  libraries = {label: import_version(tree) for label, tree in trees.items()}
  labels = list(versions)
  rows = []
  for batch, dim, classes in sizes:
    built = {label: _loss_fns(batch, dim, classes, LOOP, mr2_lib=lib["mr2_jax"],
                              reweight_lib=lib["reweight_jax"])[0]
             for label, lib in libraries.items()}
    for name in built[labels[0]]:
      calls, floors, loops, values = [], [], [], []
      for label in labels:
        fn, args, looped = built[label][name]
        compiled = fn.lower(*args).compile()
        calls.append(lambda compiled=compiled, args=args: compiled(*args))
        floor = call_floor(fn, args)
        floors.append(lambda floor=floor, args=args: floor(*args))
        loops.append(looped)
        value, _, grads = calls[-1]()
        values.append([float(value)] + [float(np.sum(np.abs(g))) for g in jax.tree.leaves(grads)])
      warm_up(calls + floors, 3)
      ticks, load = cpu_ticks(), os.getloadavg()[0]
      # The floors are alternated apart from the calls: in one list the version next to them
      # followed a call that computes nothing and read up to 1.2× slower on calls of 0.1 ms than
      # the same code elsewhere in the list.
      per_call = _alternated(calls, rounds)
      per_floor = _alternated(floors, rounds)
      in_loop = []
      if loop_rounds:
        warm_up(loops, 2)
        in_loop = [[t / LOOP for t in s] for s in _alternated(loops, loop_rounds)]
      row = {"loss": name, "batch": batch, "dim": dim, "classes": classes, "versions": {},
             "steal_share": steal_share(ticks), "load_average": [load, os.getloadavg()[0]]}
      for i, label in enumerate(labels):
        row["versions"][label] = {
            "per_call": _timed(per_call[i], per_call[0]),
            "floor": _timed(per_floor[i], per_floor[0]), "values": values[i],
            "max_relative_difference": max(abs(a - b) / max(abs(b), 1e-30)
                                           for a, b in zip(values[i], values[0]))}
        if in_loop:
          row["versions"][label]["in_loop"] = _timed(in_loop[i], in_loop[0])
      rows.append(row)
      print(f"  against {name:16s} B={batch} d={dim} K={classes}: " + ", ".join(
          f"{label} {row['versions'][label]['per_call']['median_ms']:.3f}" for label in labels)
          + " ms per call", flush=True)
  return {"versions": {label: {"tree": str(tree), "commit": _commit(tree)}
                       for label, tree in trees.items()},
          "rounds": rounds, "loop_rounds": loop_rounds, "loop_iterations": LOOP, "rows": rows}
