"""Where the time of one MR2 loss + statistics step goes (forward + backward), on this machine.

    python -m experiments.benchmarks.mr2_step_profile --batch=512 --dim=2048 --classes=8142 \
        [--trace]

Times, interleaved round by round: the step with λ = 0.1 and λ = 0 (the difference is ℓ_s̄) in the
released and paper forms, and ℓ_s̄ alone (forward; forward + backward). `--trace` also records a
profiler trace of the released step and prints the XLA operations that take the most time (op names
as in the compiled HLO, which `--hlo=FILE` writes). Diagnostic only: the figures of record come from
`experiments.benchmarks.run`.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import sys
import tempfile

import jax
import jax.numpy as jnp
from absl import flags

import mr2_jax
from experiments.benchmarks import loss_scaling
from experiments.benchmarks.timing import interleaved, summarize_times
from experiments.common import cli
from mr2_jax import representation_margin


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_integer("batch", 512, "Examples per batch (B).", flag_values=flag_values)
  flags.DEFINE_integer("dim", 2048, "Feature dimension (d).", flag_values=flag_values)
  flags.DEFINE_integer("classes", 1000, "Number of classes (K).", flag_values=flag_values)
  flags.DEFINE_integer("rounds", 7, "Interleaved rounds of 10 calls per variant.",
                       flag_values=flag_values)
  flags.DEFINE_bool("trace", False, "Also record a profiler trace of the released step and print "
                    "the XLA operations that take the most time.", flag_values=flag_values)
  flags.DEFINE_string("hlo", None, "Write the released step's compiled HLO to this file.",
                      flag_values=flag_values)


def profile_command(args: flags.FlagValues) -> None:
  """Prints the interleaved timings (and, with --trace, the profile) of one MR2 step."""
  batch, dim, classes = args.batch, args.dim, args.classes

  # the benchmark's inputs
  logits, features, labels = loss_scaling.benchmark_batch(batch, dim, classes)
  stats = mr2_jax.init_class_stats(classes)

  def step(form, lam):
    def run(stats, logits, features, labels):
      def loss(z, x):
        value, new_stats, _ = mr2_jax.mr2_loss(z, x, labels, stats, form=form, lam=lam)
        return value, new_stats
      (value, new_stats), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
          logits, features)
      return value, new_stats, grads
    return jax.jit(run)

  def margin(x, labels):
    return jnp.sum(representation_margin.representation_margin_loss(
        x, labels, 1.0, temperature=10.0 * dim))

  calls = {
      # labels are arguments: closed over, XLA would fold ℓ_s̄'s run-time branch choice
      "released, λ = 0.1": (step("released", 0.1), (stats, logits, features, labels)),
      "released, λ = 0": (step("released", 0.0), (stats, logits, features, labels)),
      "paper, λ = 0.1": (step("paper", 0.1), (stats, logits, features, labels)),
      "ℓ_s̄ forward": (jax.jit(margin), (features, labels)),
      "ℓ_s̄ forward + backward": (jax.jit(jax.grad(margin)), (features, labels)),
  }
  # latency: each call waits for the previous one
  times = interleaved({name: (lambda fn=fn, fn_args=fn_args: fn(*fn_args))
                       for name, (fn, fn_args) in calls.items()}, args.rounds, 10, warmup=1)
  print(f"B={batch} d={dim} K={classes}, ms per call, median (min):")
  for name, seconds in times.items():
    row = summarize_times(seconds)
    print(f"  {name:26s} {row['median_ms']:7.2f} ({row['min_ms']:.2f})")

  released, released_args = calls["released, λ = 0.1"]
  if args.hlo:
    with open(args.hlo, "w") as f:
      f.write(released.lower(*released_args).compile().as_text())
  if args.trace:
    with tempfile.TemporaryDirectory() as trace_dir:
      with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(20):
          jax.block_until_ready(released(*released_args))
      (path,) = glob.glob(trace_dir + "/**/*.trace.json.gz", recursive=True)
      with gzip.open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    total = collections.Counter()
    for event in events:
      if event.get("ph") == "X" and "dur" in event:
        total[event["name"]] += event["dur"] / 20 / 1000
    print("released step, profiler trace, ms per step by event (nested events overlap):")
    for name, ms in total.most_common(45):
      print(f"  {ms:8.3f}  {name[:100]}")


def main(argv=None) -> int:
  return cli.run_command(define_flags, profile_command, argv)


if __name__ == "__main__":
  sys.exit(main())
