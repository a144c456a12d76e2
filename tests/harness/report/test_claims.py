"""experiments.report.claims: the verdict of a claimed Δ follows from its 95 % t-interval alone.

Constructed per-seed runs go through the whole path (summary.json per seed → run_tables'
comparison.json and report.md → the printed line), and the words are checked: 3 of 3 seeds ahead
with a wide spread, 2 of 3 ahead, one seed, equal whole-image Δs, a clear effect and a clear loss.
"""

import json
import math

import numpy as np
import pytest

from experiments.report import claims
from experiments.report import run_tables
from experiments.report import seed_stats

TEST_N = 60  # test images per class (the digits test split holds 58–61)
LT_COUNTS = [150, 116, 90, 70, 54, 42, 32, 25, 19, 15]  # long-tailed digits, IF 10: Few = 8, 9
BASE = np.array([57, 58, 55, 50, 52, 56, 45, 54, 40, 35])  # the reference's correct images


def _summary(seed, correct, train_counts=LT_COUNTS):
  accuracy = np.asarray(correct, np.float64) / TEST_N
  summary = {"seed": seed, "per_class_accuracy": accuracy.tolist(),
             "overall_accuracy": float(np.sum(correct) / (TEST_N * len(correct))),
             "worst_class_accuracy": float(accuracy.min()),
             "class_accuracy_std": float(accuracy.std()),
             "train_class_counts": train_counts, "test_class_counts": [TEST_N] * len(correct)}
  if len(set(train_counts)) > 1:
    summary["many_medium_few"] = {"many": float(accuracy[:8].mean()), "medium": None,
                                  "few": float(accuracy[8:].mean())}
  return summary


def _write(root, method, seed, correct, **kwargs):
  workdir = root / method / f"seed{seed}"
  workdir.mkdir(parents=True)
  (workdir / "summary.json").write_text(json.dumps(_summary(seed, correct, **kwargs)))
  return workdir


def _lines(tmp_path, gained_images, metrics=("few_shot", "overall"), **kwargs):
  """Runs whose seed s has the reference's images plus `gained_images[s]` ({class: images}) for
  the method; the report's verdict lines for `metrics`."""
  runs = {"ce": [], "method": []}
  for seed, gains in enumerate(gained_images):
    noise = np.zeros(10, int)
    noise[seed % 5] = seed % 2  # the seeds differ, in classes the claim does not read
    runs["ce"].append(_write(tmp_path / "runs", "ce", seed, BASE - noise, **kwargs))
    correct = BASE - noise
    for k, g in gains.items():
      correct[k] += g
    runs["method"].append(_write(tmp_path / "runs", "method", seed, correct, **kwargs))
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report", claimed=metrics)
  counts = kwargs.get("train_counts", LT_COUNTS)
  lines = claims.what_the_table_supports(tmp_path / "report", metrics, counts).splitlines()
  assert all(line in markdown for line in lines)  # the report prints the same lines
  return lines, markdown


def test_three_of_three_ahead_with_a_wide_spread_is_not_shown(tmp_path):
  lines, _ = _lines(tmp_path, [{9: 1}, {9: 12}, {9: 2}])
  few = lines[0]
  assert few.startswith("- method, Δ Few-shot (2 classes: 8, 9): +4.2 points, +5.0 test images a "
                        "seed (one image is 0.83 points of the group)")
  assert "3/3 seeds ahead, sign test p = 0.25" in few
  assert "— not shown at 3 seeds; the interval is [" in few
  assert "supported" not in few
  assert few.endswith("; by class: 8 +0.0, 9 +8.3 (all of it is class 9's).")


def test_two_of_three_ahead_is_not_shown(tmp_path):
  lines, _ = _lines(tmp_path, [{8: 3, 9: 3}, {8: 2, 9: 3}, {8: -2}])
  assert "2/3 seeds ahead, sign test p = 1" in lines[0]
  assert "— not shown at 3 seeds; the interval is [" in lines[0]


def test_one_seed_has_no_interval_and_no_na(tmp_path):
  lines, markdown = _lines(tmp_path, [{8: 5, 9: 6}])
  assert lines[0] == ("- method, Δ Few-shot (2 classes: 8, 9): +9.2 points, +11 test images "
                      "(one image is 0.83 points of the group) — one seed: no interval; by "
                      "class: 8 +8.3, 9 +10.0.")
  assert "n/a" not in markdown and "±" not in markdown.split("What the paired Δ supports")[0]
  assert "one seed (seed 0)" in markdown
  assert "one seed: the Δ of that run, no interval" in markdown


