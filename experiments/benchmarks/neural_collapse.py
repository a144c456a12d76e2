"""Section 'neural_collapse' of `experiments.benchmarks.run`: NC1–NC4 on 50,000 × 640 features,
100 classes — one-shot `reweight_jax.nc_metrics` vs the streaming `NCAccumulator` (chunks of
1,000) — time and peak resident memory, each in its own child process
(`python -m experiments.benchmarks.neural_collapse --nc_child=MODE`, which loads only this module's
imports)."""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

import reweight_jax
from experiments.benchmarks.timing import REPO, summarize_times
from experiments.common import cli
from experiments.common import xla_cpu

NC_N, NC_D, NC_K, NC_CHUNK = 50_000, 640, 100, 1_000


def _nc_chunks(seed: int = 0):
  """The same 50,000 × 640 features in chunks of 1,000, generated on the fly."""
  means = np.random.default_rng(seed).normal(size=(NC_K, NC_D)).astype(np.float32)
  for start in range(0, NC_N, NC_CHUNK):
    rng = np.random.default_rng([seed, start])
    labels = rng.integers(0, NC_K, NC_CHUNK).astype(np.int32)
    yield (means[labels] + rng.normal(size=(NC_CHUNK, NC_D)).astype(np.float32)), labels


def nc_child(mode: str) -> dict:
  classifier = jnp.asarray(np.random.default_rng(1).normal(size=(NC_K, NC_D)), jnp.float32)
  jnp.zeros(1).block_until_ready()
  baseline_mb = _peak_rss_mb()
  start = time.perf_counter()
  if mode == "one_shot":
    features, labels = map(np.concatenate, zip(*_nc_chunks()))
    metrics = reweight_jax.nc_metrics(jnp.asarray(features), jnp.asarray(labels), classifier)
  else:
    update = jax.jit(lambda acc, h, y: acc.update(h, y))
    update_ncc = jax.jit(lambda acc, h: acc.update_ncc(h, classifier))
    acc = reweight_jax.NCAccumulator.init(NC_K, NC_D)
    for h, y in _nc_chunks():
      acc = update(acc, h, y)
    for h, _ in _nc_chunks():
      acc = update_ncc(acc, h)
    metrics = acc.finalize(classifier)
  values = {k: float(v) for k, v in metrics._asdict().items()}
  elapsed = time.perf_counter() - start
  return {"mode": mode, "seconds": elapsed, "baseline_peak_mb": baseline_mb,
          "peak_mb": _peak_rss_mb(), "metrics": values}


def _peak_rss_mb() -> float:
  """This process's peak resident memory since exec (VmHWM; getrusage of a child would include the
  parent's resident pages at fork)."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith("VmHWM:"):
      return int(line.split()[1]) / 1024
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_neural_collapse(quick: bool) -> dict:
  rows = {}
  repeats = 1 if quick else 3
  for _ in range(repeats):
    for mode in ("one_shot", "streaming"):
      out = subprocess.run(
          [sys.executable, "-m", "experiments.benchmarks.neural_collapse", f"--nc_child={mode}"],
          cwd=REPO, capture_output=True, text=True, check=True,
          env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
      result = json.loads(out.strip().splitlines()[-1])
      result["added_peak_mb"] = result["peak_mb"] - result["baseline_peak_mb"]
      rows.setdefault(mode, []).append(result)
  summary = {}
  for mode, results in rows.items():
    summary[mode] = {**summarize_times([r["seconds"] for r in results]),
                     "added_peak_mb": max(r["added_peak_mb"] for r in results),
                     "peak_mb": max(r["peak_mb"] for r in results),
                     "metrics": results[0]["metrics"]}
  one, stream = summary["one_shot"]["metrics"], summary["streaming"]["metrics"]
  summary["max_relative_difference"] = max(
      abs(one[k] - stream[k]) / max(abs(one[k]), 1e-12) for k in one)
  return {"examples": NC_N, "dim": NC_D, "classes": NC_K, "chunk": NC_CHUNK, "rows": summary,
          "features_mb": NC_N * NC_D * 4 / 2**20}


def run_child(mode: str, xla_cpu_tuning: bool = True) -> None:
  """One child process of `bench_neural_collapse`: XLA's flags, then `nc_child` as a JSON line."""
  xla_cpu.configure(xla_cpu_tuning)
  print(json.dumps(nc_child(mode)))


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_enum("nc_child", None, ("one_shot", "streaming"), "How this child computes NC1–NC4 "
                    "(it prints the time, peak memory and metrics as one JSON line).",
                    required=True, flag_values=flag_values)
  cli.define_xla_cpu_tuning(flag_values)


def main(argv=None) -> int:
  """A child process of the neural_collapse benchmark."""
  return cli.run_command(define_flags, lambda args: run_child(args.nc_child, args.xla_cpu_tuning),
                         argv)


if __name__ == "__main__":
  sys.exit(main())
