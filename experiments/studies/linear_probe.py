"""Frozen-feature linear probe: ERM vs MR2 (ℓ_γ,ce only) vs inverse reweighting on a linear head.

MR2 spec, 'Objective' ("for linear probing on frozen features, only ℓ_γ,ce") and 'Evaluation
protocol'; REWEIGHT spec, 'Two levels'. The backbone is EfficientNet-Lite0 pretrained on ImageNet
(`experiments.models.pretrained`); its pooled 1280-d features of CIFAR-10 are extracted once and
cached (`experiments.probe.features`), then every linear head (`experiments.probe.linear_head`) is
trained on the cached features, so many seeds are cheap; tables and plots are
`experiments.probe.summary`.

Commands:
  python -m experiments.studies.linear_probe features --data_dir=../shared/data/cifar10_jpeg \
      --resolution=128
  python -m experiments.studies.linear_probe select  # lr / epochs on a validation split of train
  python -m experiments.studies.linear_probe study --out=experiments/studies/results/linear_probe
  python -m experiments.studies.linear_probe report \
      --out=experiments/studies/results/linear_probe  # tables again

Features: CIFAR-10 images (32 px) upsampled bilinearly to `resolution`, no augmentation (one view),
not normalised afterwards (neither standardised nor L2-normalised: raw pooled ReLU6 activations, as
the MoCo-v2 probe reads raw pooled features). Cached under
`experiments.data.in_memory_sources.cache_dir()/linear_probe`.

The head: logits = φ W + b (W ~ N(0, 0.01²), b = 0, as MoCo's linear classifier), trained with the
same recipe for every method: SGD momentum 0.9, cosine decay to 0 over all steps, batch 256 (full
batches, the remainder of each epoch's permutation dropped), no weight decay. Learning rate and
number of epochs are chosen once by `select` (ERM, mean per-class accuracy on a stratified 10 %
validation split of the training set) and fixed in `RECIPE`; numbers are final-epoch test accuracy.

Methods: `experiments.probe.linear_head.METHODS` (its module docstring lists them).
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
import time
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

import mr2_jax
from experiments.data import holdout, in_memory_sources, long_tail
from experiments.common import xla_cpu
from experiments.probe.features import (FEATURE_BATCH, NUM_CLASSES, RESOLUTION, features_command,
                                        load_features)
from experiments.probe.linear_head import (METHODS, RECIPE, SETTINGS, Recipe, class_accuracy,
                                           method_config, predict, setting_train_indices,
                                           train_probe)
from experiments.probe.summary import markdown_tables, plot_sorted_class_accuracy, summarise


def select_command(args: argparse.Namespace) -> None:
  """ERM on a 10 % stratified validation split of each setting's training set (seed 0), for each
  (learning rate, epochs); the recipe with the best mean over settings of mean per-class validation
  accuracy is the one to put in RECIPE."""
  features, labels = load_features(args.resolution, "train")
  results = []
  for setting, (imbalance_factor, _) in SETTINGS.items():
    subset = setting_train_indices(labels, imbalance_factor, seed=0)
    fit, val = holdout.stratified_holdout(labels[subset], NUM_CLASSES, 0.1, seed=0)
    fit, val = subset[fit], subset[val]
    for learning_rate in args.learning_rates:
      for epochs in args.epochs_grid:
        recipe = Recipe(learning_rate=learning_rate, epochs=epochs)
        start = time.perf_counter()
        state, losses = train_probe("erm", features[fit], labels[fit], recipe, seed=0)
        val_acc = class_accuracy(state.params, features[val], labels[val])
        results.append({"setting": setting, "learning_rate": learning_rate, "epochs": epochs,
                        "val_mean_class_accuracy": float(np.mean(val_acc)),
                        "val_class_accuracy": val_acc.tolist(), "final_train_loss": losses[-1],
                        "wall_s": time.perf_counter() - start})
        print(f"{setting} lr={learning_rate} epochs={epochs}: val mean-class acc "
              f"{100 * np.mean(val_acc):.2f} %, train loss {losses[-1]:.3f}", flush=True)
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


def study_command(args: argparse.Namespace) -> None:
  recipe = RECIPE._replace(**{k: v for k, v in (("learning_rate", args.learning_rate),
                                                ("epochs", args.epochs)) if v is not None})
  out = pathlib.Path(args.out)
  (out / "runs").mkdir(parents=True, exist_ok=True)
  train_features, train_labels = load_features(args.resolution, "train")
  test_features, test_labels = load_features(args.resolution, "test")
  start_all = time.perf_counter()
  runs = []
  for setting in args.settings:
    imbalance_factor, methods = SETTINGS[setting]
    for seed in args.seeds:
      subset = setting_train_indices(train_labels, imbalance_factor, seed)
      counts = np.bincount(train_labels[subset], minlength=NUM_CLASSES)
      for method in methods:
        start = time.perf_counter()
        state, losses = train_probe(method, train_features[subset], train_labels[subset], recipe,
                                    seed)
        class_acc = class_accuracy(state.params, test_features, test_labels)
        run = {"setting": setting, "imbalance_factor": imbalance_factor, "method": method,
               "seed": seed, "recipe": recipe._asdict(), "resolution": args.resolution,
               "train_class_counts": counts.tolist(),
               "shot_groups": long_tail.many_medium_few(counts).tolist(),
               "class_accuracy": class_acc.tolist(),
               "test_accuracy": float(np.mean(predict(state.params, jnp.asarray(test_features))
                                              == test_labels)),
               "final_train_loss": losses[-1], "wall_s": time.perf_counter() - start}
        if "class_stats" in state.loss_state:
          run["mr2_gamma"] = np.asarray(mr2_jax.class_margins(
              state.loss_state["class_stats"], method_config(method).mr2.c_bar)).tolist()
        if "reweight" in state.loss_state:
          run["reweight_batch_counts"] = np.asarray(
              state.loss_state["reweight"].batch_counts).tolist()
          run["reweight_beta"] = np.asarray(state.loss_state["reweight"].beta).tolist()
        (out / "runs" / f"{setting}-{method}-seed{seed}.json").write_text(json.dumps(run, indent=1))
        runs.append(run)
        print(f"{setting} seed {seed} {method}: test acc {100 * run['test_accuracy']:.2f} %, "
              f"worst class {100 * np.min(class_acc):.1f} %, {run['wall_s']:.1f} s", flush=True)
  wall = time.perf_counter() - start_all
  results = {"recipe": recipe._asdict(), "resolution": args.resolution, "seeds": list(args.seeds),
             "study_wall_s": wall}
  print(write_reports(runs, args.settings, results, out))
  print(f"study wall time {wall:.0f} s")


def write_reports(runs: list[dict], settings: Sequence[str], results: dict,
                  out: pathlib.Path) -> str:
  """results.json (`results` plus a `summarise` per setting), tables.md and per_class_<setting>.png
  in `out`; returns the tables' Markdown."""
  class_names = in_memory_sources.CIFAR10_CLASS_NAMES
  results = {**results, "settings": {}}
  tables = [f"# Lite0 linear probe on CIFAR-10 (features at {results['resolution']} px)\n"]
  for setting in settings:
    summary = summarise(runs, setting)
    results["settings"][setting] = summary
    tables += [f"## {setting}\n", markdown_tables(summary, setting, class_names)]
    plot_sorted_class_accuracy(summary, setting, class_names, out / f"per_class_{setting}.png")
  (out / "results.json").write_text(json.dumps(results, indent=1))
  (out / "tables.md").write_text("\n".join(tables))
  return "\n".join(tables)


