"""tools/seed_axis_call.sh: issue 49.6's accelerator call names chains that exist, and its dry run
on this CPU trains every chain's two seeds stacked with the input on the device, plans the MR2
chain from the measured images/s, and packs every run."""

import json
import os
import pathlib
import re
import subprocess
import tarfile

import pytest

from tools import accelerator_runs as ar

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "seed_axis_call.sh"


def test_the_call_names_the_stacked_chains_of_seeds_1_and_2_of_both_studies():
  text = SCRIPT.read_text()
  named = set(re.findall(r"(?:lt200|balanced200)_[a-z0-9_]+_seeds1-2", text))
  stacked = {c.name for c in ar.chains((1, 2), stack=True) if not c.study.startswith("reference")}
  assert named == stacked, named ^ stacked
  assert "--stack_seeds" in text and "--fill_seeds=0,1,2" in text
  assert "--config.input_on_device=True" in text


@pytest.mark.slow  # ≈ 2 min: seven small `experiments.compare` processes at once
def test_dry_run_trains_packs_and_plans_every_chain(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  subprocess.run(["bash", str(SCRIPT), "--dry_run", str(tmp_path)], cwd=REPO, env=env,
                 check=True, capture_output=True, text=True)
  log = (tmp_path / "out" / "driver.log").read_text()
  assert re.search(r"plan at \d+ s: .* images/s over \d+ chains", log), log
  assert re.search(r"plan: .* seeds \[0, 1, 2\] of \[0, 1, 2\] fit", log), log
  with tarfile.open(tmp_path / "out" / "runs0.tar") as tar:
    summaries = {name: json.load(tar.extractfile(name)) for name in tar.getnames()
                 if name.endswith("summary.json")}
  runs = {name.rsplit("/", 1)[0] for name in summaries}
  for study, methods in (("cifar10_lt_200", ("ce", "inverse_reweight", "logit_adjust",
                                             "ldam_drw")),
                         ("cifar10_balanced_200", ("ce", "mr2", "mr2_released"))):
    assert {f"{study}/{m}/seed{s}" for m in methods for s in (1, 2)} <= runs
  assert {f"cifar10_lt_200/{m}/seed{s}" for m in ("mr2", "mr2_inverse_reweight")
          for s in (0, 1, 2)} <= runs
  assert summaries["cifar10_lt_200/ce/seed1/summary.json"]["seed_axis"] == [1, 2]
  assert summaries["cifar10_lt_200/mr2/seed0/summary.json"]["seed_axis"] == [0, 1, 2]
