"""Frozen-feature linear probe: ERM vs MR2 (ℓ_γ,ce only) vs inverse reweighting on a linear head.

MR2 spec, 'Objective' ("for linear probing on frozen features, only ℓ_γ,ce") and 'Evaluation
protocol'; REWEIGHT spec, 'Two levels'. The backbone is EfficientNet-Lite0 pretrained on ImageNet
(`experiments.models.pretrained`); its pooled 1280-d features of CIFAR-10 are extracted once and
cached (`experiments.probe.features`, the 'features:lite0-r128' source), then every run is a run
of the trainer on them (`experiments/configs/probe_cifar10.py`: the linear head and its one recipe;
`experiments.studies.probe_runs`), so many seeds are cheap; tables and plots are
`experiments.studies.probe_tables`.

Commands:
  python -m experiments.studies.linear_probe features --data_dir=DATA --resolution=128
  python -m experiments.studies.linear_probe select  # lr / epochs on a validation split of train
  python -m experiments.studies.linear_probe study --out=results/linear_probe
  python -m experiments.studies.linear_probe report \
      --out=results/linear_probe  # tables again

Features: CIFAR-10 images (32 px) upsampled bilinearly to `resolution`, no augmentation (one view),
not normalised afterwards (neither standardised nor L2-normalised: raw pooled ReLU6 activations, as
the MoCo-v2 probe reads raw pooled features).

The head: logits = φ W + b (W ~ N(0, 0.01²), b = 0, as MoCo's linear classifier), trained with the
same recipe for every method: SGD momentum 0.9, cosine decay to 0 over all steps, batch 256 (full
batches, the remainder of each epoch's permutation dropped), no weight decay. Learning rate and
number of epochs are chosen once by `select` (ERM, mean per-class accuracy on a stratified 10 %
validation split of the training set) and fixed in the config; numbers are final-epoch test
accuracy.

Methods (`METHODS`: each a registry entry with its fields):
  erm             'ce', plain cross-entropy.
  mr2             'mr2', ℓ_γ,ce with γ from EMA class statistics of the (unnormalised) features:
                  paper form, p = 2, decay 0.9, c̄ = 1 (λ = 0).
  reweight        'inverse_reweight', α = 0, uniform prior, macro γ = 1 refreshed once per epoch,
                  clip 10, gradient through the weights (the authors' code), from the first step.
  reweight_sg     the same with `stop_gradient=True` (the weights are constants).
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
from experiments.data import in_memory_sources, long_tail
from experiments.probe.features import FEATURE_BATCH, RESOLUTION, features_command
from experiments.studies import probe_runs
from experiments.studies.probe_tables import markdown_tables, plot_sorted_class_accuracy, summarise

# Row → (registry entry, its fields).
METHODS = {
    "erm": ("ce", {}),
    "mr2": ("mr2", {"mr2.lam": 0.0, "mr2.c_bar": 1.0, "mr2.decay": 0.9, "mr2.form": "paper"}),
    "reweight": ("inverse_reweight", {"reweight.alpha": 0.0, "reweight.prior": "uniform",
                                      "reweight.gamma": 1.0, "reweight.max_weight": 10.0,
                                      "reweight.macro": True, "reweight.refresh": "epoch",
                                      "reweight.start_epoch": 0}),
}
METHODS["reweight_sg"] = ("inverse_reweight",
                          {**METHODS["reweight"][1], "reweight.stop_gradient": True})
# Setting → (imbalance factor, rows). The reweighting's stop-gradient ablation only on LT.
SETTINGS = {"balanced": (1.0, ("erm", "mr2", "reweight")),
            "lt100": (100.0, ("erm", "mr2", "reweight", "reweight_sg"))}


def select_command(args: flags.FlagValues) -> None:
  """ERM on a 10 % stratified validation split of each setting's training set (seed 0), for each
  (learning rate, epochs); the recipe with the best mean over settings of mean per-class validation
  accuracy is the one to put in the config."""
  results = []
  root = pathlib.Path(args.workdir) / "select"
  for setting, (imbalance_factor, _) in SETTINGS.items():
    for learning_rate in args.learning_rates:
      for epochs in args.epochs_grid:
        config = probe_runs.probe_config(
            "ce", {"learning_rate": learning_rate, "num_epochs": epochs}, seed=0,
            imbalance_factor=imbalance_factor, data_dir=args.features_dir,
            validation_fraction=0.1)
        start = time.perf_counter()
        summary = probe_runs.train(config, root / f"{setting}-lr{learning_rate}-epochs{epochs}")
        val_acc = np.asarray(summary["validation_class_accuracy"])
        results.append({"setting": setting, "learning_rate": learning_rate, "epochs": epochs,
                        "val_mean_class_accuracy": float(np.mean(val_acc)),
                        "val_class_accuracy": val_acc.tolist(),
                        "wall_s": time.perf_counter() - start})
        print(f"{setting} lr={learning_rate} epochs={epochs}: val mean-class acc "
              f"{100 * np.mean(val_acc):.2f} %", flush=True)
  scores = {}
  for r in results:
    scores.setdefault((r["learning_rate"], r["epochs"]), []).append(r["val_mean_class_accuracy"])
  best = max(scores, key=lambda key: (np.mean(scores[key]), -key[1]))
  print(f"best: learning_rate={best[0]} epochs={best[1]} "
        f"(mean over settings {100 * np.mean(scores[best]):.2f} %)")
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "selection.json").write_text(json.dumps(
      {"criterion": "ERM, seed 0, mean per-class accuracy on a stratified 10 % validation split of "
                    "each setting's training set, averaged over settings",
       "best": {"learning_rate": best[0], "epochs": best[1]}, "runs": results}, indent=1))


def study_command(args: flags.FlagValues) -> None:
  """Every row of each setting for every seed, a trainer run each (resumed or read when its
  workdir holds one), its run file in `out`/runs, then the tables."""
  out = pathlib.Path(args.out)
  (out / "runs").mkdir(parents=True, exist_ok=True)
  schedule = {k: v for k, v in (("learning_rate", args.learning_rate),
                                ("num_epochs", args.epochs)) if v is not None}
  start_all = time.perf_counter()
  runs = []
  for setting in args.settings:
    imbalance_factor, methods = SETTINGS[setting]
    for seed in args.seeds:
      for method in methods:
        loss, fields = METHODS[method]
        config = probe_runs.probe_config(loss, {**fields, **schedule}, seed,
                                         imbalance_factor=imbalance_factor,
                                         data_dir=args.features_dir)
        start = time.perf_counter()
        summary = probe_runs.train(config, pathlib.Path(args.workdir) / "study" /
                                   f"{setting}-{method}-seed{seed}")
        counts = np.asarray(summary["train_class_counts"])
        run = {"setting": setting, "imbalance_factor": imbalance_factor, "method": method,
               "loss": loss, "seed": seed, "recipe": probe_runs.recipe_record(config),
               "train_class_counts": counts.tolist(),
               "shot_groups": long_tail.many_medium_few(counts).tolist(),
               "class_accuracy": summary["per_class_accuracy"],
               "test_class_counts": summary["test_class_counts"],
               "test_accuracy": summary["overall_accuracy"],
               "wall_s": time.perf_counter() - start}
        for field in ("reweight_batch_counts", "class_margins"):
          if field in summary:
            run[field] = summary[field]
        (out / "runs" / f"{setting}-{method}-seed{seed}.json").write_text(json.dumps(run, indent=1))
        runs.append(run)
        print(f"{setting} seed {seed} {method}: test acc {100 * run['test_accuracy']:.2f} %, "
              f"worst class {100 * np.min(run['class_accuracy']):.1f} %, {run['wall_s']:.1f} s",
              flush=True)
  wall = time.perf_counter() - start_all
  results = {"recipe": runs[0]["recipe"], "seeds": list(args.seeds), "study_wall_s": wall}
  print(write_reports(runs, args.settings, results, out))
  print(f"study wall time {wall:.0f} s")


def write_reports(runs: list[dict], settings: Sequence[str], results: dict,
                  out: pathlib.Path) -> str:
  """results.json (`results` plus a `summarise` per setting), tables.md and per_class_<setting>.png
  in `out`; returns the tables' Markdown."""
  class_names = in_memory_sources.CIFAR10_CLASS_NAMES
  results = {**results, "settings": {}}
  tables = [f"# Lite0 linear probe on CIFAR-10 (features at {RESOLUTION} px)\n"]
  for setting in settings:
    imbalance_factor, methods = SETTINGS[setting]
    summary = summarise(runs, setting, methods, long_tailed=imbalance_factor > 1)
    results["settings"][setting] = summary
    tables += [f"## {setting}\n", markdown_tables(summary, class_names, imbalance_factor > 1)]
    plot_sorted_class_accuracy(summary, setting, class_names, out / f"per_class_{setting}.png")
  (out / "results.json").write_text(json.dumps(results, indent=1))
  (out / "tables.md").write_text("\n".join(tables))
  return "\n".join(tables)


