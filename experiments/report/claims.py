"""What a comparison's paired Δ supports, in words: for each metric a paper claims to move, the
mean Δ over seeds, its 95 % t-interval, the exact two-sided sign-test p, seeds ahead, for a class
group its classes and its Δ in test images, and a verdict read from the interval alone (the main
job prints these lines under its tables; every report writes them for its claimed metrics).

The rule (`verdict`): "supported" only where the 95 % t-interval of the mean Δ excludes 0; otherwise
"not shown at n seeds; the interval is [a, b]"; one seed has no interval. When the seeds' Δs differ
by at most one test image (equal whole-image steps on a small test set), their sample std does not
measure the spread and the t-interval is not read: only the sign test can then support the Δ
(p < 0.05 takes six seeds).
Seeds ahead are reported, never read as evidence on their own: 3 of 3 ahead is p = 0.25 two-sided.
"""

from __future__ import annotations

import json
import pathlib
from typing import Sequence

import numpy as np

from mr2_reweight_core import metrics as perclass_metrics
from experiments.data import long_tail
from experiments.report import seed_stats

LABELS = {"overall": "overall", "worst_class": "worst class", "easy": "Easy", "medium": "Medium",
          "hard": "Hard", "many_shot": "Many-shot", "medium_shot": "Medium-shot",
          "few_shot": "Few-shot", "rho": "ρ (training set)"}
# How a metric's Δ is written: (scale, decimals, unit, words for a rise and a fall, a seed's Δ > 0);
# accuracies in points, ρ as it is.
ACCURACY = (100.0, 1, " points", ("a gain", "a loss"), "ahead")
FORMATS = {"rho": (1.0, 3, "", ("a rise", "a fall"), "higher")}
ALPHA = 1 - seed_stats.CONFIDENCE  # the sign test's level where the t-interval has no width
# The metrics a report's verdict lines read when its study names none: the papers' claims (MR2:
# the Hard classes and the worst class up, Easy not down; the reweighting: the Few-shot classes and
# overall up, ρ down).
CLAIMED = ("overall", "worst_class", "easy", "hard", "few_shot", "rho")


def group_classes(metric: str, table: dict, class_counts: Sequence[int]) -> list[int] | None:
  """The classes a group metric averages over (None for a metric of every class): Easy / Medium /
  Hard from the reference run's groups, Many / Medium / Few-shot from the training counts."""
  if metric in perclass_metrics.GROUP_NAMES and table.get("_groups") is not None:
    groups = np.asarray(table["_groups"])
    return np.flatnonzero(groups == perclass_metrics.GROUP_NAMES.index(metric)).tolist()
  if metric.endswith("_shot"):
    shots = long_tail.many_medium_few(np.asarray(class_counts))
    return np.flatnonzero(shots == long_tail.SHOT_NAMES.index(metric[:-5])).tolist()
  return None


def verdict(delta: seed_stats.PairedDelta, resolution: float = 0.0, scale: float = 100.0,
            digits: int = 1, sides: tuple[str, str] = ACCURACY[3]) -> str:
  """The verdict words of a paired Δ, from its 95 % t-interval alone (module doc): "supported (a
  gain | a loss): the 95 % interval [a, b] excludes 0", "not shown at n seeds; the interval is
  [a, b]", or "one seed: no interval".

  `resolution` is what one test image weighs in the metric (a fraction; 0 when unknown). Where the
  seeds' Δs differ by no more than that (equal whole-image steps, e.g. one image more in every
  seed), their sample std says nothing about the seed-to-seed spread and the t-interval is not
  read: the exact sign test decides instead (p < 0.05 takes six seeds that all moved the same
  way)."""
  n = delta.paired
  if n < 2 or np.isnan(delta.std):
    return seed_stats.ONE_SEED
  interval = seed_stats.interval_text(delta, scale=scale, digits=digits)
  if max(delta.deltas) - min(delta.deltas) <= resolution * (1 + 1e-9) + 1e-12:
    steps = ", ".join(f"{scale * d:+.{digits}f}" for d in delta.deltas)
    image = (f"by at most one test image ({scale * resolution:.2g} points)" if resolution
             else "only by rounding")
    spread = f"the seeds' Δs ({steps}) differ {image}, too coarse for a t-interval"
    if delta.sign_p < ALPHA and delta.mean != 0:
      side = sides[0] if delta.mean > 0 else sides[1]
      return f"supported ({side}) by the sign test, p = {delta.sign_p:.3g}: {spread}"
    return f"not shown at {n} seeds: {spread}, and the sign test gives p = {delta.sign_p:.3g}"
  if delta.low > 0:
    return f"supported ({sides[0]}): the 95 % interval {interval} excludes 0"
  if delta.high < 0:
    return f"supported ({sides[1]}): the 95 % interval {interval} excludes 0"
  return f"not shown at {n} seeds; the interval is {interval}"


