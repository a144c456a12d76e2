"""experiments/studies/accelerator_runs.py: the chains (standard_size.sh's specs), the deadline, what
is packed (checkpoints only where a run goes on from them) within the device tool's file limits, and
the slimmed CIFAR-10 copy (the same images for every chain)."""

import importlib
import pathlib
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from experiments.data.in_memory_sources import decode_jpegs
from experiments.data.loading import load_data
from experiments.data.long_tail import long_tail_indices
from experiments.studies import accelerator_runs as ar
from tests.test_reference_script import cifar_folder

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_CIFAR = REPO.parent / "shared" / "data" / "cifar10_jpeg"


def _specs(study):
  return subprocess.run(["bash", "experiments/studies/standard_size.sh", "--specs", study], cwd=REPO,
                        check=True, capture_output=True, text=True).stdout.split()


def test_chains_train_every_spec_of_standard_size_once():
  chains = ar.chains()
  for study in ("cifar10_lt_200", "cifar10_balanced_200"):
    trained = [m for c in chains if c.study == study for m in c.methods]
    assert sorted(trained) == sorted(_specs(study))
  # The reweighting runs after CE in one process: it starts from CE's epoch-160 checkpoint.
  assert next(c for c in chains if c.name == "lt200_ce").methods == ("ce", "inverse_reweight")
  names = [c.name for c in chains]
  assert len(set(names)) == len(names)
  # Issue 39's chains are queued before the reference script's.
  first_ref = min(i for i, c in enumerate(chains) if c.study.startswith("reference_"))
  assert all(c.study.startswith("reference_") for c in chains[first_ref:])


def test_chains_per_seed():
  chains = {c.name: c for c in ar.chains((0, 2))}
  assert chains["lt200_ce"].seed == 0 and chains["lt200_ce_seed2"].seed == 2
  assert chains["balanced200_mr2_seed2"].methods == ("mr2",)
  assert all(c.seed == 0 for c in chains.values() if c.study.startswith("reference_"))


def test_command_puts_extra_flags_last_and_a_report_per_chain(tmp_path):
  chain = ar.Chain("x", "study", "cifar10_lt_200", ("ce", "inverse_reweight"),
                   flags=("--config.num_epochs=200",))
  cmd = ar.command(chain, "data", tmp_path, 2, ("--config.num_epochs=2",))
  assert cmd[-2:] == ["--config.num_epochs=200", "--config.num_epochs=2"]
  assert f"--report_dir={tmp_path / 'study' / 'report_' / 'x'}" in cmd
  assert "--methods=ce,inverse_reweight" in cmd and "--config.data_workers=2" in cmd


def _run(folder, finished, steps=(100, 200)):
  folder.mkdir(parents=True)
  (folder / "config.json").write_text("{}")
  (folder / "metrics.jsonl").write_text("{}\n")
  if finished:
    (folder / "summary.json").write_text("{}")
  for step in steps:
    (folder / "checkpoints" / str(step)).mkdir(parents=True)
    (folder / "checkpoints" / str(step) / "state").write_bytes(b"x" * 1000)


@pytest.mark.parametrize("follower_finished", [False, True])
def test_members_keep_checkpoints_only_where_a_run_goes_on(tmp_path, follower_finished):
  chain = ar.Chain("lt200_ce", "s", "c", ("ce", "inverse_reweight"))
  alone = ar.Chain("lt200_la", "s", "c", ("logit_adjust",))
  _run(tmp_path / "s" / "ce" / "seed0", finished=True)
  _run(tmp_path / "s" / "inverse_reweight" / "seed0", finished=follower_finished)
  _run(tmp_path / "s" / "logit_adjust" / "seed0", finished=False)
  (tmp_path / "logs").mkdir()
  (tmp_path / "logs" / "lt200_ce.log").write_text("log")
  files = {str(p.relative_to(tmp_path)) for p, _ in ar.members(tmp_path, [chain, alone])}
  # An unfinished run keeps its checkpoints (resumed on the CPU); a finished CE keeps them only
  # while the reweighting, which starts from its epoch-160 checkpoint, has not finished.
  assert "s/logit_adjust/seed0/checkpoints/200/state" in files
  assert ("s/ce/seed0/checkpoints/100/state" in files) == (not follower_finished)
  assert ("s/inverse_reweight/seed0/checkpoints/200/state" in files) == (not follower_finished)
  assert {"s/ce/seed0/summary.json", "s/ce/seed0/config.json", "logs/lt200_ce.log"} <= files


