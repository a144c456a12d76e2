"""experiments.report.seed_stats: the one mean ± sample std (ddof = 1) and paired Δ of every table."""

import json
import math

import numpy as np
import pytest

from experiments.report import seed_stats


def _sample_std(values):
  """By hand, float64: sqrt(Σ (x − mean)² / (n − 1))."""
  x = np.asarray(values, np.float64)
  return math.sqrt(float(np.sum((x - x.sum() / len(x)) ** 2)) / (len(x) - 1))


def test_mean_std_is_the_sample_std():
  values = [0.31, 0.29, 0.335, 0.302, 0.288]
  mean, std = seed_stats.mean_std(values)
  assert mean == pytest.approx(sum(values) / 5, rel=1e-15)
  assert std == pytest.approx(_sample_std(values), rel=1e-14)
  assert std == pytest.approx(np.std(values) * math.sqrt(5 / 4), rel=1e-14)  # vs the old ddof = 0
  assert isinstance(mean, float) and isinstance(std, float)


def test_a_single_seed_has_no_std_and_prints_the_value_alone():
  mean, std = seed_stats.mean_std([0.42])
  assert mean == 0.42 and math.isnan(std)
  assert seed_stats.percent_cell((mean, std)) == "42.0"
  assert seed_stats.spread(1) == "one seed"
  assert seed_stats.spread([1, 3]) == ("mean ± sample std (ddof = 1) over 1–3 seeds; a one-seed "
                                       "cell is its value alone")
  per_class_mean, per_class_std = seed_stats.mean_std_arrays([[0.5, 0.25]])
  np.testing.assert_array_equal(per_class_mean, [0.5, 0.25])
  assert np.isnan(per_class_std).all()
  assert seed_stats.error_bars(per_class_std) is None
  delta = seed_stats.paired_delta({3: 0.5}, {3: 0.4})
  assert delta.mean == pytest.approx(0.1) and math.isnan(delta.std)
  assert (delta.ahead, delta.paired) == (1, 1)
  assert seed_stats.delta_cell(delta) == "+10.0"
  assert math.isnan(delta.low) and math.isnan(delta.high)
  assert delta.to_json()["std"] is None and delta.to_json()["low"] is None
  with pytest.raises(ValueError):
    seed_stats.mean_std([])


def test_per_class_arrays_are_the_sample_std_over_seeds():
  rows = np.array([[0.9, 0.1, 0.5], [0.8, 0.2, 0.5], [0.95, 0.0, 0.5]])
  mean, std = seed_stats.mean_std_arrays(rows)
  np.testing.assert_allclose(mean, rows.sum(0) / 3, rtol=1e-15)
  np.testing.assert_allclose(std, [_sample_std(rows[:, k]) for k in range(3)], rtol=1e-14)
  assert std[2] == 0.0
  assert mean.dtype == std.dtype == np.float64


def test_paired_delta_over_the_common_seeds_ties_are_not_ahead():
  method = {0: 0.50, 1: 0.40, 2: 0.70, 3: 0.33, 5: 0.9}  # seed 5: no reference run
  reference = {0: 0.45, 1: 0.40, 2: 0.60, 3: 0.35, 4: 0.1}  # seed 4: no method run; seed 1 a tie
  delta = seed_stats.paired_delta(method, reference)
  by_hand = [0.50 - 0.45, 0.40 - 0.40, 0.70 - 0.60, 0.33 - 0.35]  # seeds 0-3
  assert delta.mean == pytest.approx(sum(by_hand) / 4, rel=1e-14)
  assert delta.std == pytest.approx(_sample_std(by_hand), rel=1e-14)
  assert delta.ahead == 2  # seeds 0 and 2; the tie (seed 1) and seed 3 are not ahead
  assert delta.paired == 4
  assert delta.behind == 1 and delta.deltas == pytest.approx(by_hand)
  assert delta.sign_p == 1.0  # 2 ahead, 1 behind, the tie dropped
  with pytest.raises(ValueError, match="common seed"):
    seed_stats.paired_delta({0: 1.0}, {1: 1.0})


