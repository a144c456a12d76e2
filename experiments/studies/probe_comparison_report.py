"""The probe comparison's reports: tables.md, results.json and the plots of a set of runs.

Per setting (the linear head, and the adapter with its own ERM), Easy / Medium / Hard from the
setting's own ERM, mean ± sample std over seeds and the paired Δ vs that ERM
(`experiments.studies.probe_tables`), MR2 against its uniform-γ control, the per-class plot and the
Hard-against-Easy trade-off plot. The study is `experiments.studies.probe_comparison`.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import numpy as np

from experiments.data import in_memory_sources
from experiments.report import seed_stats
from experiments.models.feature_heads import MLPAdapter
from experiments.studies.probe_tables import (COLUMNS, group_metrics, markdown_tables,
                                              plot_sorted_class_accuracy, summarise)
from experiments.studies.probe_comparison_methods import METHODS, SETTING, setting_of


def tradeoff_plot(summary: dict, path: pathlib.Path) -> None:
  """Paired Δ vs ERM of the Hard classes against that of the Easy classes, per method (mean ± sample
  std of the per-seed Δ)."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only
  fig, ax = plt.subplots(figsize=(6, 5))
  for method, row in summary["methods"].items():
    if method == "erm":
      continue
    x, y = row["delta_mean"]["easy"], row["delta_mean"]["hard"]
    ax.errorbar(x, y, xerr=row["delta_std"]["easy"], yerr=row["delta_std"]["hard"], fmt="o",
                capsize=3)
    ax.annotate(method, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9)
  ax.axhline(0, color="grey", lw=0.8)
  ax.axvline(0, color="grey", lw=0.8)
  ax.set_xlabel("Δ Easy classes vs ERM (points)")
  ax.set_ylabel("Δ Hard classes vs ERM (points)")
  ax.set_title("Trade-off: Hard-class gain against Easy-class change\n(paired per seed; bars ±1 "
               f"{seed_stats.STD_NAME} of Δ)", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def paired_against_control(runs: list[dict], method: str, control: str,
                           difficulty: Sequence[int]) -> str:
  """A Markdown row set: `method` − `control` per seed (paired Δ, seeds ahead) on the groups of
  `difficulty` (ERM's), for the columns of the probe tables."""
  by = {(r["method"], r["seed"]): r for r in runs}
  seeds = sorted(s for m, s in by if m == method and (control, s) in by)
  metrics = {m: {s: group_metrics(np.asarray(by[m, s]["class_accuracy"]),
                                  np.asarray(difficulty), None) for s in seeds}
             for m in (method, control)}
  delta = seed_stats.metric_deltas(metrics[method], metrics[control])
  cells = [seed_stats.delta_cell(delta[k], scale=1.0, digits=2) for k, _ in COLUMNS]
  return "\n".join(seed_stats.markdown_table(["Method − control"] + [t for _, t in COLUMNS],
                                            [[f"{method} − {control}"] + cells])) + "\n"


SETTING_TITLES = {
    SETTING: "linear head on frozen Lite0 features (ERM = `erm`)",
    "adapter": (f"trainable MLP adapter ({MLPAdapter.width} units) on frozen Lite0 features, image + "
                "flipped view (ERM = `erm_adapter`, SupCon's paired reference)"),
}


def write_reports(runs: list[dict], out: pathlib.Path, results: dict) -> str:
  """tables.md, results.json, per_class[_adapter].png and tradeoff[_adapter].png, per setting
  (Easy / Medium / Hard from the setting's own ERM)."""
  class_names = in_memory_sources.CIFAR10_CLASS_NAMES
  lines = ["# MR2's comparison methods on the Lite0 frozen-feature probe, balanced CIFAR-10\n"]
  summaries, chosen = {}, {}
  for setting in (SETTING, "adapter"):
    names = [m for m in METHODS if setting_of(m) == setting and any(r["method"] == m for r in runs)]
    if not names:
      continue
    reference = "erm" if setting == SETTING else "erm_adapter"
    # `summarise` reads the reference method as "erm".
    renamed = [{**r, "method": "erm" if r["method"] == reference else r["method"]}
               for r in runs if r["method"] in names]
    summary = summarise(renamed, setting, methods=["erm" if m == reference else m
                                                   for m in names], long_tailed=False)
    summaries[setting] = summary
    chosen.update({m: next(r["params"] for r in runs if r["method"] == m) for m in names})
    suffix = "" if setting == SETTING else f"_{setting}"
    lines += [f"## {SETTING_TITLES[setting]}\n",
              markdown_tables(summary, class_names, long_tailed=False)]
    if setting == SETTING and {"mr2", "uniform_gamma"} <= set(names):
      lines += ["MR2 against its uniform-γ control (same c̄ grid; paired per seed, ERM's groups):",
                "", paired_against_control(runs, "mr2", "uniform_gamma",
                                           summary["difficulty_groups"])]
    plot_sorted_class_accuracy(summary, setting, class_names, out / f"per_class{suffix}.png",
                               title="Lite0 probe, comparison methods")
    tradeoff_plot(summary, out / f"tradeoff{suffix}.png")
  lines += ["Hyper-parameters (chosen on the validation split, `selection.json`):", "",
            "| Method | hyper-parameters |", "|---|---|"]
  lines += [f"| {m} | {', '.join(f'{k} = {v}' for k, v in p.items()) or '—'} |"
            for m, p in chosen.items()]
  text = "\n".join(lines) + "\n"
  (out / "tables.md").write_text(text)
  (out / "results.json").write_text(json.dumps({**results, "summaries": summaries,
                                                "hyper_parameters": chosen}, indent=1))
  return text
