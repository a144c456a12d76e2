"""MR2's comparison methods on the frozen-feature probe (COMPARISONS spec; MR2 spec, 'Evaluation').

ERM, MR2 (ℓ_γ,ce: on frozen features ℓ_s̄ has no parameter to act on), focal, LDAM, class-level
Group DRO, FairDRO, EQL, JTT and LfF, each on a linear head over the cached EfficientNet-Lite0
features of balanced CIFAR-10 (the linear probe's features, head, optimiser and recipe:
`experiments.probe.features`, `experiments.probe.linear_head` — lr 0.01, 30 epochs, batch 256, SGD
momentum 0.9, cosine). SupCon's loss acts on the encoder, which a linear probe does not train (with
the encoder frozen, SupCon's joint form gives the linear classifier exactly ERM's gradient and its
two-stage form trains the classifier by ERM), so it runs in a second setting, 'adapter'
(`experiments.probe.adapter`): a trainable MLP adapter (1280 → 256, ReLU) under the linear
classifier, two views per image (the image and its horizontal flip, both through the frozen
backbone: `python -m experiments.studies.linear_probe features --splits=train-flip`),
cross-entropy on both views, and the joint objective CE + λ·SupCon on the adapter's features
through SupCon's projection head (`mr2_jax.SupConProjection`, τ = 0.1, τ_b = 0.07); its paired
reference is ERM on the same adapter and views (`erm_adapter`, λ = 0).

    python -m experiments.studies.probe_comparison tune  --out=results/probe_comparison
    python -m experiments.studies.probe_comparison study --out=results/probe_comparison
    python -m experiments.studies.probe_comparison report --out=results/probe_comparison

`tune` trains every candidate of each method's grid (`METHODS` in
`experiments.studies.probe_comparison_methods`, beside the training of one run and the tuning) on
a stratified 90 % of the training set with seeds 0 and 1 and scores it on the held-out 10 % (never
on test): the highest mean worst-class validation accuracy wins (ties: mean per-class validation
accuracy); `selection.json` records every candidate's scores and the choice. `study` trains each
method with its chosen hyper-parameters on the full training set for every seed and writes
`runs/<method>-seed<s>.json` (per-class test accuracy, the hyper-parameters, method-specific
state), `results.json`, `tables.md` (mean ± sample std over seeds; paired Δ vs ERM with seeds
ahead; Easy / Medium / Hard fixed from ERM's mean per-class test accuracy), `per_class.png` and
`tradeoff.png` (Hard-class Δ against Easy-class Δ per method); `report` rebuilds the last four from
`runs/` without training (`experiments.studies.probe_comparison_report`).

Methods with a recipe besides their batch loss (`experiments.train.recipes`), trained by the
probe's one step (`experiments.probe.linear_head.make_train_epoch`) on the registry's entries:
  jtt  stage 1: ERM for `stage1_epochs` (the recipe's schedule over those epochs); error set E from
       an eval pass over the training set (`reweight_jax.baselines.jtt_error_set`); stage 2: a fresh head
       trained on the registry's 'jtt' entry for the recipe's epochs on the up-sampled set (each
       example of E 1 + λ_up times, `experiments.methods.jtt.upsampled_sample`, the
       trainer's sampler, a new order per epoch): the epoch grows.
  lff  the registry's 'lff' entry on twin linear heads (the probe's stand-in for the biased-twin
       wrapper): the biased head's logits and the rows' dataset positions reach the loss as the
       trainer gives them (`StepInfo.recipe`); the debiased head is evaluated
       (`experiments.probe.lff`).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np
from absl import flags

from experiments.common import cli
from experiments.probe.features import RESOLUTION, load_features
from experiments.probe.linear_head import SCHEDULE
from experiments.studies.probe_comparison_methods import (ADAPTER_METHODS, METHODS, class_accuracy,
                                                          setting_of, train_method, tune)
from experiments.studies.probe_comparison_report import write_reports


def cache_dir(args: flags.FlagValues) -> pathlib.Path | None:
  """`--cache_dir` as a path (None: the features' default cache)."""
  return pathlib.Path(args.cache_dir) if args.cache_dir else None


def flipped_features(args, methods: Sequence[str]) -> np.ndarray | None:
  """The flipped view's training features when an adapter-setting method is among `methods`."""
  if not any(m in ADAPTER_METHODS for m in methods):
    return None
  return load_features(args.resolution, "train-flip", cache_dir(args))[0]


def tune_command(args: flags.FlagValues) -> None:
  features, labels = load_features(args.resolution, "train", cache_dir(args))
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  record = tune(features, labels, SCHEDULE, args.methods,
                flipped=flipped_features(args, args.methods))
  record.update(schedule=SCHEDULE._asdict(), resolution=args.resolution,
                wall_s=time.perf_counter() - start)
  path = out / "selection.json"
  if path.exists():  # keep the other methods' choices
    previous = json.loads(path.read_text())
    record["methods"] = {**previous.get("methods", {}), **record["methods"]}
  path.write_text(json.dumps(record, indent=1))
  print(f"wrote {path} ({record['wall_s']:.0f} s)")


def study_command(args: flags.FlagValues) -> None:
  out = pathlib.Path(args.out)
  selection = json.loads((out / "selection.json").read_text())
  (out / "runs").mkdir(parents=True, exist_ok=True)
  train_features, train_labels = load_features(args.resolution, "train", cache_dir(args))
  test_features, test_labels = load_features(args.resolution, "test", cache_dir(args))
  flipped = flipped_features(args, args.methods)
  start_all = time.perf_counter()
  for seed in args.seeds:
    for name in args.methods:
      path = out / "runs" / f"{name}-seed{seed}.json"
      if path.exists():
        continue
      params = selection["methods"][name]["chosen"]
      start = time.perf_counter()
      head, epoch_losses, record = train_method(name, params, train_features, train_labels,
                                                SCHEDULE, seed, flipped=flipped)
      class_acc = class_accuracy(name, head, test_features, test_labels)
      run = {"setting": setting_of(name), "method": name, "seed": seed, "params": params,
             "recipe": SCHEDULE._asdict(), "resolution": args.resolution,
             "class_accuracy": class_acc.tolist(), "final_train_loss": epoch_losses[-1],
             "wall_s": time.perf_counter() - start, **record}
      path.write_text(json.dumps(run, indent=1))
      print(f"seed {seed} {name}: mean class acc {100 * np.mean(class_acc):.2f} %, worst "
            f"{100 * np.min(class_acc):.1f} %, {run['wall_s']:.1f} s", flush=True)
  print(f"study wall time {time.perf_counter() - start_all:.0f} s")
  report_command(args)


def report_command(args: flags.FlagValues) -> None:
  out = pathlib.Path(args.out)
  runs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
  if not runs:
    raise SystemExit(f"error: {out / 'runs'}: no run files (the study command writes them)")
  runs.sort(key=lambda r: (r["seed"], list(METHODS).index(r["method"])))
  results = {"recipe": runs[0]["recipe"], "resolution": runs[0]["resolution"],
             "seeds": sorted({r["seed"] for r in runs}),
             "study_wall_s": sum(r["wall_s"] for r in runs)}
  print(write_reports(runs, out, results))


def define_flags(flag_values: flags.FlagValues) -> None:
  """The flags of the three commands (`--seeds` is study's)."""
  cli.define_xla_cpu_tuning(flag_values)
  flags.DEFINE_string("out", "results/probe_comparison", "The results folder.",
                      flag_values=flag_values)
  flags.DEFINE_integer("resolution", RESOLUTION, "The cached features' image size.",
                       flag_values=flag_values)
  flags.DEFINE_string("cache_dir", None, "The feature cache (default: "
                      "experiments.data.in_memory_sources.cache_dir()/linear_probe).",
                      flag_values=flag_values)
  cli.define_list("methods", [m for m in METHODS if m not in ADAPTER_METHODS], "The methods "
                  "(default: the linear-head setting's; the adapter setting's "
                  f"{', '.join(ADAPTER_METHODS)} need the flipped view's features).",
                  choices=list(METHODS), flag_values=flag_values)
  cli.define_list("seeds", list(range(10)), "study: the seeds.", item=int, flag_values=flag_values)


# `python -m experiments.studies.probe_comparison <command> [flags]`.
COMMANDS = {name: cli.with_xla_cpu_tuning(command) for name, command in (
    ("tune", tune_command), ("study", study_command), ("report", report_command))}


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m experiments.studies.probe_comparison <command>`; `argv` (without the program
  name) runs it from Python."""
  return cli.run_command(define_flags, COMMANDS, argv)


if __name__ == "__main__":
  sys.exit(main())