def report_command(args: argparse.Namespace) -> None:
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
                               METHODS.index(r["method"])))
  previous = out / "results.json"
  results = json.loads(previous.read_text()) if previous.exists() else {}
  results = {k: v for k, v in results.items() if k != "settings"}
  if not results:
    results = {"recipe": runs[0]["recipe"], "resolution": runs[0]["resolution"],
               "seeds": sorted({r["seed"] for r in runs})}
  settings = [s for s in SETTINGS if any(r["setting"] == s for r in runs)]
  text = write_reports(runs, settings, results, out)
  if not args.quiet:
    print(text)


# ----------------------------------------------------------------------------------------------
# Command line.


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m experiments.studies.linear_probe",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--no_xla_cpu_tuning", action="store_true",
                      help="leave XLA_FLAGS as they are (see experiments.common.xla_cpu)")
  commands = parser.add_subparsers(dest="command", required=True)
  features = commands.add_parser("features", help="extract and cache Lite0 features of CIFAR-10")
  features.add_argument("--data_dir", default="../shared/data/cifar10_jpeg")
  features.add_argument("--resolution", type=int, default=RESOLUTION)
  features.add_argument("--batch_size", type=int, default=FEATURE_BATCH)
  features.add_argument("--cache_dir", default=None,
                        help="default: experiments.data.in_memory_sources.cache_dir()")
  features.add_argument("--splits", nargs="+", default=["train", "test"],
                        choices=["train", "test", "train-flip", "test-flip"],
                        help="'<split>-flip': the horizontally flipped images")
  select = commands.add_parser("select", help="choose lr / epochs on a validation split (ERM)")
  select.add_argument("--resolution", type=int, default=RESOLUTION)
  select.add_argument("--learning_rates", type=float, nargs="+", default=[0.003, 0.01, 0.03, 0.1, 0.3])
  select.add_argument("--epochs_grid", type=int, nargs="+", default=[10, 30, 100])
  select.add_argument("--out", default="experiments/studies/results/linear_probe")
  study = commands.add_parser("study", help="train all heads on cached features, write results")
  study.add_argument("--out", default="experiments/studies/results/linear_probe")
  study.add_argument("--resolution", type=int, default=RESOLUTION)
  study.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
  study.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
  study.add_argument("--learning_rate", type=float, default=None, help="default: RECIPE")
  study.add_argument("--epochs", type=int, default=None, help="default: RECIPE")
  report = commands.add_parser("report", help="rebuild results.json, tables.md and the plots from "
                                              "<out>/runs/*.json, without training")
  report.add_argument("--out", default="experiments/studies/results/linear_probe")
  report.add_argument("--quiet", action="store_true", help="do not print the tables")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  args = parse_args(sys.argv[1:] if argv is None else argv)
  xla_cpu.configure(not args.no_xla_cpu_tuning)
  {"features": features_command, "select": select_command,
   "study": study_command, "report": report_command}[args.command](args)


if __name__ == "__main__":
  main()
