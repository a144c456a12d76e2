"""Section 'against' of `experiments.benchmarks.run`: the loss benchmark of `loss_scaling` (the same
jitted loss + statistics, forward and backward, on the same batch, at every size of its 'scaling'
section) timed for several versions of the libraries side by side, so that a change is measured
against the code before it in one run.

A version is a source tree that holds `mr2_jax`, `reweight_jax` and `mr2_reweight_core`: this
checkout, or a `git worktree add /tmp/v0 <commit>` of an earlier one. Each runs in its own
long-lived worker process, which imports the libraries from its tree (a folder of links to them is
its working directory, hence first on `sys.path`) and this checkout's benchmark code (on
`PYTHONPATH`), so every version times the same functions. At each size every version is compiled
first, then the versions are timed interleaved, round by round, with their order rotated every
round, so that a drift of this shared machine's speed falls on all of them alike. Each loss is timed
per call of its jitted function (dispatch included) and per iteration of its compiled loop
(`_loss_fns`; inputs not hoisted). A version's time is the median over all its calls; its ratio to
the first version is given of the medians and per round (the round's median over the first
version's, min–max over the rounds). Each size also records the share of CPU time stolen and the
load average while it was timed; a tree named twice measures the noise of the run.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import jax
import numpy as np
from absl import flags

import mr2_jax  # in a worker, the version's (see the module docstring)
from experiments.benchmarks.loss_scaling import SIZES
from experiments.benchmarks.loss_scaling import _loss_fns
from experiments.benchmarks.timing import REPO
from experiments.benchmarks.timing import cpu_ticks
from experiments.benchmarks.timing import steal_share
from experiments.benchmarks.timing import summarize_times
from experiments.benchmarks.timing import time_calls
from experiments.benchmarks.timing import warm_up
from experiments.common import cli

LIBRARIES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
LOOP = 10  # iterations of the compiled loop (`_loss_fns`' looped call)


def against_worker() -> None:
  """A worker: answers `size B d K`, `call NAME N`, `loop NAME N` and `quit` on stdin with one
  JSON line each (`bench_against` starts it)."""
  # The tree this process imported (through its working directory's links; `bench_against` checks).
  print(json.dumps({"ready": str(pathlib.Path(mr2_jax.__file__).resolve().parents[1])}), flush=True)
  fns, warm = {}, set()
  for line in sys.stdin:
    command = line.split()
    if not command or command[0] == "quit":
      break
    if command[0] == "size":
      batch, dim, classes = map(int, command[1:])
      fns, warm, values = {}, set(), {}
      for name, (fn, args, looped) in _loss_fns(batch, dim, classes, LOOP)[0].items():
        compiled = fn.lower(*args).compile()
        fns[name, "call"] = lambda compiled=compiled, args=args: compiled(*args)
        fns[name, "loop"] = looped
        value, _, grads = fns[name, "call"]()
        values[name] = [float(value)] + [float(np.sum(np.abs(g))) for g in jax.tree.leaves(grads)]
      print(json.dumps({"values": values}), flush=True)
      continue
    key = command[1], command[0]
    if key not in warm:  # compiled (the loop) and run once before its first timed call
      warm_up([fns[key]], calls=2)
      warm.add(key)
    print(json.dumps({"times": time_calls(fns[key], int(command[2]), warmup=0)}), flush=True)


def _library_links(tree: pathlib.Path, into: pathlib.Path) -> pathlib.Path:
  """A folder of links to `tree`'s three packages: a worker's working directory."""
  into.mkdir()
  for name in LIBRARIES:
    if not (tree / name / "__init__.py").exists():
      raise FileNotFoundError(f"versions: {tree} holds no package {name}.")
    (into / name).symlink_to(tree / name, target_is_directory=True)
  return into


def _commit(tree: pathlib.Path) -> str:
  """`git describe`-like label of a tree: its HEAD commit, '+changes' when the libraries differ."""
  def git(*args):
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout
  head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
  return head + ("+changes" if git("status", "--porcelain", "--", *LIBRARIES).strip() else "")


def _summary(seconds: list[float]) -> dict[str, float]:
  """`summarize_times` and the 10th percentile: on this shared machine the low end of the calls
  moves less with the other jobs' load than the median does."""
  return {**summarize_times(seconds), "p10_ms": float(1e3 * np.percentile(seconds, 10))}