def test_metric_spreads_and_deltas_are_mean_std_and_paired_delta_per_metric():
  """Per-seed metric dicts {seed: {metric: value}} (the probe's and the trainer's tables): each
  metric summarised by `mean_std` over seeds and by `paired_delta` against the reference's seeds;
  an empty group (NaN) stays NaN, never ahead."""
  method = {0: {"overall": 0.5, "few": math.nan}, 1: {"overall": 0.7, "few": math.nan}}
  reference = {1: {"overall": 0.6, "few": math.nan}, 0: {"overall": 0.5, "few": math.nan}}
  spreads = seed_stats.metric_spreads(method)
  assert list(spreads) == ["overall", "few"]
  assert spreads["overall"] == seed_stats.mean_std([0.5, 0.7])
  assert all(math.isnan(v) for v in spreads["few"])
  deltas = seed_stats.metric_deltas(method, reference)
  assert deltas["overall"] == seed_stats.paired_delta({0: 0.5, 1: 0.7}, {0: 0.5, 1: 0.6})
  assert math.isnan(deltas["few"].mean) and (deltas["few"].ahead, deltas["few"].paired) == (0, 2)


def test_markdown_table_lines():
  assert seed_stats.markdown_table(["method", "a", "b"], [["ce", "1", "2"], ["mr2", "3", "4"]]) == [
      "| method | a | b |", "|---|---|---|", "| ce | 1 | 2 |", "| mr2 | 3 | 4 |"]
  assert seed_stats.markdown_table(["method"], iter([])) == ["| method |", "|---|"]


def test_cells_and_headers():
  assert seed_stats.percent_cell((0.3039, 0.00969)) == "30.4 ± 1.0"
  assert seed_stats.percent_cell((0.3039, 0.00969), digits=2) == "30.39 ± 0.97"
  assert seed_stats.cell(13.57, 3.238, fmt=".3g", std_fmt=".2g") == "13.6 ± 3.2"
  assert seed_stats.cell(float("nan"), float("nan")) == "n/a"  # an empty group over seeds
  assert seed_stats.cell(None, None) == "n/a"  # an empty group in one run's summary (JSON null)
  five = seed_stats.PairedDelta.of([0.012, 0.016, 0.02, 0.014, 0.018])
  half = 2.7764451051977987 * five.std / math.sqrt(5)  # t_{0.975, 4}
  assert seed_stats.delta_cell(five) == (
      f"+1.6 [{100 * (0.016 - half):+.1f}, {100 * (0.016 + half):+.1f}] (5/5)")
  assert seed_stats.delta_cell(seed_stats.PairedDelta.of([-6.0, -6.5]), scale=1.0, digits=2) == (
      "-6.25 [-9.43, -3.07] (0/2)")  # ± t_{0.975, 1} · 0.3536 / sqrt(2) = ± 3.18
  assert seed_stats.spread(5) == "mean ± sample std (ddof = 1) over 5 seeds"
  assert seed_stats.spread([3, 5, 3]) == "mean ± sample std (ddof = 1) over 3–5 seeds"
  assert "95 % t-interval" in seed_stats.PAIRED and "a tie is not ahead" in seed_stats.PAIRED



def test_an_interval_bound_near_zero_prints_its_sign():
  # Δs of 1.0 and 1.164 points: the 95 % t-interval's lower bound is +0.04 points (t_{0.975, 1}
  # = 12.706), which one decimal would print "+0.0" beside "excludes 0".
  delta = seed_stats.PairedDelta.of([0.01, 0.01164])
  assert 0 < 100 * delta.low < 0.05
  low, high = seed_stats.interval_text(delta)[1:-1].split(", ")
  assert float(low) > 0 and low == f"{100 * delta.low:+.2f}"
  assert high == f"{100 * delta.high:+.1f}"  # a bound away from 0 keeps its digits
  below = seed_stats.PairedDelta.of([-0.01, -0.01164])
  assert float(seed_stats.interval_text(below)[1:-1].split(", ")[1]) < 0
  # A bound of exactly 0 stays "+0.0" (two equal Δs of 0).
  assert seed_stats.interval_text(seed_stats.PairedDelta.of([0.0, 0.0])) == "[+0.0, +0.0]"

