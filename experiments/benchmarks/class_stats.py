"""Benchmark: MR2 class-statistics update, segment reductions vs a one-hot product.

    python -m experiments.benchmarks.class_stats [--batch=512 --dim=2048 --classes=8142]

Prints the median wall time of each jitted variant in one run (ratios are what to compare; this
machine is noisy). The one-hot variant is the [B, K] × [B, d] formulation the issue rules out.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

import mr2_jax
from experiments.benchmarks.timing import summarize_times, time_calls
from experiments.common import cli


def one_hot_update(stats, features, labels, decay=0.9):
  """The same EMA via a dense one-hot product: O(B·K·d) work and a [K, d] intermediate."""
  num_classes = stats.num_classes
  one_hot = jax.nn.one_hot(labels, num_classes, dtype=features.dtype)
  counts = one_hot.sum(0)
  means = (one_hot.T @ features) / jnp.maximum(counts, 1.0)[:, None]
  dev = jnp.sum(jnp.square(features - (one_hot @ means)), -1)
  v = (one_hot.T @ dev) / jnp.maximum(counts, 1.0)
  a = jnp.sum(jnp.square(means), -1)
  present = counts > 0
  blend = lambda old, new: jnp.where(present, jnp.where(stats.seen, decay * old + (1 - decay) * new,
                                                        new), old)
  return mr2_jax.ClassStats(sq_mean_norm=blend(stats.sq_mean_norm, a),
                            mean_sq_deviation=blend(stats.mean_sq_deviation, v),
                            seen=stats.seen | present)


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_integer("batch", 512, "Examples per batch (B).", flag_values=flag_values)
  flags.DEFINE_integer("dim", 2048, "Feature dimension (d).", flag_values=flag_values)
  flags.DEFINE_integer("classes", 8142, "Number of classes (K).", flag_values=flag_values)
  flags.DEFINE_integer("repeats", 10, "Timed calls per variant; the median is printed.",
                       flag_values=flag_values)


def benchmark_command(args: flags.FlagValues) -> None:
  """Times both variants (after checking they agree) and prints one JSON line."""
  rng = np.random.default_rng(0)
  features = jnp.asarray(rng.normal(size=(args.batch, args.dim)), jnp.float32)
  labels = jnp.asarray(rng.integers(0, args.classes, args.batch), jnp.int32)
  stats = mr2_jax.init_class_stats(args.classes)

  segment = jax.jit(lambda s, f, y: mr2_jax.update_class_stats(s, f, y))
  dense = jax.jit(one_hot_update)
  np.testing.assert_allclose(segment(stats, features, labels).mean_sq_deviation,
                             dense(stats, features, labels).mean_sq_deviation, rtol=1e-4)
  segment_s = time_calls(lambda: segment(stats, features, labels), args.repeats)
  one_hot_s = time_calls(lambda: dense(stats, features, labels), args.repeats)
  result = {
      "batch": args.batch, "dim": args.dim, "classes": args.classes,
      "device": str(jax.devices()[0]),
      "segment_ms": summarize_times(segment_s)["median_ms"],
      "one_hot_ms": summarize_times(one_hot_s)["median_ms"],
  }
  result["one_hot_over_segment"] = result["one_hot_ms"] / result["segment_ms"]
  print(json.dumps(result))


def main(argv=None) -> int:
  return cli.run_command(define_flags, benchmark_command, argv)


if __name__ == "__main__":
  sys.exit(main())
