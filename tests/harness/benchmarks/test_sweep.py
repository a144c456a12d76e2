"""experiments/benchmarks/sweep.py: one run alone and S members of a sweep in one program train
through the trainer's loop, each in its own process, on synthetic features of a given shape
(`cached_features.write_synthetic`); the
report holds one row per variant with its ratio to the run alone; `tools/sweep_call.sh --dry_run`
runs the accelerator row's commands at tiny size."""

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


# The module is run, not imported: its absl flags live in the global FLAGS.
@pytest.mark.slow  # ≈ 1 min: three small trainer processes
def test_the_benchmark_runs_its_variants_and_writes_its_report(tmp_path):
  subprocess.run([sys.executable, "-m", "experiments.benchmarks.sweep",
                  "--config=experiments/configs/probe_cifar10.py", "--loss=inverse_reweight",
                  "--field=reweight.alpha", "--high=2", "--members=1,3", "--steps=6",
                  "--window=2", "--rounds=1", "--synthetic_features=600,16", f"--out={tmp_path}",
                  "--tag=test"], cwd=REPO, check=True, capture_output=True, text=True)
  result = json.loads((tmp_path / "benchmarks_sweep_test.json").read_text())
  assert list(result["variants"]) == ["one run alone (= S separate runs together)",
                                      "S = 1 in one program", "S = 3 in one program"]
  assert [row["members"] for row in result["variants"].values()] == [0, 1, 3]
  for row in result["variants"].values():
    assert row["windows"] == 2 and row["examples_per_sec_median"] > 0
  assert result["variants"]["one run alone (= S separate runs together)"][
      "ratio_to_first"] == 1.0
  markdown = (tmp_path / "benchmarks_sweep_test.md").read_text()
  assert markdown.count("in one program |") == 2 and "features:synthetic (600,16)" in markdown


@pytest.mark.slow
def test_the_accelerator_rows_dry_run(tmp_path):
  subprocess.run(["bash", "tools/sweep_call.sh", "--dry_run", str(tmp_path / "work")], cwd=REPO,
                 check=True, capture_output=True, text=True)
  for tag in ("dry_features", "dry_digits"):
    result = json.loads((tmp_path / "work" / f"benchmarks_sweep_{tag}.json").read_text())
    assert [row["members"] for row in result["variants"].values()] == [0, 1, 2]