def test_pack_stays_within_the_file_limits_and_reports_what_is_left(tmp_path, monkeypatch):
  monkeypatch.setattr(ar, "MAX_FILES", 3)
  monkeypatch.setattr(ar, "MAX_FILE_BYTES", 2500)
  work, out = tmp_path / "work", tmp_path / "out"
  (work / "logs").mkdir(parents=True)
  (work / "logs" / "a.log").write_bytes(b"l" * 100)
  files = [(work / "logs" / "a.log", 100)]
  for run in range(4):  # 4 runs of 2 x 900 bytes + a log: 3 bins of 2,500 hold 6 of the 8 files
    for name in ("x", "y"):
      path = work / "s" / f"m{run}" / "seed0" / name
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(b"d" * 900)
      files.append((path, 900))
  lines = []
  ar.pack(work, out, files, lines.append)
  tars = sorted(out.glob("runs*.tar"))
  assert 1 <= len(tars) <= 3
  packed = []
  for tar in tars:
    with tarfile.open(tar) as t:
      members = t.getmembers()
    assert sum(m.size for m in members) <= 2500
    packed += [m.name for m in members]
  assert "logs/a.log" in packed
  assert len(packed) == len(set(packed)) == len(files) - 2
  assert "left out 2:" in lines[-1]


def test_deadline_stops_the_running_chains_and_skips_the_queued(tmp_path, monkeypatch):
  def fake_command(chain, *args):
    code = "raise SystemExit(3)" if chain.name == "fails" else "import time; time.sleep(60)"
    return [sys.executable, "-c", code]

  monkeypatch.setattr(ar, "command", fake_command)
  chains = [ar.Chain(n, "s", "c", ("ce",)) for n in ("fails", "slow", "queued")]
  outcome = ar.run_chains(chains, "data", tmp_path, jobs=1, deadline_s=8, data_workers=1,
                          log=lambda _: None)
  assert outcome["fails"].startswith("exit 3")
  assert outcome["slow"].startswith("stopped at the deadline")
  assert outcome["queued"] == "not started (deadline)"
  assert (tmp_path / "logs" / "slow.log").exists()


def _same_data(config_name, original, slim):
  loaded = []
  for data_dir in (original, slim):
    config = importlib.import_module(f"experiments.configs.{config_name}").get_config()
    config.data_dir, config.seed = str(data_dir), 0
    train, _, test = load_data(config)
    loaded.append((train.images, train.labels, test.images, test.labels))
  return all(np.array_equal(a, b) for a, b in zip(*loaded))


def test_slim_data_keeps_every_selected_image(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  original = cifar_folder(tmp_path / "cifar", per_class_train=30, per_class_test=3)
  chains = [c for c in ar.chains() if c.name == "lt200_ce"]
  ar.slim_data(original, tmp_path / "slim", chains)
  assert _same_data("cifar10_lt_200", original, tmp_path / "slim")
  before = (original / "train.npz").stat().st_size
  assert (tmp_path / "slim" / "train.npz").stat().st_size < before
  # The images no chain selects are grey: the copy is not the original under another name.
  with np.load(tmp_path / "slim" / "train.npz") as npz:
    images = decode_jpegs(npz["jpeg"], npz["offsets"])
    labels = npz["labels"]
  kept = long_tail_indices(labels, 10, 100.0, 0, selection="ldam")
  dropped = np.setdiff1d(np.arange(len(labels)), kept)
  assert 0 < len(dropped) < len(labels)
  assert np.abs(images[dropped].astype(int) - 128).max() <= 2
  assert np.abs(images[kept].astype(int) - 128).max() > 2


# Decodes the 50,000 training images a few times (about 15 s).
@pytest.mark.skipif(not SHARED_CIFAR.is_dir(), reason="needs ../shared/data/cifar10_jpeg")
def test_slim_copy_of_the_shared_cifar10_gives_every_config_the_same_data(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  chains = ar.chains()
  ar.slim_data(SHARED_CIFAR, tmp_path / "slim", chains)
  for config in sorted({c.config for c in chains}):
    assert _same_data(config, SHARED_CIFAR, tmp_path / "slim"), config