def resolution(table: dict, metric: str, classes: Sequence[int] | None) -> float:
  """What one test image weighs in a metric, as a fraction (0 when the runs did not record their
  test images per class): 1 / N for overall accuracy, 1 / (|G| · max_{k ∈ G} n_k) for a class
  group's mean of per-class accuracies, 1 / max_k n_k for the worst class."""
  counts = table.get("_test_class_counts")
  if counts is None:
    return 0.0
  counts = np.asarray(counts, np.float64)
  if classes is not None:
    return float(1 / (len(classes) * counts[list(classes)].max())) if classes else 0.0
  if metric == "overall":
    return float(1 / counts.sum())
  return float(1 / counts.max())


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


def image_text(table: dict, method: str, metric: str, classes: Sequence[int] | None) -> str:
  """", +1.7 test images a seed (one image is 1.6–1.7 points of a class)": the mean paired Δ in
  whole test images of the group's classes, and what one image weighs; empty when the runs did not
  record their test images per class."""
  images = table[method].get("delta_images_vs_reference", {}).get(metric)
  counts = table.get("_test_class_counts")
  if images is None or counts is None:
    return ""
  delta = seed_stats.PairedDelta.from_json(images)
  counts = np.asarray(counts, np.float64)
  if classes is None:
    weight = f"one image is {100 / counts.sum():.2g} points"
  else:
    group = counts[list(classes)]
    # A class group's accuracy is the mean of its classes': one image of class k moves it by
    # 100 / (|G| · n_k) points.
    per_image = 100 / (len(group) * group)
    low, high = per_image.min(), per_image.max()
    weight = (f"one image is {low:.2g} points of the group" if np.isclose(low, high) else
              f"one image is {low:.2g}–{high:.2g} points of the group")
  if delta.paired < 2:
    return f", {delta.mean:+.0f} test images ({weight})"
  return f", {delta.mean:+.1f} test images a seed ({weight})"


def claim_lines(table: dict, metrics: Sequence[str], class_counts: Sequence[int]) -> list[str]:
  """One line per (method, claimed metric) of a report's table (`run_tables.method_table`)."""
  lines = []
  for method, row in table.items():
    if method.startswith("_") or "delta_vs_reference" not in row:
      continue
    for metric in metrics:
      if metric not in row["delta_vs_reference"]:
        continue
      delta = seed_stats.PairedDelta.from_json(row["delta_vs_reference"][metric])
      classes = group_classes(metric, table, class_counts)
      where = ""
      if classes is not None:
        where = (f" ({len(classes)} class{'' if len(classes) == 1 else 'es'}: "
                 f"{', '.join(map(str, classes))})")
      scale, digits, unit, sides, ahead = FORMATS.get(metric, ACCURACY)
      numbers = f"{scale * delta.mean:+.{digits}f}{unit}"
      numbers += image_text(table, method, metric, classes)
      if delta.paired >= 2:
        numbers += (f"; 95 % interval {seed_stats.interval_text(delta, scale=scale, digits=digits)}"
                    f", {delta.ahead}/{delta.paired} seeds {ahead}, sign test p = "
                    f"{delta.sign_p:.3g}")
      step = 0.0 if metric in FORMATS else resolution(table, metric, classes)
      words = verdict(delta, step, scale, digits, sides)
      line = f"- {method}, Δ {LABELS.get(metric, metric)}{where}: {numbers} — {words}"
      if classes is not None and len(classes) == 1:
        line += "; one class, so this is that class's test accuracy alone"
      elif classes:
        line += by_class(table, method, classes)
      lines.append(line + ".")
  return lines


def claims_markdown(table: dict, metrics: Sequence[str], class_counts: Sequence[int]) -> str:
  """The verdict section of a report: the rule in one sentence, then `claim_lines`."""
  lines = claim_lines(table, metrics, class_counts)
  if not lines:
    return ""
  head = ("What the paired Δ supports (final epoch; \"supported\" only where the 95 % t-interval "
          "over seeds excludes 0; seeds ahead and the two-sided sign-test p are reported beside "
          "it):")
  return "\n".join([head, "", *lines]) + "\n"


def what_the_table_supports(report_dir: pathlib.Path, metrics: Sequence[str],
                            class_counts: Sequence[int]) -> str:
  """`claim_lines` of a written report's comparison.json, one per line."""
  table = json.loads((pathlib.Path(report_dir) / "comparison.json").read_text())
  return "\n".join(claim_lines(table, metrics, class_counts))
