"""experiments/studies/standard_size.sh: which runs it skips, and parking an unfinished run across sessions
(`--park` copies its config, logs and latest checkpoint under experiments/studies/results/<study>/unfinished/;
the next start copies it back, and deletes it once the run has finished). Run in a scratch folder
laid out like the checkout (the script reads `experiments/studies/results` relative to where it runs)."""

import pathlib
import subprocess

import pytest

# It runs or reads the checkout's harness files: left out of the library-only run.
pytestmark = pytest.mark.harness

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "studies" / "standard_size.sh"


def _functions(*names):
  """Bash that defines the named functions of the script (each from `name() {` to its `}`)."""
  lines = SCRIPT.read_text().splitlines()
  out = []
  for name in names:
    start = lines.index(f"{name}() {{")
    end = lines.index("}", start)
    out += lines[start:end + 1]
  return "\n".join(out)


def _bash(script, cwd):
  return subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}"], cwd=cwd, check=True,
                        capture_output=True, text=True).stdout


def test_missing_lists_the_runs_not_committed(tmp_path):
  runs = tmp_path / "experiments/studies/results/study/runs"
  runs.mkdir(parents=True)
  (runs / "ce-seed1.json").write_text("{}")
  (runs / "mr2_inverse_reweight-seed1.json").write_text("{}")
  out = _bash("results=experiments/studies/results\n" + _functions("missing") + "\n"
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
  (tmp_path / "experiments/studies/results/study").mkdir(parents=True)

  out = subprocess.run(["bash", str(SCRIPT), "--park", "w"], cwd=tmp_path, check=True,
                       capture_output=True, text=True).stdout
  park = tmp_path / "experiments/studies/results/study/unfinished/ce/seed2"
  assert out.strip() == f"parked w/study/ce/seed2 (step 1000) in {park.relative_to(tmp_path)}"
  assert sorted(str(p.relative_to(park)) for p in park.rglob("*") if p.is_file()) == [
      "checkpoints/1000/data", "checkpoints/500/data", "config.json", "metrics.jsonl"]

  # A new session: no work folder. unpark copies the run back; unpark_done removes the parked copy
  # only once the run has its summary.
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(work)
  prelude = "work=w\nresults=experiments/studies/results\n" + _functions("unpark", "unpark_done") + "\n"
  _bash(prelude + "unpark study\nunpark_done study\n", tmp_path)
  assert (work / "study/ce/seed2/checkpoints/1000/data").read_text() == "1000"
  assert park.is_dir()  # still training: kept
  (work / "study/ce/seed2/summary.json").write_text("{}")
  _bash(prelude + "unpark_done study\n", tmp_path)
  assert not (tmp_path / "experiments/studies/results/study/unfinished").exists()
