"""experiments/benchmarks/seed_axis.py: every variant trains through the trainer's loop in its own
process and the report holds one row per variant with its ratio to the first (digits, tiny)."""

import json
import pathlib
import subprocess
import sys

import pytest

from experiments.benchmarks import seed_axis

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_every_variant_names_its_seeds_input_and_way():
  assert {by for _, _, _, by in seed_axis.VARIANTS.values()} == {"vmap", "map"}
  assert {device for _, _, device, _ in seed_axis.VARIANTS.values()} == {False, True}
  assert [seeds for _, seeds, _, _ in seed_axis.VARIANTS.values()][:2] == [1, 1]


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