def test_export_runs_is_the_inverse_of_link_runs(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  from experiments.studies import regenerate_reports  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "work"
  for method, seed in (("ce", 0), ("ce", 1), ("glmc_rw", 0)):
    run = workdir / method / f"seed{seed}"
    (run / "checkpoints").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"method": method, "seed": seed}))
    (run / "config.json").write_text("{}")
  (workdir / "ce" / "seed2").mkdir()  # unfinished: no summary, not exported
  written = regenerate_reports.export_runs(workdir, tmp_path / "runs")
  assert [p.name for p in written] == ["ce-seed0.json", "ce-seed1.json", "glmc_rw-seed0.json"]
  assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
      "ce-seed0.config.json", "ce-seed0.json", "ce-seed1.config.json", "ce-seed1.json",
      "glmc_rw-seed0.config.json", "glmc_rw-seed0.json"]
  linked = regenerate_reports.link_runs(tmp_path / "runs", "ce", tmp_path / "linked")
  assert [json.loads((w / "summary.json").read_text())["seed"] for w in linked] == [0, 1]


def test_export_keep_existing_leaves_committed_runs_and_link_runs_reads_chosen_seeds(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  from experiments.studies import regenerate_reports  # pylint: disable=g-import-not-at-top
  workdir, runs = tmp_path / "work", tmp_path / "runs"
  for seed in (0, 1, 2):
    run = workdir / "ce" / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"seed": seed, "overall_accuracy": 0.5}))
  runs.mkdir()
  (runs / "ce-seed1.json").write_text(json.dumps({"seed": 1, "overall_accuracy": 0.25}))
  written = regenerate_reports.export_runs(workdir, runs, keep_existing=True)
  assert [p.name for p in written] == ["ce-seed0.json", "ce-seed2.json"]
  assert json.loads((runs / "ce-seed1.json").read_text())["overall_accuracy"] == 0.25
  linked = regenerate_reports.link_runs(runs, "ce", tmp_path / "linked", seeds=(2, 1))
  assert [json.loads((w / "summary.json").read_text())["seed"] for w in linked] == [1, 2]
  with pytest.raises(SystemExit, match=r"seeds \[3\]"):
    regenerate_reports.link_runs(runs, "ce", tmp_path / "linked2", seeds=(1, 3))
  regenerate_reports.export_runs(workdir, runs)  # without keep_existing every run is rewritten
  assert json.loads((runs / "ce-seed1.json").read_text())["overall_accuracy"] == 0.5


def test_the_interval_and_the_sign_test_match_scipy():
  from scipy import stats
  rng = np.random.default_rng(0)
  for n in (2, 3, 5, 10):
    for _ in range(5):
      deltas = rng.normal(0.01, 0.02, n).round(4)
      delta = seed_stats.PairedDelta.of(deltas)
      low, high = stats.t.interval(0.95, n - 1, loc=np.mean(deltas),
                                   scale=stats.sem(deltas))
      assert (delta.low, delta.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
      untied = int(np.sum(deltas != 0))
      expected_p = stats.binomtest(int(np.sum(deltas > 0)), untied, 0.5).pvalue if untied else 1.0
      assert delta.sign_p == pytest.approx(expected_p, rel=1e-12)
      assert delta.deltas == tuple(deltas.tolist())


def test_sign_test_values_that_decide_verdicts():
  assert seed_stats.sign_test_p(3, 0) == 0.25  # 3 of 3 ahead: not evidence
  assert seed_stats.sign_test_p(2, 1) == 1.0
  assert seed_stats.sign_test_p(5, 0) == 0.0625
  assert seed_stats.sign_test_p(6, 0) == 0.03125  # the fewest seeds that can reach p < 0.05
  assert seed_stats.sign_test_p(0, 0) == 1.0  # every seed tied
  assert seed_stats.sign_test_p(2, 0) == seed_stats.sign_test_p(0, 2) == 0.5


def test_paired_delta_json_round_trip_and_an_old_report_is_refused():
  delta = seed_stats.PairedDelta.of([0.01, 0.03, -0.005])
  back = seed_stats.PairedDelta.from_json(json.loads(json.dumps(delta.to_json())))
  assert back == delta
  with pytest.raises(ValueError, match="rebuild the report"):
    seed_stats.PairedDelta.from_json([0.01, 0.02, 2, 3])
  assert seed_stats.delta_cell(delta.to_json()) == (
      f"+1.2 [{100 * delta.low:+.1f}, {100 * delta.high:+.1f}] (2/3)")
