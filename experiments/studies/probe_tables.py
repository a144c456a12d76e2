"""Probe runs summarised over seeds: difficulty groups, mean ± std, paired Δ vs ERM, tables, plot.

Easy / Medium / Hard are fixed from ERM's mean per-class test accuracy
(`mr2_reweight_core.metrics.difficulty_tertiles`); each method's group accuracies are summarised
over seeds as mean ± sample std (ddof = 1) and as the paired per-seed Δ vs ERM (`experiments.report.seed_stats`). Used
by `experiments.studies.linear_probe` and `experiments.studies.probe_comparison`; `long_tailed`
(whether the setting's training set is) adds the Many / Medium / Few columns.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np

from mr2_reweight_core import metrics as perclass_metrics
from experiments.report import seed_stats
from experiments.train import evaluation

# The trainer's Many / Medium / Few names → the probe tables' keys ('medium_shot' apart from the
# Medium difficulty group).
SHOT_KEYS = {"many": "many", "medium": "medium_shot", "few": "few"}


def group_metrics(class_acc: np.ndarray, difficulty: np.ndarray,
                  shot_groups: np.ndarray | None) -> dict[str, float]:
  """Overall (mean per class; the test set is balanced), Easy/Medium/Hard, worst class, class std,
  and Many/Medium/Few shot (`evaluation.shot_accuracy`, the trainer's summary) — all in percent.
  An empty shot group (None there) is NaN here: these per-seed numbers feed the statistics over
  seeds (`seed_stats.mean_std`, `seed_stats.paired_delta`), which give NaN and print "n/a" for it."""
  easy, medium, hard = perclass_metrics.group_accuracy(class_acc, difficulty)
  metrics = {"overall": float(np.mean(class_acc)), "easy": easy, "medium": medium, "hard": hard,
             "worst": perclass_metrics.worst_class_accuracy(class_acc),
             "class_std": perclass_metrics.class_accuracy_std(class_acc)}
  if shot_groups is not None:
    shots = evaluation.shot_accuracy(class_acc, shot_groups)
    metrics.update({SHOT_KEYS[name]: value for name, value in shots.items()})
  return {k: float("nan") if v is None else 100.0 * float(v) for k, v in metrics.items()}


def summarise(runs: list[dict], setting: str, methods: Sequence[str], long_tailed: bool) -> dict:
  """Groups from ERM's mean per-class test accuracy; per method mean ± sample std (ddof = 1) over
  seeds (`seed_stats.metric_spreads`) and the paired per-seed Δ vs ERM (`seed_stats.metric_deltas`:
  mean, sample std, seeds ahead, seeds paired)."""
  runs = [r for r in runs if r["setting"] == setting]
  methods = [m for m in methods if any(r["method"] == m for r in runs)]
  by_method = {m: {r["seed"]: r for r in runs if r["method"] == m} for m in methods}
  erm_mean = np.mean([r["class_accuracy"] for r in by_method["erm"].values()], axis=0)
  difficulty = perclass_metrics.difficulty_tertiles(erm_mean)
  lt = long_tailed

  def metrics(run: dict) -> dict[str, float]:
    return group_metrics(np.asarray(run["class_accuracy"]), difficulty,
                         np.asarray(run["shot_groups"]) if lt else None)

  erm = {seed: metrics(r) for seed, r in by_method["erm"].items()}
  table = {}
  for method in methods:
    per_seed = {seed: metrics(r) for seed, r in sorted(by_method[method].items())}
    spread = seed_stats.metric_spreads(per_seed)
    delta = seed_stats.metric_deltas(per_seed, erm)
    names = list(spread)
    class_mean, class_std = seed_stats.mean_std_arrays(
        [r["class_accuracy"] for _, r in sorted(by_method[method].items())])
    table[method] = {
        "seeds": sorted(per_seed),
        "mean": {n: spread[n][0] for n in names},
        "std": {n: spread[n][1] for n in names},
        "delta_mean": {n: delta[n].mean for n in names},
        "delta_std": {n: delta[n].std for n in names},
        "delta_wins": {n: delta[n].ahead for n in names},
        "delta_seeds": {n: delta[n].paired for n in names},
        "delta": {n: delta[n].to_json() for n in names},  # with its interval and sign-test p
        "class_accuracy_mean": class_mean.tolist(),
        "class_accuracy_std": class_std.tolist() if len(per_seed) > 1 else None,
    }
  return {"difficulty_groups": difficulty.tolist(), "erm_class_accuracy_mean": erm_mean.tolist(),
          "seed_spread": seed_stats.STD_NAME, "methods": table}


COLUMNS = (("overall", "Overall"), ("easy", "Easy"), ("medium", "Medium"), ("hard", "Hard"),
           ("worst", "Worst class"), ("class_std", "Class std"))
SHOT_COLUMNS = (("many", "Many"), ("medium_shot", "Medium-shot"), ("few", "Few"))


def _cell(mean: float, std: float) -> str:
  """"mean ± std" (already in percent) with two decimals; "n/a" for an empty group."""
  return seed_stats.cell(mean, std, fmt=".2f")


def markdown_tables(summary: dict, class_names: Sequence[str], long_tailed: bool) -> str:
  """Two tables: mean ± sample std (ddof = 1) over seeds, and the paired per-seed Δ vs ERM (mean Δ,
  its 95 % t-interval, seeds ahead / seeds paired)."""
  columns = COLUMNS + (SHOT_COLUMNS if long_tailed else ())
  methods = summary["methods"]
  num_seeds = len(methods["erm"]["seeds"])
  groups = summary["difficulty_groups"]
  group_text = "; ".join(
      f"{name}: " + ", ".join(class_names[k] for k in range(len(groups)) if groups[k] == g)
      for g, name in enumerate(("Easy", "Medium", "Hard")))
  header = ["Method"] + [title for _, title in columns]
  lines = [f"Test accuracy (%), final epoch, {seed_stats.spread(num_seeds)}. Groups fixed from "
           f"ERM's mean per-class test accuracy ({group_text}).", ""]
  lines += seed_stats.markdown_table(header, (
      [method] + [_cell(row["mean"][k], row["std"][k]) for k, _ in columns]
      for method, row in methods.items()))
  lines += ["", f"Paired Δ vs ERM (same seed, same data): {seed_stats.PAIRED}.", ""]
  lines += seed_stats.markdown_table(header, (
      [method] + [seed_stats.delta_cell(row["delta"][k], scale=1.0, digits=2)
                  for k, _ in columns]
      for method, row in methods.items() if method != "erm"))
  return "\n".join(lines) + "\n"


def plot_sorted_class_accuracy(summary: dict, setting: str, class_names: Sequence[str],
                               path: pathlib.Path, title: str = "Lite0 linear probe") -> None:
  """Per-class test accuracy, classes sorted by ERM's mean accuracy (descending), bars ±1 sample
  std (ddof = 1) over seeds."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only
  order = np.argsort(-np.asarray(summary["erm_class_accuracy_mean"]), kind="stable")
  fig, ax = plt.subplots(figsize=(9, 4))
  methods = summary["methods"]
  width = 0.8 / len(methods)
  for i, (method, row) in enumerate(methods.items()):
    mean = 100 * np.asarray(row["class_accuracy_mean"])[order]
    std = seed_stats.error_bars(np.asarray(row["class_accuracy_std"] or [], np.float64))
    std = None if std is None else 100 * std[order]
    ax.bar(np.arange(len(order)) + (i - (len(methods) - 1) / 2) * width, mean, width, yerr=std,
           label=method, capsize=2)
  ax.set_xticks(np.arange(len(order)), [class_names[k] for k in order], rotation=30)
  ax.set_ylabel("test accuracy (%)")
  lowest = min(100 * min(r["class_accuracy_mean"]) for r in methods.values())
  ax.set_ylim(max(0, lowest - 10), 100)
  ax.set_title(f"{title}, {setting}: per-class accuracy, sorted by ERM\n"
               f"(bars: ±1 {seed_stats.STD_NAME} over seeds)", fontsize=10)
  # Beside the axes, not on them: inside, the legend of ten methods covered the first classes' bars.
  ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
