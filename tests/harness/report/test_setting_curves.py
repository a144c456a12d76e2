"""experiments/report/setting_curves.py: constructed members of a sweep (summary.json files) through
the whole path to the table, the verdict lines and the figure: a value that moves every seed by a
clear margin is "supported", one whose seeds disagree is "not shown", the default is not paired
with itself, and the means and intervals are the float64 ones of the per-seed values."""

import json

import numpy as np
import pytest
from scipy import stats

from experiments.report import setting_curves

SEEDS = (0, 1, 2, 3, 4)
K = 6


def write_run(folder, seed, accuracy, *, value=None, rho=None):
  folder.mkdir(parents=True)
  accuracy = np.asarray(accuracy, np.float64)
  summary = {"seed": seed, "per_class_accuracy": accuracy.tolist(),
             "overall_accuracy": float(accuracy.mean()),
             "worst_class_accuracy": float(accuracy.min()), "train_rho": rho}
  if value is not None:
    summary["sweep"] = {"reweight.alpha": value}
  (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def workdir(tmp_path):
  rng = np.random.default_rng(0)
  base = np.linspace(0.3, 0.9, K)
  for seed in SEEDS:
    noise = rng.normal(0, 0.01, K)
    write_run(tmp_path / "ce" / f"seed{seed}", seed, base + noise, rho=0.5)
    for value, shift in ((0.0, 0.0), (1.0, 0.10), (10.0, None)):
      # 1.0: +10 points on every class and seed; 10.0: ±5 points, alternating by seed.
      delta = shift if shift is not None else (0.05 if seed % 2 else -0.05)
      write_run(tmp_path / f"inverse_reweight-alpha{value:g}" / f"seed{seed}", seed,
                base + noise + delta + rng.normal(0, 0.002, K), value=value,
                rho=0.5 - delta + rng.normal(0, 0.005))
  return tmp_path


def test_members_are_found_by_their_recorded_values(workdir):
  found = setting_curves.members(workdir, "inverse_reweight", "reweight.alpha")
  assert list(found) == [0.0, 1.0, 10.0]
  assert [s["seed"] for s in found[1.0]] == list(SEEDS)
  with pytest.raises(FileNotFoundError, match="swept reweight.gamma"):
    setting_curves.members(workdir, "inverse_reweight", "reweight.gamma")


def test_the_table_verdicts_and_figure(workdir, tmp_path):
  out = tmp_path / "out"
  text = setting_curves.report(workdir, "inverse_reweight", "reweight.alpha", 0.0, "ce", out)
  table = json.loads((out / "reweight_alpha" / "curves.json").read_text())
  overall = [json.loads((workdir / "inverse_reweight-alpha1" / f"seed{s}" / "summary.json"
                         ).read_text())["overall_accuracy"] for s in SEEDS]
  cell = table["values"]["1.0"]["overall"]
  mean, sem = np.mean(overall), np.std(overall, ddof=1) / np.sqrt(len(SEEDS))
  half = stats.t.ppf(0.975, len(SEEDS) - 1) * sem
  assert cell["mean"] == pytest.approx(mean, abs=1e-12)
  assert cell["interval"] == pytest.approx([mean - half, mean + half], abs=1e-12)
  lines = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
  assert "overall: supported (a gain)" in text.split("against reweight.alpha")[1].split(
      "Paired Δ against ce")[0].split("- **1**")[1].split("\n")[0]
  assert "not shown at 5 seeds" in lines["10"]
  assert "ρ (training set): supported (a fall)" in text.split("- **1**")[1].split("\n")[0]
  assert "- **0**" not in text.split("Paired Δ against ce")[0]   # the default is not paired with itself
  assert "| 0 (default) |" in text
  assert (out / "reweight_alpha" / "curves.png").stat().st_size > 10_000


def test_a_default_that_was_not_swept_is_refused(workdir, tmp_path):
  with pytest.raises(KeyError, match="default 3"):
    setting_curves.report(workdir, "inverse_reweight", "reweight.alpha", 3.0, "ce", tmp_path / "o")


def test_separate_runs_named_in_runs_read_their_value_from_their_config(workdir, tmp_path):
  """A field no sweep traces (a start epoch): its runs are named, each value from config.json;
  the same summaries give the same table as the sweep's members."""
  for value in (0.0, 1.0, 10.0):
    for seed in SEEDS:
      folder = workdir / f"inverse_reweight-alpha{value:g}" / f"seed{seed}"
      (folder / "config.json").write_text(json.dumps({"reweight": {"alpha": value}}))
  names = [f"inverse_reweight-alpha{value:g}" for value in (10.0, 0.0, 1.0)]
  found = setting_curves.named_runs(workdir, names, "reweight.alpha")
  assert found == setting_curves.members(workdir, "inverse_reweight", "reweight.alpha")
  setting_curves.report(workdir, "inverse_reweight", "reweight.alpha", 0.0, "ce", tmp_path / "a")
  setting_curves.report(workdir, "inverse_reweight", "reweight.alpha", 0.0, "ce", tmp_path / "b",
                        runs=names)
  assert ((tmp_path / "a" / "reweight_alpha" / "curves.json").read_text() ==
          (tmp_path / "b" / "reweight_alpha" / "curves.json").read_text())
  (workdir / names[0] / "seed3" / "config.json").write_text(
      json.dumps({"reweight": {"alpha": 2.0}}))
  with pytest.raises(ValueError, match=r"set reweight.alpha to \[2.0, 10.0\]"):
    setting_curves.named_runs(workdir, names, "reweight.alpha")
