"""tools/standard_size.sh: which runs it skips, and parking an unfinished run across sessions
(`--park` copies its config, logs and latest checkpoint under results/<study>/unfinished/;
the next start copies it back, and deletes it once the run has finished). Run in a scratch folder
laid out like the checkout (the script reads `results` relative to where it runs)."""

import os
import pathlib
import subprocess
import sys

import pytest


SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "standard_size.sh"


def _functions(*names):
  """Bash that defines the named functions of the script (each from `name() {` to its `}`)."""
  lines = SCRIPT.read_text().splitlines()
  out = []
  for name in names:
    start = lines.index(f"{name}() {{")
    end = lines.index("}", start)
    out += lines[start:end + 1]
  return "\n".join(out)


def _park(cwd):
  """`standard_size.sh --park w` in `cwd`, its Python the test's (with the checkout importable)."""
  env = {**os.environ, "PYTHON": sys.executable,
         "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")])}
  return subprocess.run(["bash", str(SCRIPT), "--park", "w"], cwd=cwd, check=True,
                        capture_output=True, text=True, env=env).stdout


def _bash(script, cwd):
  return subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}"], cwd=cwd, check=True,
                        capture_output=True, text=True).stdout


def test_missing_lists_the_runs_not_committed(tmp_path):
  runs = tmp_path / "results/study/runs"
  runs.mkdir(parents=True)
  (runs / "ce-seed1.json").write_text("{}")
  (runs / "mr2_inverse_reweight-seed1.json").write_text("{}")
  out = _bash("results=results\n" + _functions("folder", "missing") + "\n"
              "missing study 1 ce mr2+inverse_reweight ldam=ldam_drw:head=cosine\n"
              "missing study 2 ce mr2+inverse_reweight\n", tmp_path)
  assert out.splitlines() == ["ldam=ldam_drw:head=cosine", "ce,mr2+inverse_reweight"]


def test_park_then_unpark_then_delete_when_finished(tmp_path):
  work = tmp_path / "w"
  unfinished = work / "study/ce/seed2"
  for step in (500, 1000):
    (unfinished / f"checkpoints/{step}").mkdir(parents=True)
    (unfinished / f"checkpoints/{step}/data").write_text(str(step))
  (unfinished / "config.json").write_text('{"seed": 2}')
  (unfinished / "metrics.jsonl").write_text('{"step": 1000}\n')
  (unfinished / "tensorboard").mkdir()
  finished = work / "study/ce/seed1"
  (finished / "checkpoints/500").mkdir(parents=True)
  (finished / "summary.json").write_text("{}")
  (work / "study/la/seed2").mkdir(parents=True)  # no checkpoint yet: nothing to park
  (tmp_path / "results/study").mkdir(parents=True)

  out = _park(tmp_path)
  park = tmp_path / "results/study/unfinished/ce/seed2"
  # The finished run is exported (its study is not one of the script's: nothing is left to train
  # there, so it is not parked); the unfinished one is parked.
  assert out.splitlines() == [
      f"parked w/study/ce/seed2 (step 1000) in {park.relative_to(tmp_path)}",
      "exported results/study/runs/ce-seed1.json"]
  assert (tmp_path / "results/study/runs/ce-seed1.json").read_text() == "{}"
  assert sorted(str(p.relative_to(park)) for p in park.rglob("*") if p.is_file()) == [
      "checkpoints/1000/data", "checkpoints/500/data", "config.json", "metrics.jsonl"]

  # A new session: no work folder. unpark copies the run back; unpark_done removes the parked copy
  # only once the run has its summary.
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(work)
  prelude = "work=w\nresults=results\n" + _functions("unpark", "unpark_done") + "\n"
  _bash(prelude + "unpark study\nunpark_done study\n", tmp_path)
  assert (work / "study/ce/seed2/checkpoints/1000/data").read_text() == "1000"
  assert park.is_dir()  # still training: kept
  (work / "study/ce/seed2/summary.json").write_text("{}")
  _bash(prelude + "unpark_done study\n", tmp_path)
  assert not (tmp_path / "results/study/unfinished").exists()


def _finished_run(run, steps=(15360, 19200)):
  for step in steps:
    (run / f"checkpoints/{step}").mkdir(parents=True)
  (run / "config.json").write_text("{}")
  (run / "summary.json").write_text('{"overall_accuracy": 0.7}')


def test_park_keeps_a_finished_reference_while_its_seed_has_methods_to_train(tmp_path):
  # CE of cifar10_lt_200 finished (keeping its epoch-160 checkpoint); the reweighting, which starts
  # from it, has not: CE is parked (with its summary) so that the next start can still start from
  # it, and exported.
  results = tmp_path / "results/cifar10_lt_200"
  work = tmp_path / "w"
  _finished_run(work / "cifar10_lt_200/ce/seed0")
  out = _park(tmp_path)
  park = results / "unfinished/ce/seed0"
  assert out.splitlines() == [
      f"parked w/cifar10_lt_200/ce/seed0 (step 19200) in {park.relative_to(tmp_path)}",
      "exported results/cifar10_lt_200/runs/ce-seed0.json"]
  assert sorted(p.name for p in (park / "checkpoints").iterdir()) == ["15360", "19200"]
  assert (park / "summary.json").exists()

  # The next session: the parked CE comes back finished, so it is put back in front of the methods
  # still to train (compare only re-evaluates it and starts the reweighting from it).
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(work)
  prelude = ("work=w\nresults=results\n"
             + _functions("folder", "missing", "unpark", "with_reference") + "\n")
  out = _bash(prelude + "unpark cifar10_lt_200\nwith_reference cifar10_lt_200 0 ce "
              "\"$(missing cifar10_lt_200 0 ce inverse_reweight logit_adjust)\"\n", tmp_path)
  assert out.splitlines()[-1] == "ce,inverse_reweight,logit_adjust"

  # Every method of the seed finished here but not yet exported: nothing is left to start from
  # CE, so it is not parked again, and its earlier parked copy goes.
  for name in ("inverse_reweight", "logit_adjust", "ldam_drw"):
    _finished_run(work / f"cifar10_lt_200/{name}/seed0")
  out = _park(tmp_path)
  assert "parked" not in out
  assert not (results / "unfinished").exists()
  assert sorted(p.name for p in (results / "runs").glob("*-seed0.json")) == [
      "ce-seed0.json", "inverse_reweight-seed0.json", "ldam_drw-seed0.json",
      "logit_adjust-seed0.json"]


def test_with_reference_puts_a_finished_reference_back_in_front(tmp_path):
  prelude = ("work=w\n" + _functions("folder", "with_reference") + "\n")
  (tmp_path / "w/study/ce/seed0").mkdir(parents=True)
  script = prelude + ("with_reference study 0 ce inverse_reweight,logit_adjust\n"
                      "with_reference study 1 ce inverse_reweight\n"
                      "with_reference study 0 ce ce,inverse_reweight\n")
  # No summary: the reference's run is not finished here, so it is not put back.
  assert _bash(script, tmp_path).splitlines() == [
      "inverse_reweight,logit_adjust", "inverse_reweight", "ce,inverse_reweight"]
  (tmp_path / "w/study/ce/seed0/summary.json").write_text("{}")
  assert _bash(script, tmp_path).splitlines() == [
      "ce,inverse_reweight,logit_adjust", "inverse_reweight", "ce,inverse_reweight"]