def _round_ratios(times: list[float], reference: list[float], rounds: int) -> list[float]:
  per_round = len(times) // rounds
  return [float(np.median(times[r * per_round:(r + 1) * per_round])
                / np.median(reference[r * per_round:(r + 1) * per_round])) for r in range(rounds)]


def bench_against(versions: dict[str, str], *, quick: bool = False, sizes=None,
                  rounds: int | None = None, per_round: int = 5, loop_per_round: int = 1) -> dict:
  """Every size's losses for each version {label: source tree}, interleaved; the first version is
  the reference of the ratios. Many short rounds: a round's ratio pairs calls made close in time.
  `loop_per_round` 0 times calls only."""
  if sizes is None:
    sizes = [(128, 64, 10), (512, 2048, 1000)] if quick else SIZES
  rounds = rounds or (3 if quick else 20)
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  workers, trees = {}, {}
  with tempfile.TemporaryDirectory() as links:
    for i, (label, tree) in enumerate(versions.items()):
      tree = pathlib.Path(tree).resolve()
      cwd = _library_links(tree, pathlib.Path(links) / str(i))
      workers[label] = subprocess.Popen(
          [sys.executable, "-m", "experiments.benchmarks.loss_against", "--against_worker"],
          cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
      imported = json.loads(workers[label].stdout.readline())["ready"]
      if pathlib.Path(imported) != tree:
        raise RuntimeError(f"versions: {label}'s worker imported the libraries from {imported}.")
      trees[label] = {"tree": str(tree), "commit": _commit(tree)}

    def ask(label, command):
      workers[label].stdin.write(command + "\n")
      workers[label].stdin.flush()
      return json.loads(workers[label].stdout.readline())

    labels = list(versions)
    rows = []
    for batch, dim, classes in sizes:
      values = {label: ask(label, f"size {batch} {dim} {classes}")["values"] for label in labels}
      names = list(values[labels[0]])
      calls = {(label, name): [] for label in labels for name in names}
      loops = {(label, name): [] for label in labels for name in names}
      ticks, load = cpu_ticks(), os.getloadavg()[0]
      for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
          for name in names:
            calls[label, name] += ask(label, f"call {name} {per_round}")["times"]
            if loop_per_round:
              loops[label, name] += [t / LOOP for t in
                                     ask(label, f"loop {name} {loop_per_round}")["times"]]
      noise = {"steal_share": steal_share(ticks), "load_average": [load, os.getloadavg()[0]]}
      for name in names:
        row = {"loss": name, "batch": batch, "dim": dim, "classes": classes, "versions": {}, **noise}
        for label in labels:
          reference = values[labels[0]][name]
          row["versions"][label] = {
              "per_call": _summary(calls[label, name]),
              "per_call_round_ratios": _round_ratios(calls[label, name], calls[labels[0], name],
                                                     rounds),
              "values": values[label][name],
              "max_relative_difference": max(
                  abs(a - b) / max(abs(b), 1e-30) for a, b in zip(values[label][name], reference))}
          if loop_per_round:
            row["versions"][label].update(
                in_loop=_summary(loops[label, name]),
                in_loop_round_ratios=_round_ratios(loops[label, name], loops[labels[0], name],
                                                   rounds))
        rows.append(row)
        print(f"  against {name:16s} B={batch} d={dim} K={classes}: " + ", ".join(
            f"{label} {row['versions'][label]['per_call']['median_ms']:.3f}"
            for label in labels) + " ms per call", flush=True)
    for worker in workers.values():
      worker.stdin.write("quit\n")
      worker.stdin.flush()
      worker.wait(timeout=60)
  return {"versions": trees, "rounds": rounds, "per_round": per_round,
          "loop_per_round": loop_per_round, "loop_iterations": LOOP, "rows": rows}


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_bool("against_worker", False, "Run as a worker of `bench_against` (stdin/stdout).",
                    flag_values=flag_values)


def main(argv=None) -> int:
  """A worker process of the 'against' section."""
  return cli.run_command(define_flags, lambda args: against_worker(), argv)


if __name__ == "__main__":
  sys.exit(main())
