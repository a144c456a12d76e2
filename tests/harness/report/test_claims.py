"""experiments.report.claims: the main job's line under each table says only what the paired Δ
shows (mean ± std over seeds, seeds ahead) and which classes a group holds."""

import json

import numpy as np

from experiments.report import claims


def _report(tmp_path, deltas, groups=None):
  table = {"ce": {"overall": [0.9, 0.01], "per_class_mean": [0.9] * 10},
           "method": {"delta_vs_reference": deltas, "per_class_mean": [0.9] * 9 + [0.928]},
           "_paired_against": "ce"}
  if groups is not None:
    table["_groups"] = groups
  (tmp_path / "comparison.json").write_text(json.dumps(table))
  return tmp_path


def test_a_one_class_few_group_is_named_and_its_spread_read(tmp_path):
  counts = [150, 116, 90, 70, 54, 42, 32, 25, 19, 15]  # long-tailed digits at IF 10
  few = np.flatnonzero(np.asarray(counts) < 20).tolist()
  report = _report(tmp_path, {"few_shot": [0.014, 0.02, 3, 3], "overall": [0.001, 0.004, 2, 3]})
  text = claims.what_the_table_supports(report, ["few_shot", "overall"], counts)
  lines = text.splitlines()
  assert len(lines) == 2
  assert lines[0].startswith(f"- method, Δ Few-shot ({len(few)} class")
  assert "+1.4 ± 2.0 points, 3/3 seeds ahead" in lines[0]
  assert "within the seeds' spread: no evidence either way" in lines[0]
  if len(few) == 1:
    assert "that class's test accuracy alone" in lines[0]
  else:  # the group's gain is class 9's alone, and the line says so
    assert lines[0].endswith("+2.8 (all of it is class 9's).")
  assert "Δ overall: +0.1 ± 0.4 points, 2/3 seeds ahead" in lines[1]


def test_difficulty_groups_come_from_the_reference_groups(tmp_path):
  groups = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
  report = _report(tmp_path, {"hard": [0.017, 0.007, 3, 3]}, groups)
  text = claims.what_the_table_supports(report, ["hard", "easy"], [10] * 10)
  assert text == ("- method, Δ Hard (3 classes: 7, 8, 9): +1.7 ± 0.7 points, 3/3 seeds ahead — "
                  "ahead in every seed; by class: 7 +0.0, 8 +0.0, 9 +2.8 (all of it is class 9's).")


def test_verdicts_say_no_more_than_the_seeds():
  assert claims.verdict(2.0, 0.5, 3, 3) == "ahead in every seed"
  assert claims.verdict(-2.0, 0.5, 0, 3) == "behind in every seed"
  assert claims.verdict(1.0, 0.5, 2, 3) == "ahead in 2 of 3 seeds: mixed"
  assert claims.verdict(0.3, 0.5, 3, 3) == "within the seeds' spread: no evidence either way"
  assert claims.verdict(0.3, float("nan"), 1, 1) == "one seed: no spread to read it against"
