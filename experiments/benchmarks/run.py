"""All benchmarks in one command; writes JSON and a Markdown table per section.

    python -m experiments.benchmarks.run [--only=overhead,scaling,neural_collapse,compile,cpu_gap]
        [--out=results/benchmarks] [--quick] [--gap_variant=NAME=XLA_FLAGS ...]

Sections (every time is a median over repeated measurements with its min–max; methods compared in a
section are measured interleaved, round by round, in one run, because this machine is shared and
noisy and only ratios within a run are meaningful):

* overhead — full ResNet-32 train step (batch 128, CIFAR shapes, the trainer's own `train_step`)
  of MR2, inverse reweighting, and both, relative to plain CE.
* scaling — loss + class-statistics update, forward and backward, for B = 512, K ∈ {10, 100, 1000,
  8142}, d ∈ {64, 512, 2048}, plus the sizes at which the authors' PyTorch losses were timed.
  Two timings: per call of the jitted function (what a user calling it sees, dispatch included) and
  per iteration of a compiled `fori_loop` (the marginal cost inside a train step).
* neural_collapse — NC1–NC4 on 50,000 × 640 features, 100 classes: one-shot `nc_metrics` vs the
  streaming `NCAccumulator` (chunks of 1,000); time and peak resident memory, each in its own process.
* compile — trace + lower, XLA compile, and first-step times of the train step per method; how many
  steady-state steps the start-up is worth.
* cpu_gap — plain-CE ResNet-32 step (batch 128, SGD + momentum): JAX with XLA's default flags, JAX with
  `experiments.common.xla_cpu.TUNED_FLAGS`, and PyTorch eager (optional dependency: `pip install ".[bench]"`),
  each in its own long-lived worker process, interleaved round by round; plus an XLA op profile of the
  two JAX variants (where the time goes).
* ablations — the two library choices behind the scaling numbers, each against its alternative in
  the same run: a jitted function with and without one (unused) `checkify.check`, and the MR2 loss
  with ℓ_s̄ tiled over same-class pairs vs forced to the dense [B, B] product.
* against — the scaling section's losses, per call and per loop iteration, at every one of its
  sizes, for other versions of the libraries side by side with this checkout's (`--against
  LABEL=TREE`, a source tree such as `git worktree add /tmp/v0 <commit>`; name a tree twice to see
  the run's noise), each in its own worker process, interleaved round by round.

The XLA flags of this process (and of the overhead / scaling / compile sections) are the tuned ones
unless `--noxla_cpu_tuning`.

The sections live in modules named after what they time: `resnet_step` (overhead, compile),
`loss_scaling`, `released_form`, `ablations`, `neural_collapse` and `cpu_gap`; `timing` and
`machine` hold what they share, `tables` the Markdown. This module is the command line.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

from absl import flags

from experiments.benchmarks.ablations import bench_ablations
from experiments.benchmarks.cpu_gap import bench_cpu_gap
from experiments.benchmarks.loss_against import bench_against
from experiments.benchmarks.loss_scaling import bench_scaling
from experiments.benchmarks.machine import machine_info
from experiments.benchmarks.neural_collapse import bench_neural_collapse
from experiments.benchmarks.released_form import bench_released_form
from experiments.benchmarks.resnet_step import bench_compile_and_overhead
from experiments.benchmarks.tables import to_markdown
from experiments.benchmarks.timing import REPO
from experiments.common import cli
from experiments.common import xla_cpu

SECTIONS = ("overhead", "scaling", "released_form", "neural_collapse", "compile", "cpu_gap",
            "ablations", "against")


def define_flags(flag_values: flags.FlagValues) -> None:
  cli.define_list("only", SECTIONS, "The sections to run.", choices=SECTIONS,
                  flag_values=flag_values)
  flags.DEFINE_string("out", str(REPO / "results" / "benchmarks"),
                      "Folder for benchmarks_<tag>.{json,md}.", flag_values=flag_values)
  flags.DEFINE_bool("quick", False, "Fewer sizes and repeats (smoke test).",
                    flag_values=flag_values)
  cli.define_xla_cpu_tuning(flag_values)
  flags.DEFINE_multi_string("gap_variant", [], "cpu_gap: another JAX worker, NAME=XLA_FLAGS, with "
                            "these XLA_FLAGS (repeat the flag for more)", flag_values=flag_values)
  flags.DEFINE_string("tag", None, "Output file suffix (default: quick / full).",
                      flag_values=flag_values)
  flags.DEFINE_multi_string("against", [], "against: a version of the libraries, LABEL=TREE (a "
                            "folder holding mr2_jax, reweight_jax and mr2_reweight_core); repeat "
                            "for more. This checkout is timed after them.", flag_values=flag_values)
  flags.DEFINE_multi_string("against_size", [], "against: a size B,d,K to time (repeat for more); "
                            "default every size of the loss benchmark.", flag_values=flag_values)
  flags.DEFINE_integer("against_rounds", None, "against: calls per version and loss (default 200; "
                       "20 with --quick).", flag_values=flag_values)
  flags.DEFINE_integer("against_loop_rounds", None, "against: compiled loops per version and loss "
                       "(default 20; 5 with --quick; 0: calls only).", flag_values=flag_values)


def benchmarks_command(args: flags.FlagValues) -> None:
  """Runs the chosen sections; writes their JSON and Markdown and prints the Markdown."""
  sections = args.only
  xla_cpu.configure(args.xla_cpu_tuning)
  results: dict[str, Any] = {"machine": machine_info(),
                             "command": "python -m experiments.benchmarks.run " + " ".join(
                                 sys.argv[1:])}
  if "overhead" in sections or "compile" in sections:
    print("overhead / compile: ResNet-32 train steps ...", flush=True)
    overhead, compile_rows = bench_compile_and_overhead(args.quick)
    if "overhead" in sections:
      results["overhead"] = overhead
    if "compile" in sections:
      results["compile"] = compile_rows
  if "scaling" in sections:
    print("scaling ...", flush=True)
    results["scaling"] = bench_scaling(args.quick)
  if "released_form" in sections:
    print("released_form ...", flush=True)
    results["released_form"] = bench_released_form(args.quick)
  if "neural_collapse" in sections:
    print("neural_collapse ...", flush=True)
    results["neural_collapse"] = bench_neural_collapse(args.quick)
  if "ablations" in sections:
    print("ablations ...", flush=True)
    results["ablations"] = bench_ablations(args.quick)
  if "against" in sections and args.against:
    print("against ...", flush=True)
    versions = dict(v.split("=", 1) for v in args.against)
    versions["this checkout"] = str(REPO)
    sizes = [tuple(int(x) for x in size.split(",")) for size in args.against_size] or None
    results["against"] = bench_against(versions, quick=args.quick, sizes=sizes,
                                       rounds=args.against_rounds,
                                       loop_rounds=args.against_loop_rounds)
  if "cpu_gap" in sections:
    print("cpu_gap ...", flush=True)
    extra = dict(v.split("=", 1) for v in args.gap_variant)
    results["cpu_gap"] = bench_cpu_gap(args.quick, extra)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  tag = args.tag or ("quick" if args.quick else "full")
  (out / f"benchmarks_{tag}.json").write_text(json.dumps(results, indent=2) + "\n")
  markdown = to_markdown(results)
  (out / f"benchmarks_{tag}.md").write_text(markdown + "\n")
  print(markdown)


def main(argv=None) -> int:
  return cli.run_command(define_flags, benchmarks_command, argv)


if __name__ == "__main__":
  sys.exit(main())
