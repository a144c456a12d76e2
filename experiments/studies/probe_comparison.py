"""MR2's comparison methods on the frozen-feature probe (COMPARISONS spec; MR2 spec, 'Evaluation').

ERM, MR2 (ℓ_γ,ce: on frozen features ℓ_s̄ has no parameter to act on), focal, LDAM, class-level
Group DRO, FairDRO, EQL, JTT and LfF, each a run of the trainer with its registry entry on the
probe's config (`experiments/configs/probe_cifar10.py`: a linear head on the cached
EfficientNet-Lite0 features of balanced CIFAR-10, lr 0.01, 30 epochs, batch 256, SGD momentum 0.9,
cosine). SupCon's loss acts on the encoder, which a linear probe does not train (with the encoder
frozen, SupCon's joint form gives the linear classifier exactly ERM's gradient and its two-stage
form trains the classifier by ERM), so it runs in a second setting, 'adapter': the model
'mlp_adapter' (a trainable MLP, 1280 → 256, ReLU, under the linear classifier), two views per image
(the image and its horizontal flip, both through the frozen backbone: `python -m
experiments.studies.linear_probe features --splits=train-flip`, read as the source
'features:lite0-r128+flip'), and the 'supcon' entry: cross-entropy on both views + λ·SupCon on the
adapter's features through SupCon's projection head (`mr2_jax.linen.SupConProjection`, τ = 0.1,
τ_b = 0.07); its paired reference is the same entry at λ = 0 (`erm_adapter`).

    python -m experiments.studies.probe_comparison tune  --out=results/probe_comparison
    python -m experiments.studies.probe_comparison study --out=results/probe_comparison
    python -m experiments.studies.probe_comparison report --out=results/probe_comparison

`tune` trains every candidate of each method's grid (`METHODS` in
`experiments.studies.probe_comparison_methods`) with the trainer's `validation_fraction` = 0.1 (a
stratified 10 % of the training set held out, drawn with the run's seed) for seeds 0 and 1 and
scores it on the held-out part (never on test): the highest mean worst-class validation accuracy
wins (ties: mean per-class validation accuracy); `selection.json` records every candidate's scores
and the choice. `study` trains each method with its chosen hyper-parameters on the full training set
for every seed (the runs' workdirs under `--workdir`: config, checkpoints, logs, summary) and writes
`runs/<method>-seed<s>.json` (per-class test accuracy, the hyper-parameters, method-specific
state), `results.json`, `tables.md` (mean ± sample std over seeds; paired Δ vs ERM with seeds
ahead; Easy / Medium / Hard fixed from ERM's mean per-class test accuracy), `per_class.png` and
`tradeoff.png` (Hard-class Δ against Easy-class Δ per method); `report` rebuilds the last four from
`runs/` without training (`experiments.studies.probe_comparison_report`).

JTT's stage 1 is a trainer run of 'ce' for `jtt.stage1_epochs` epochs (the recipe's schedule over
those epochs), in `--workdir`/study/stage1; the 'jtt' entry's sampler reads it (`jtt.stage1`). LfF
is the 'lff' entry, whose recipe wraps the linear head with its biased twin.
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
from experiments.studies.probe_comparison_methods import (ADAPTER_METHODS, METHODS, run_method,
                                                          run_record, tune)
from experiments.studies.probe_comparison_report import write_reports


def tune_command(args: flags.FlagValues) -> None:
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  record = tune(args.methods, pathlib.Path(args.workdir) / "tune", data_dir=args.data_dir)
  record.update(wall_s=time.perf_counter() - start)
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
  start_all = time.perf_counter()
  for seed in args.seeds:
    for name in args.methods:
      path = out / "runs" / f"{name}-seed{seed}.json"
      if path.exists():
        continue
      params = selection["methods"][name]["chosen"]
      start = time.perf_counter()
      summary = run_method(name, params, seed, pathlib.Path(args.workdir) / "study",
                           data_dir=args.data_dir)
      run = run_record(name, params, seed, summary, time.perf_counter() - start)
      path.write_text(json.dumps(run, indent=1))
      class_acc = np.asarray(run["class_accuracy"])
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
  results = {"recipe": runs[0]["recipe"],
             "seeds": sorted({r["seed"] for r in runs}),
             "study_wall_s": sum(r["wall_s"] for r in runs)}
  print(write_reports(runs, out, results))


def define_flags(flag_values: flags.FlagValues) -> None:
  """The flags of the three commands (`--seeds` is study's)."""
  cli.define_xla_cpu_tuning(flag_values)
  flags.DEFINE_string("out", "results/probe_comparison", "The results folder.",
                      flag_values=flag_values)
  flags.DEFINE_string("workdir", "workdirs/probe_comparison", "The runs' workdirs (checkpoints, "
                      "logs, summaries): <workdir>/tune/..., <workdir>/study/...",
                      flag_values=flag_values)
  flags.DEFINE_string("data_dir", None, "The cached features' folder (default: "
                      "experiments.data.cached_features.feature_dir()).", flag_values=flag_values)
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
