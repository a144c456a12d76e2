"""tools/accelerator_runs.py: the chains (standard_size.sh's specs), the deadline, what
is packed (checkpoints only where a run goes on from them) within the device tool's file limits, and
the slimmed CIFAR-10 copy (the same images for every chain)."""

import importlib
import json
import pathlib
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

from experiments.common.errors import DataError
from experiments.data.in_memory_sources import decode_jpegs
from experiments.data.loading import load_data
from experiments.data.long_tail import long_tail_indices
from tools import accelerator_runs as ar
from tests.tools.test_reference import cifar_folder

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_CIFAR = REPO.parent / "shared" / "data" / "cifar10_jpeg"


def _specs(study):
  return subprocess.run(["bash", "tools/standard_size.sh", "--specs", study], cwd=REPO,
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
  assert chains["lt200_ce"].seeds == (0,) and chains["lt200_ce_seed2"].seeds == (2,)
  assert chains["balanced200_mr2_seed2"].methods == ("mr2",)
  assert all(c.seeds == (0,) for c in chains.values() if c.study.startswith("reference_"))


def test_stacked_chains_train_every_seed_in_one_process(tmp_path):
  chains = {c.name: c for c in ar.chains((1, 2), stack=True)}
  assert chains["lt200_ce_seeds1-2"].seeds == (1, 2)
  assert chains["lt200_ce_seeds1-2"].methods == ("ce", "inverse_reweight")
  cmd = ar.command(chains["balanced200_mr2_seeds1-2"], "data", tmp_path, 2)
  assert "--seeds=1,2" in cmd and "--stack_seeds" in cmd
  assert "--stack_seeds" not in ar.command(ar.fill_chain((0,)), "data", tmp_path, 2)
  assert ar.fill_chain((0, 1)).methods == ("mr2", "mr2+inverse_reweight")
  assert [p.parent.name + "/" + p.name for p in ar.run_folders(
      tmp_path, chains["lt200_ce_seeds1-2"], "inverse_reweight")] == [
          "inverse_reweight/seed1", "inverse_reweight/seed2"]


@pytest.mark.parametrize("rate, left, per_seed, time_left, fit", [
    (1000.0, 100_000.0, 100_000.0, 300.0, (0, 1)),     # 300,000 images of room: two seeds
    (1000.0, 100_000.0, 100_000.0, 399.9, (0, 1)),
    (1000.0, 100_000.0, 100_000.0, 400.0, (0, 1, 2)),
    (1000.0, 400_000.0, 100_000.0, 300.0, ()),         # the started chains do not finish
    (0.0, 0.0, 1.0, 300.0, ()),
])
def test_seeds_that_fit_take_the_aggregate_rate_as_fixed(rate, left, per_seed, time_left, fit):
  assert ar.seeds_that_fit(rate, left, per_seed, time_left, (0, 1, 2)) == fit


def _window_run(folder, step, epoch, images_per_sec, finished=False, num_epochs=200):
  folder.mkdir(parents=True)
  # A CE run's config holds no reweighting: the deferred start comes from the study's config file.
  (folder / "config.json").write_text(json.dumps(
      {"num_epochs": num_epochs, "batch_size": 128, "loss": "ce"}))
  lines = [{"step": 50, "epoch": 50 / 97, "images_per_sec": 10.0},
           {"step": step, "epoch": epoch, "images_per_sec": images_per_sec}]
  (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
  if finished:
    (folder / "summary.json").write_text("{}")


def test_call_plan_reads_the_running_chains_windows(tmp_path):
  chain = ar.Chain("lt200_ce_seeds1-2", "cifar10_lt_200", "cifar10_lt_200",
                   ("ce", "inverse_reweight"), (1, 2))
  for seed in (1, 2):
    _window_run(tmp_path / "cifar10_lt_200" / "ce" / f"seed{seed}", 970, 10.0, 5000.0)
  logged = []
  # Left: per seed 190 epochs of CE and 40 of the reweighting, 97 steps of 128: 5.71 M in all.
  rate, left = ar.chain_load(tmp_path, chain)
  assert rate == 10000.0 and left == pytest.approx(2 * 230 * 97 * 128)
  # Per seed of MR2 then MR2 + reweighting: 240 epochs, 2.98 M. At 10,000 images/s a deadline of
  # 500 s leaves 380 s (3.8 M images) after the start margin: the chain does not finish and is
  # stopped, and one seed of the fill fits in its place; 1,500 s leaves 13.8 M, 8.09 M after the
  # chain's: the chain and two seeds.
  stop, fill = ar.call_plan(tmp_path, [chain], ar.fill_chain((0, 1, 2)), 60.0, 500.0, logged.append)
  assert stop == [chain] and fill.seeds == (0,) and "0 of them finish" in logged[0]
  stop, fill = ar.call_plan(tmp_path, [chain], ar.fill_chain((0, 1, 2)), 60.0, 1500.0,
                            logged.append)
  assert stop == [] and fill.seeds == (0, 1) and fill.name == "lt200_mr2_seeds0-1"
  assert "seeds [0, 1] of [0, 1, 2] fit" in logged[-1]
  # Before a window after the compilation, no plan.
  (tmp_path / "cifar10_lt_200" / "ce" / "seed2" / "metrics.jsonl").write_text("")
  assert ar.call_plan(tmp_path, [chain], ar.fill_chain((0,)), 60.0, 1500.0, print) is None


@pytest.mark.parametrize("lefts, time_left, kept", [
    ((1000.0, 1000.0, 1000.0), 3.0, 3),   # 3,000 images of room at 1,000 images/s
    ((1000.0, 1000.0, 1000.0), 2.9, 2),
    ((2500.0, 100.0, 100.0), 2.0, 0),     # the first does not fit: nothing after it is kept
    ((), 10.0, 0),
])
def test_chains_that_fit_keep_the_first_chains_in_order(lefts, time_left, kept):
  loads = [(1000.0 / len(lefts), left) for left in lefts]
  assert ar.chains_that_fit(loads, time_left) == kept


def test_the_plan_stops_the_chains_that_do_not_fit_and_starts_the_fill(tmp_path, monkeypatch):
  """run_chains with a plan: two running chains, the plan stops the second and queues a third."""
  started = []

  class Proc:
    def __init__(self, cmd, **kwargs):
      self.name = next(a for a in cmd if a.startswith("--report_dir")).rsplit("/", 1)[1]
      self.pid, self.returncode, self.killed = len(started) + 10**6, None, False
      started.append(self)

    def poll(self):
      if self.name == "fill":  # the fill finishes at once: the run ends without waiting out the deadline
        self.returncode = 0
      return self.returncode

    def wait(self, timeout=None):
      self.returncode = -15
      return self.returncode

  monkeypatch.setattr(ar.subprocess, "Popen", Proc)
  monkeypatch.setattr(ar.os, "killpg", lambda pid, sig: next(
      p for p in started if p.pid == pid).__setattr__("killed", True))
  a, b = (ar.Chain(n, "s", "c", ("ce",)) for n in ("a", "b"))
  fill = ar.Chain("fill", "s", "c", ("mr2",))
  calls = []

  def plan(elapsed, running):
    calls.append([c.name for c in running])
    if len(calls) < 2:
      return None  # no window yet
    for proc in started:
      if proc.name == "a":
        proc.returncode = 0  # a finishes after the plan
    return [b], fill

  outcome = ar.run_chains([a, b], "data", tmp_path, 3, 30.0, 1, lambda m: None, plan=plan,
                          start_margin_s=0.0, grace_s=0.1)
  assert calls[:2] == [["a", "b"], ["a", "b"]]
  assert [p.name for p in started] == ["a", "b", "fill"]
  assert outcome["b"].startswith("stopped by the plan") and started[1].killed
  assert outcome["a"].startswith("exit 0")
  assert outcome["fill"].startswith("exit 0")


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
  # An interrupted save's temporary folder: never packed.
  (folder / "checkpoints" / "300.orbax-checkpoint-tmp-1").mkdir()
  (folder / "checkpoints" / "300.orbax-checkpoint-tmp-1" / "state").write_bytes(b"x")


@pytest.mark.parametrize("follower_finished", [False, True])
def test_members_keep_checkpoints_only_where_a_run_goes_on(tmp_path, follower_finished):
  chain = ar.Chain("lt200_ce", "s", "c", ("ce", "inverse_reweight"))
  alone = ar.Chain("lt200_la", "s", "c", ("logit_adjust",))
  _run(tmp_path / "s" / "ce" / "seed0", finished=True)
  _run(tmp_path / "s" / "inverse_reweight" / "seed0", finished=follower_finished)
  _run(tmp_path / "s" / "logit_adjust" / "seed0", finished=False)
  (tmp_path / "logs").mkdir()
  (tmp_path / "logs" / "lt200_ce.log").write_text("log")
  units = ar.members(tmp_path, [chain, alone])
  priority = {str(p.relative_to(tmp_path)): k for k, files in units for p, _ in files}
  # An unfinished run keeps its checkpoints (resumed on the CPU), the latest step first.
  assert priority["s/logit_adjust/seed0/checkpoints/200/state"] == 3
  assert priority["s/logit_adjust/seed0/checkpoints/100/state"] == 4
  # A finished CE keeps every step (the reweighting starts from its epoch-160 one) only while the
  # reweighting has not finished.
  assert ("s/ce/seed0/checkpoints/100/state" in priority) == (not follower_finished)
  # The reweighting comes back when finished (without checkpoints), not at all otherwise.
  assert ("s/inverse_reweight/seed0/config.json" in priority) == follower_finished
  assert not any("checkpoints" in k for k in priority if k.startswith("s/inverse_reweight"))
  assert not any("tmp" in k for k in priority)
  assert priority["logs/lt200_ce.log"] == 0 and priority["s/ce/seed0/summary.json"] == 1
  # A run's files without checkpoints are one unit, a checkpoint step another.
  ce_files = next(files for k, files in units if k == 1 and "ce/seed0" in str(files[0][0]))
  assert {p.name for p, _ in ce_files} == {"config.json", "metrics.jsonl", "summary.json"}


def test_pack_keeps_units_whole_within_the_limits_results_before_checkpoints(tmp_path, monkeypatch):
  monkeypatch.setattr(ar, "MAX_FILES", 3)
  monkeypatch.setattr(ar, "MAX_FILE_BYTES", 60_000)
  monkeypatch.setattr(ar, "MAX_TOTAL_BYTES", 150_000)
  work, out = tmp_path / "work", tmp_path / "out"
  units = []

  def unit(priority, *names, size):
    files = []
    for name in names:
      path = work / name
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(b"d" * size)
      files.append((path, size))
    units.append((priority, files))

  # Checkpoint steps listed first: packing goes by priority, not by the order given.
  for run in range(6):
    unit(3, f"s/m{run}/seed0/checkpoints/200/a", f"s/m{run}/seed0/checkpoints/200/b", size=15_000)
  for run in range(6):
    unit(1, f"s/m{run}/seed0/summary.json", f"s/m{run}/seed0/metrics.jsonl", size=2_000)
  unit(0, "logs/a.log", size=100)
  (out).mkdir()
  (out / "runs5.tar").write_bytes(b"stale")
  lines = []
  left = ar.pack(work, out, units, lines.append)
  tars = sorted(out.glob("runs*.tar"))
  assert 1 <= len(tars) <= 3 and out / "runs5.tar" not in tars
  assert all(t.stat().st_size <= 60_000 for t in tars)
  assert sum(t.stat().st_size for t in tars) <= 150_000
  packed = set()
  for tar in tars:
    with tarfile.open(tar) as t:
      packed |= set(t.getnames())
  # Every log and run file came back; what is left out is whole checkpoint steps.
  assert "logs/a.log" in packed
  assert all(f"s/m{r}/seed0/summary.json" in packed for r in range(6))
  assert left and all("checkpoints/200" in str(p) for p in left)
  for run in range(6):
    step = {f"s/m{run}/seed0/checkpoints/200/{n}" in packed for n in "ab"}
    assert len(step) == 1, run  # a step whole or not at all
  assert f"left out {len(left)}:" in lines[-1]


def test_deadline_stops_the_running_chains_and_skips_the_queued(tmp_path, monkeypatch):
  def fake_command(chain, *args):
    code = {"fails": "raise SystemExit(3)",
            # ignores SIGTERM: killed with SIGKILL after the grace
            "stubborn": "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "time.sleep(60)"}.get(chain.name, "import time; time.sleep(60)")
    return [sys.executable, "-c", code]

  monkeypatch.setattr(ar, "command", fake_command)
  chains = [ar.Chain(n, "s", "c", ("ce",)) for n in ("fails", "stubborn", "slow", "queued")]
  begin = time.monotonic()
  outcome = ar.run_chains(chains, "data", tmp_path, jobs=2, deadline_s=4, data_workers=1,
                          log=lambda _: None, grace_s=1, start_margin_s=1)
  assert time.monotonic() - begin < 4 + 1 + 5
  assert outcome["fails"].startswith("exit 3")
  assert outcome["stubborn"].startswith("stopped at the deadline")
  assert outcome["slow"].startswith("stopped at the deadline")
  assert outcome["queued"] == "not started (deadline)"
  assert (tmp_path / "logs" / "stubborn.log").exists()


def test_no_chain_starts_too_close_to_the_deadline(tmp_path, monkeypatch):
  monkeypatch.setattr(ar, "command", lambda *a: [sys.executable, "-c", "pass"])
  outcome = ar.run_chains([ar.Chain("x", "s", "c", ("ce",))], "data", tmp_path, jobs=1,
                          deadline_s=30, data_workers=1, log=lambda _: None, start_margin_s=60)
  assert outcome == {"x": "not started (deadline)"}


def _same_data(config_name, original, slim, seed=0):
  loaded = []
  for data_dir in (original, slim):
    config = importlib.import_module(f"experiments.configs.{config_name}").get_config()
    config.data_dir, config.seed = str(data_dir), seed
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


def test_slim_copy_refuses_its_own_source_and_a_slim_source_and_runs_check_it(tmp_path,
                                                                              monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  original = cifar_folder(tmp_path / "cifar", per_class_train=30, per_class_test=3)
  lt = [c for c in ar.chains() if c.name == "lt200_ce"]
  with pytest.raises(DataError, match="would replace its source"):
    ar.slim_data(original, original, lt)
  ar.slim_data(original, tmp_path / "slim", lt)
  with pytest.raises(DataError, match="itself a slimmed copy"):
    ar.slim_data(tmp_path / "slim", tmp_path / "slim2", lt)
  ar.check_data(tmp_path / "slim", lt)  # the chains it was made for: fine
  balanced = [c for c in ar.chains() if c.name == "balanced200_ce"]  # selects every image here
  with pytest.raises(DataError, match="grey stand-in"):
    ar.check_data(tmp_path / "slim", balanced)
  assert ar.main(["--only=no_such_chain"]) == 2


# Decodes the 50,000 training images a few times (about 15 s).
@pytest.mark.slow  # ≈ 20 s over the real CIFAR-10; test_slim_data_keeps_every_selected_image in the default run
@pytest.mark.skipif(not SHARED_CIFAR.is_dir(), reason="needs ../shared/data/cifar10_jpeg")
def test_slim_copy_of_the_shared_cifar10_gives_every_config_the_same_data(tmp_path, monkeypatch):
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  chains = ar.chains((0, 1, 2))
  ar.slim_data(SHARED_CIFAR, tmp_path / "slim", chains)
  ar.check_data(tmp_path / "slim", chains)
  for config, seed in sorted({(c.config, seed) for c in chains for seed in c.seeds}):
    assert _same_data(config, SHARED_CIFAR, tmp_path / "slim", seed), (config, seed)


def test_end_to_end_one_tiny_chain_comes_back_packed(tmp_path, monkeypatch):
  """The commands `command` builds are accepted by experiments.compare, and the run comes back."""
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  original = cifar_folder(tmp_path / "cifar", per_class_train=30, per_class_test=3)
  tiny = ["--config.model=small_cnn", "--config.num_epochs=2", "--config.warmup_epochs=1",
          "--config.batch_size=20", "--config.eval_batch_size=50", "--config.nc_metrics=False"]
  out = tmp_path / "out"
  assert ar.main([f"--data_dir={original}", f"--workdir={tmp_path / 'work'}", f"--out={out}",
                  "--only=lt200_logit_adjust", "--deadline_s=600", "--jobs=1",
                  *(f"--extra={flag}" for flag in tiny)]) == 0
  with tarfile.open(out / "runs0.tar") as tar:
    names = set(tar.getnames())
  assert "cifar10_lt_200/logit_adjust/seed0/summary.json" in names, sorted(names)[:20]
  assert "logs/lt200_logit_adjust.log" in names
  assert "exit 0" in (out / "driver.log").read_text()
  assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the driver's handler is gone again