def test_equal_whole_image_deltas_are_not_a_precise_effect(tmp_path):
  # One more test image of class 9 in every seed: "+0.8 ± 0.0, 3/3 ahead" under the old rule.
  lines, _ = _lines(tmp_path, [{9: 1}] * 3)
  few = lines[0]
  assert "+0.8 points, +1.0 test images a seed" in few
  assert ("not shown at 3 seeds: the seeds' Δs (+0.8, +0.8, +0.8) differ by at most one test image "
          "(0.83 points), too coarse for a t-interval, and the sign test gives p = 0.25") in few
  # Two or three images a seed: the Δs differ by one image (0.83 points), so their t-interval,
  # which excludes 0, is no evidence.
  lines, _ = _lines(tmp_path / "near", [{9: 2}, {8: 2}, {9: 3}])
  table = json.loads((tmp_path / "near" / "report" / "comparison.json").read_text())
  assert table["method"]["delta_vs_reference"]["few_shot"]["low"] > 0
  assert "not shown at 3 seeds: the seeds' Δs (+1.7, +1.7, +2.5) differ by at most one" in lines[0]
  # Six such seeds: the sign test alone reaches p = 1/32.
  lines, _ = _lines(tmp_path / "six", [{9: 1}] * 6)
  assert ("supported (a gain) by the sign test, p = 0.0312: the seeds' Δs (+0.8, +0.8, +0.8, +0.8, "
          "+0.8, +0.8) differ by at most one test image (0.83 points), too coarse for a "
          "t-interval") in lines[0]


def test_a_clear_effect_is_supported_and_a_clear_loss_too(tmp_path):
  lines, _ = _lines(tmp_path, [{8: 10, 9: 9}, {8: 11, 9: 10}, {8: 10, 9: 11}])
  table = json.loads((tmp_path / "report" / "comparison.json").read_text())
  delta = seed_stats.PairedDelta.from_json(table["method"]["delta_vs_reference"]["few_shot"])
  assert delta.low > 0  # the interval, recomputed here by hand: mean ± t_{0.975, 2} · s / √3
  deltas = np.array([19, 21, 21]) / (2 * TEST_N)
  half = 4.302652729911275 * deltas.std(ddof=1) / math.sqrt(3)
  assert (delta.low, delta.high) == (pytest.approx(deltas.mean() - half),
                                     pytest.approx(deltas.mean() + half))
  assert (f"— supported (a gain): the 95 % interval [{100 * delta.low:+.1f}, "
          f"{100 * delta.high:+.1f}] excludes 0") in lines[0]
  lines, _ = _lines(tmp_path / "loss", [{8: -10, 9: -9}, {8: -11, 9: -10}, {8: -10, 9: -11}])
  assert "0/3 seeds ahead" in lines[0] and "— supported (a loss): the 95 % interval" in lines[0]


def test_difficulty_groups_come_from_the_reference_and_one_image_is_weighed(tmp_path):
  lines, _ = _lines(tmp_path, [{9: 1}, {9: 2}, {9: 1}], metrics=("hard", "easy"),
                    train_counts=[100] * 10)
  hard, easy = lines
  # The reference's three lowest classes: 9 (35), 8 (40), 6 (45) correct of 60.
  assert hard.startswith("- method, Δ Hard (3 classes: 6, 8, 9): +0.7 points, +1.3 test images a "
                         "seed (one image is 0.56 points of the group)")
  assert easy.startswith("- method, Δ Easy (")
  assert "+0.0 points" in easy and "0/3 seeds ahead" in easy
  # every seed tied: no spread, sign test p = 1
  assert "not shown at 3 seeds: the seeds' Δs (+0.0, +0.0, +0.0) differ by at most" in easy


def test_runs_without_test_counts_give_points_only(tmp_path):
  table = {"ce": {"per_class_mean": [0.9] * 10, "seeds": [0, 1, 2]},
           "method": {"per_class_mean": [0.9] * 9 + [0.95], "seeds": [0, 1, 2],
                      "delta_vs_reference": {
                          "overall": seed_stats.PairedDelta.of([0.01, 0.02, 0.0]).to_json()}},
           "_paired_against": "ce"}
  lines = claims.claim_lines(table, ["overall"], [10] * 10)
  assert lines == [f"- method, Δ overall: +1.0 points; 95 % interval [-1.5, +3.5], 2/3 seeds ahead, "
                   "sign test p = 0.5 — not shown at 3 seeds; the interval is [-1.5, +3.5]."]


def test_rho_is_a_claimed_metric_written_as_it_is(tmp_path):
  """The reweighting claims ρ (the training set's per-class loss spread) falls: its paired Δ is read
  by the same rule, written without a scale, a rise or a fall."""
  runs = {"ce": [], "method": []}
  for seed, (rho_ce, rho_method) in enumerate([(0.64, 0.60), (0.62, 0.65), (0.66, 0.60)]):
    for name, rho in (("ce", rho_ce), ("method", rho_method)):
      workdir = _write(tmp_path / "runs", name, seed, BASE)
      summary = json.loads((workdir / "summary.json").read_text())
      (workdir / "summary.json").write_text(json.dumps({**summary, "train_rho": rho}))
      runs[name].append(workdir)
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report", claimed=["rho"])
  deltas = np.array([-0.04, 0.03, -0.06])
  half = 4.302652729911275 * deltas.std(ddof=1) / math.sqrt(3)
  expected = f"[{deltas.mean() - half:+.3f}, {deltas.mean() + half:+.3f}]"
  assert (f"- method, Δ ρ (training set): -0.023; 95 % interval {expected}, 1/3 seeds higher, sign "
          f"test p = 1 — not shown at 3 seeds; the interval is {expected}.") in markdown
  assert "| Δ ρ |" in markdown or "| Δ ρ" in markdown
