"""The diagnosis as a report: Markdown tables (report.md), diagnose.json and PNG plots, from the
result of `experiments.report.diagnosis.diagnose`."""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.report.diagnosis import MAX_NAMED_CLASSES

# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def format_value(value, digits: int = 4) -> str:
  """`value` to `digits` significant digits; '—' for None or a non-finite value."""
  if value is None or (isinstance(value, float) and not math.isfinite(value)):
    return "—"
  return f"{value:.{digits}g}"


def format_percent(value) -> str:
  """A fraction as a percentage with one decimal; '—' for None or a non-finite value."""
  if value is None or not math.isfinite(value):
    return "—"
  return f"{100 * value:.1f}"


def _jsonable(value):
  if isinstance(value, dict):
    return {k: _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, np.ndarray):
    return _jsonable(value.tolist())
  if isinstance(value, (np.integer,)):
    return int(value)
  if isinstance(value, (float, np.floating)):
    return float(value) if math.isfinite(value) else None
  return value


def _class_order(result) -> tuple[np.ndarray, str]:
  """Per-class table order: by accuracy (hardest first), else by A_k + V_k (largest first)."""
  k = np.arange(result["num_classes"])
  if result["accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    key = np.where(np.isfinite(accuracy), accuracy, np.inf)
    return np.lexsort((k, key)), "accuracy (lowest first)"
  spread = np.asarray(result["A_plus_V"], float)
  key = np.where(np.isfinite(spread), -spread, np.inf)
  return np.lexsort((k, key)), "A_k + V_k (largest first; no accuracy)"


def markdown_report(result: dict[str, Any], plots: Sequence[str] = ()) -> str:
  names = result["class_names"]
  p_text = "" if result["p"] == 2.0 else f" (L_{result['p']:g} norms)"
  lines = ["# Per-class diagnosis", ""]
  run = result.get("run")
  if run:
    state = ("finished: summary.json present" if run["finished"]
             else "interrupted or still running: no summary.json")
    lines += [f"Run `{run['workdir']}`: loss `{run['loss']}`, dataset `{run['dataset']}`, "
              f"checkpoint step {run['step']} ({state}).", ""]
  lines += [f"- Statistics (A_k, V_k, γ_k, L_c, ρ, NC): {result['sources']['statistics']}.",
            f"- Accuracy and confusions: {result['sources']['accuracy']}.",
            f"- K = {result['num_classes']} classes, feature dimension "
            f"d = {result['feature_dim']}; "
            f"A_k = ‖μ_k‖², V_k = mean ‖φ − μ_k‖²{p_text}; "
            f"γ_k = c̄·K′·(A_k+V_k)^(1/3) / Σ_j (A_j+V_j)^(1/3) over the K′ classes present "
            f"(MR2 spec, 'Logit margin'), c̄ = {result['c_bar']:g}.", ""]

  lines += ["## Summary", ""]
  if result["overall_accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    worst = int(np.nanargmin(accuracy)) if np.any(np.isfinite(accuracy)) else None
    lines.append(f"- Overall accuracy {format_percent(result['overall_accuracy'])} %"
                 + (f"; worst class {names[worst]} ({format_percent(accuracy[worst])} %)"
                    if worst is not None else "")
                 + f"; std of class accuracies {format_percent(float(np.nanstd(accuracy)))} points.")
  if result["spearman"]:
    for key, label in (("accuracy_vs_spread", "A_k + V_k"), ("accuracy_vs_variance", "V_k")):
      corr = result["spearman"][key]
      pvalue = "" if corr["pvalue"] is None else f", p = {corr['pvalue']:.3g}"
      note = f" ({corr['note']})" if corr["note"] else ""
      lines.append(f"- Spearman rank correlation of per-class accuracy with {label}: "
                   f"{format_value(corr['rho'], 3)}{pvalue}, over {corr['classes']} classes{note}.")
    lines.append("  (MR2's premise, paper Figure 1b: negative — classes with spread-out features "
                 "are the hard ones.)")
  if result["rho"] is not None:
    lines.append(f"- Loss imbalance ρ = std_c L_c / mean_c L_c = {format_value(result['rho'], 4)}.")
  gamma = np.asarray(result["gamma"], float)
  lines.append(f"- MR2 margins γ_k from {format_value(float(np.min(gamma)), 4)} to "
               f"{format_value(float(np.max(gamma)), 4)} (mean over present classes = c̄).")
  for note in result["notes"]:
    lines.append(f"- Note: {note}.")
  for skipped in result["skipped"]:
    lines.append(f"- Skipped: {skipped}.")
  lines.append("")

  order, order_text = _class_order(result)
  lines += ["## Per-class table", "", f"Sorted by {order_text}.", ""]
  has_accuracy = result["accuracy"] is not None
  has_loss = result["class_loss"] is not None
  separate_eval = result["sources"]["statistics"] != result["sources"]["accuracy"]
  header = ["class"] + (["accuracy %"] if has_accuracy else []) + [
      "A_k", "V_k", "A_k+V_k", "γ_k"] + (["L_c"] if has_loss else []) + ["n"] + (
      ["n eval"] if separate_eval and has_accuracy else [])
  lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for k in order:
    row = [f"{k}" if names[k] == str(k) else f"{k} {names[k]}"]
    if has_accuracy:
      row.append(format_percent(float(result["accuracy"][k])))
    row += [format_value(float(result[key][k])) for key in ("A", "V", "A_plus_V", "gamma")]
    if has_loss:
      row.append(format_value(float(result["class_loss"][k])))
    row.append(str(int(result["count"][k])))
    if separate_eval and has_accuracy:
      row.append(str(int(result["eval_count"][k])))
    lines.append("| " + " | ".join(row) + " |")
  lines.append("")

  lines += ["## Neural collapse", "", "| metric | value | what it measures |", "|---|---|---|"]
  meaning = {
      "nc1": "Tr(Σ_W Σ_B⁺)/K: within-class spread relative to between-class spread",
      "nc2": "distance of the centred class means' Gram matrix from a simplex ETF",
      "nc2_classifier": "the same for the classifier rows W Wᵀ",
      "nc3": "‖W/‖W‖ − M/‖M‖‖²: misalignment of classifier and class means",
      "nc4": "fraction of examples where the classifier disagrees with the nearest class mean"
             + (" (classifier decision = argmax of the logits)" if result["nc4_source"] == "logits"
                else "")}
  for name, text in meaning.items():
    value = result["nc"][name]
    lines.append(f"| {name.upper().replace('_CLASSIFIER', ' (W)')} | "
                 f"{'not computed' if value is None else format_value(value)} | {text} |")
  lines.append("")

  if result["accuracy"] is not None:
    lines += ["## Most confused pairs", "",
              "Off-diagonal entries of the confusion matrix (true → predicted); rate = count / "
              "examples of the true class.", ""]
    if result["confused_pairs"]:
      lines += ["| true | predicted | count | rate % |", "|---|---|---|---|"]
      for pair in result["confused_pairs"]:
        lines.append(f"| {pair['true_name']} | {pair['predicted_name']} | {pair['count']} | "
                     f"{format_percent(pair['rate'])} |")
    else:
      lines.append("No mistakes.")
    lines.append("")

  if plots:
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
  return "\n".join(lines)


def _plots(result: dict[str, Any], out: pathlib.Path) -> list[str]:
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  names = result["class_names"]
  num_classes = result["num_classes"]
  named = num_classes <= MAX_NAMED_CLASSES
  written = []

  def save(fig, name):
    fig.tight_layout()
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    written.append(name)

  if result["accuracy"] is not None:
    accuracy = 100 * np.asarray(result["accuracy"], float)
    for key, label, name, corr_key in (
        ("A_plus_V", "A_k + V_k (class mean squared feature norm)", "accuracy_vs_spread.png",
         "accuracy_vs_spread"),
        ("V", "V_k (mean squared deviation from the class mean)", "accuracy_vs_variance.png",
         "accuracy_vs_variance")):
      x = np.asarray(result[key], float)
      fig, ax = plt.subplots(figsize=(6, 4.5))
      ax.scatter(x, accuracy, s=18)
      if named:
        for k in range(num_classes):
          if np.isfinite(x[k]) and np.isfinite(accuracy[k]):
            ax.annotate(names[k], (x[k], accuracy[k]), fontsize=7, xytext=(3, 2),
                        textcoords="offset points")
      corr = result["spearman"][corr_key]
      ax.set_title(f"Spearman ρ_s = {format_value(corr['rho'], 3)} over {corr['classes']} classes")
      ax.set_xlabel(label)
      ax.set_ylabel("per-class accuracy (%)")
      ax.grid(alpha=0.3)
      save(fig, name)

  k = np.arange(num_classes)
  width = max(6, min(0.3 * num_classes, 30))
  fig, ax = plt.subplots(figsize=(width, 3.5))
  ax.bar(k, np.asarray(result["gamma"], float))
  ax.axhline(result["c_bar"], color="k", lw=0.8, ls="--", label=f"c̄ = {result['c_bar']:g}")
  ax.set_ylabel("γ_k (MR2 margin)")
  ax.set_xlabel("class")
  ax.legend()
  if named:
    ax.set_xticks(k, names, rotation=90, fontsize=7)
  save(fig, "margins.png")

  if result["class_loss"] is not None:
    fig, ax = plt.subplots(figsize=(width, 3.5))
    ax.bar(k, np.nan_to_num(np.asarray(result["class_loss"], float)))
    ax.set_ylabel("L_c (mean cross-entropy)")
    ax.set_xlabel("class")
    ax.set_title(f"ρ = {format_value(result['rho'], 3)}")
    if named:
      ax.set_xticks(k, names, rotation=90, fontsize=7)
    save(fig, "class_loss.png")

  if result["confusion"] is not None:
    confusion = np.asarray(result["confusion"], float)
    rates = confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1)
    size = max(5, min(0.3 * num_classes, 20))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(rates, cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="fraction of the true class")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if named:
      ax.set_xticks(k, names, rotation=90, fontsize=7)
      ax.set_yticks(k, names, fontsize=7)
    save(fig, "confusion.png")
  return written


def write_report(result: dict[str, Any], out_dir: str | pathlib.Path) -> pathlib.Path:
  """Writes report.md, diagnose.json and the PNG plots into `out_dir`; returns report.md's path."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  plots = _plots(result, out)
  (out / "diagnose.json").write_text(json.dumps(_jsonable(result), indent=1) + "\n")
  path = out / "report.md"
  path.write_text(markdown_report(result, plots))
  return path


