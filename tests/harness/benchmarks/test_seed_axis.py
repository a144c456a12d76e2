"""experiments/benchmarks/seed_axis.py: the variants train through the trainer's loop, each in its
own process, and the report holds one row per variant with its ratio to the first (digits, tiny)."""

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


# The module is run, not imported: its absl flags live in the global FLAGS, as input_throughput's do.
@pytest.mark.slow  # ≈ 1 min: three small trainer processes
def test_the_benchmark_runs_its_variants_and_writes_its_report(tmp_path):
  subprocess.run([sys.executable, "-m", "experiments.benchmarks.seed_axis",
                  "--config=experiments/configs/digits_lt.py", "--seeds=2", "--steps=6",
                  "--window=2", "--rounds=1", "--variants=s1_host,vmap_host,map_device",
                  f"--out={tmp_path}", "--tag=test"], cwd=REPO, check=True, capture_output=True,
                 text=True)
  result = json.loads((tmp_path / "benchmarks_seed_axis_test.json").read_text())
  assert list(result["variants"]) == ["S=1, host input", "S=2 vmap, host input",
                                      "S=2 map, device input"]
  for row in result["variants"].values():
    assert row["windows"] == 2 and row["images_per_sec_median"] > 0
  assert result["variants"]["S=1, host input"]["ratio_to_first"] == 1.0
  markdown = (tmp_path / "benchmarks_seed_axis_test.md").read_text()
  assert markdown.count("| S=") == 3
