"""What a comparison's paired Δ supports, in words: for each metric a paper claims to move, the
mean Δ ± its sample std over seeds, how many seeds are ahead, which classes the group holds, and a
verdict that says no more than those numbers (the main job prints it under its tables)."""

from __future__ import annotations

import json
import pathlib
from typing import Sequence

import numpy as np

import mr2_jax
from experiments.data import long_tail

LABELS = {"overall": "overall", "easy": "Easy", "medium": "Medium", "hard": "Hard",
          "many_shot": "Many-shot", "medium_shot": "Medium-shot", "few_shot": "Few-shot"}


def group_classes(metric: str, table: dict, class_counts: Sequence[int]) -> list[int] | None:
  """The classes a group metric averages over (None for a metric of every class): Easy / Medium /
  Hard from the reference run's groups, Many / Medium / Few-shot from the training counts."""
  if metric in mr2_jax.GROUP_NAMES and table.get("_groups") is not None:
    groups = np.asarray(table["_groups"])
    return np.flatnonzero(groups == mr2_jax.GROUP_NAMES.index(metric)).tolist()
  if metric.endswith("_shot"):
    shots = long_tail.many_medium_few(np.asarray(class_counts))
    return np.flatnonzero(shots == long_tail.SHOT_NAMES.index(metric[:-5])).tolist()
  return None


def verdict(mean: float, std: float, ahead: int, paired: int) -> str:
  """Only what the per-seed Δ shows: ahead in every seed by more than the seeds' spread, within
  that spread, or mixed."""
  if paired < 2 or np.isnan(std):
    return "one seed: no spread to read it against"
  if abs(mean) <= std:
    return "within the seeds' spread: no evidence either way"
  if ahead == paired and mean > 0:
    return "ahead in every seed"
  if ahead == 0 and mean < 0:
    return "behind in every seed"
  return f"ahead in {ahead} of {paired} seeds: mixed"


def by_class(table: dict, method: str, classes: Sequence[int]) -> str:
  """The group's Δ class by class (mean over seeds, points), and which classes carry it: a group
  mean can be one class's gain."""
  reference = table[table["_paired_against"]]["per_class_mean"]
  deltas = {k: 100 * (table[method]["per_class_mean"][k] - reference[k]) for k in classes}
  text = "; by class: " + ", ".join(f"{k} {d:+.1f}" for k, d in deltas.items())
  moved = [k for k, d in deltas.items() if abs(d) >= 0.05]
  if len(moved) == 1:
    text += f" (all of it is class {moved[0]}'s)"
  return text


def what_the_table_supports(report_dir: pathlib.Path, metrics: Sequence[str],
                            class_counts: Sequence[int]) -> str:
  """One line per (method, claimed metric) of the report's paired Δ table (comparison.json)."""
  table = json.loads((pathlib.Path(report_dir) / "comparison.json").read_text())
  lines = []
  for method, row in table.items():
    if method.startswith("_") or "delta_vs_reference" not in row:
      continue
    for metric in metrics:
      if metric not in row["delta_vs_reference"]:
        continue
      mean, std, ahead, paired = row["delta_vs_reference"][metric]
      mean, std = 100 * float(mean), 100 * float(std)
      classes = group_classes(metric, table, class_counts)
      where = ""
      if classes is not None:
        where = (f" ({len(classes)} class{'' if len(classes) == 1 else 'es'}: "
                 f"{', '.join(map(str, classes))})")
      line = (f"- {method}, Δ {LABELS.get(metric, metric)}{where}: {mean:+.1f} ± {std:.1f} points, "
              f"{int(ahead)}/{int(paired)} seeds ahead — {verdict(mean, std, int(ahead), int(paired))}")
      if classes is not None and len(classes) == 1:
        line += "; one class, so this is that class's test accuracy alone"
      elif classes:
        line += by_class(table, method, classes)
      lines.append(line + ".")
  return "\n".join(lines)