def report_command(args: flags.FlagValues) -> None:
  """results.json, tables.md and the plots again from the committed runs/*.json of a study (no
  training, no features): the study's recipe, resolution, seeds and wall time are kept from its
  results.json."""
  out = pathlib.Path(args.out)
  paths = sorted((out / "runs").glob("*.json"))
  if not paths:
    raise SystemExit(f"error: {out / 'runs'}: no run files (python -m "
                     "experiments.studies.linear_probe study writes them)")
  runs = sorted((json.loads(p.read_text()) for p in paths),
                key=lambda r: (list(SETTINGS).index(r["setting"]), r["seed"],
                               list(METHODS).index(r["method"])))
  previous = out / "results.json"
  results = json.loads(previous.read_text()) if previous.exists() else {}
  results = {k: v for k, v in results.items() if k != "settings"}
  if not results:
    results = {"recipe": runs[0]["recipe"], "seeds": sorted({r["seed"] for r in runs})}
  settings = [s for s in SETTINGS if any(r["setting"] == s for r in runs)]
  text = write_reports(runs, settings, results, out)
  if not args.quiet:
    print(text)


# ----------------------------------------------------------------------------------------------
# Command line.


def define_flags(flag_values: flags.FlagValues) -> None:
  """The flags of all four commands (each reads its own; the help says which)."""
  cli.define_xla_cpu_tuning(flag_values)
  flags.DEFINE_string("data_dir", "../shared/data/cifar10_jpeg", "features: the CIFAR-10 JPEG "
                      "folder.", flag_values=flag_values)
  flags.DEFINE_integer("resolution", RESOLUTION, "features: the image size the features are "
                       "extracted at (select and study read 'lite0-r128').", flag_values=flag_values)
  flags.DEFINE_integer("batch_size", FEATURE_BATCH, "features: images per extraction batch.",
                       flag_values=flag_values)
  flags.DEFINE_string("features_dir", None, "features: where they are written; select, study: "
                      "where they are read (default: "
                      "experiments.data.cached_features.feature_dir()).", flag_values=flag_values)
  flags.DEFINE_string("workdir", "workdirs/linear_probe", "select, study: the runs' workdirs.",
                      flag_values=flag_values)
  cli.define_list("splits", ["train", "test"], "features: the splits to extract; "
                  "'<split>-flip': the horizontally flipped images.",
                  choices=("train", "test", "train-flip", "test-flip"), flag_values=flag_values)
  cli.define_list("learning_rates", [0.003, 0.01, 0.03, 0.1, 0.3], "select: the learning rates "
                  "tried.", item=float, flag_values=flag_values)
  cli.define_list("epochs_grid", [10, 30, 100], "select: the numbers of epochs tried.", item=int,
                  flag_values=flag_values)
  flags.DEFINE_string("out", "results/linear_probe", "select, study, report: "
                      "the results folder.", flag_values=flag_values)
  cli.define_list("seeds", list(range(10)), "study: the seeds.", item=int, flag_values=flag_values)
  cli.define_list("settings", list(SETTINGS), "study: the settings.", choices=list(SETTINGS),
                  flag_values=flag_values)
  flags.DEFINE_float("learning_rate", None, "study: the learning rate (default: the config's).",
                     flag_values=flag_values)
  flags.DEFINE_integer("epochs", None, "study: the number of epochs (default: the config's).",
                       flag_values=flag_values)
  flags.DEFINE_bool("quiet", False, "report: do not print the tables.", flag_values=flag_values)


# `python -m experiments.studies.linear_probe <command> [flags]`.
COMMANDS = {name: cli.with_xla_cpu_tuning(command) for name, command in (
    ("features", features_command), ("select", select_command), ("study", study_command),
    ("report", report_command))}


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m experiments.studies.linear_probe <command>`; `argv` (without the program name)
  runs it from Python."""
  return cli.run_command(define_flags, COMMANDS, argv)


if __name__ == "__main__":
  sys.exit(main())
