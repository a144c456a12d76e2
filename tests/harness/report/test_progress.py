"""experiments.report.progress: a run's position, speed and hours left from its files."""

import json

import pytest

from experiments.report import progress


def _run(folder, *, num_epochs=10, batch_size=100, steps_per_epoch=50, last_step=200,
         speeds=(100.0, 300.0, 200.0), checkpoints=(100, 200), finished=False):
  """A run folder: config.json, one training record every 50 steps (the last at `last_step`, with
  the `speeds` in order, the last one last) and a class-loss record, checkpoints, a summary."""
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps({"num_epochs": num_epochs,
                                                  "batch_size": batch_size}))
  steps = range(last_step - 50 * (len(speeds) - 1), last_step + 1, 50)
  records = [{"step": s, "epoch": s / steps_per_epoch, "loss": 1.0 / s, "train_accuracy": 0.5,
              "images_per_sec": v} for s, v in zip(steps, speeds)]
  records.append({"step": last_step, "epoch": last_step / steps_per_epoch, "train_rho": 0.3})
  (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  for step in checkpoints:
    (folder / "checkpoints" / str(step)).mkdir(parents=True)
  if finished:
    (folder / "summary.json").write_text("{}")
  return folder


def test_unfinished_run_position_speed_and_hours_left(tmp_path):
  row = progress.run_progress(_run(tmp_path / "ce/seed0"))
  assert (row.step, row.steps_total, row.epoch) == (200, 500, 4.0)
  assert row.loss == pytest.approx(1 / 200) and row.train_accuracy == 0.5
  assert row.images_per_sec == 200.0  # the median of 100, 300, 200
  assert row.checkpoint == 200 and not row.finished
  # 300 steps of 100 images at 200 images/s
  assert row.hours_left == pytest.approx(300 * 100 / 200 / 3600)


def test_speed_is_the_median_of_the_last_windows_only(tmp_path):
  row = progress.run_progress(_run(tmp_path / "r", last_step=300, speeds=(1.0, 1.0, 1.0, 50.0, 70.0)),
                              window=2)
  assert row.images_per_sec == 60.0


def test_finished_run_and_run_without_records(tmp_path):
  done = progress.run_progress(_run(tmp_path / "done", last_step=500, finished=True))
  assert done.finished and done.hours_left == 0.0 and done.step == done.steps_total == 500
  fresh = tmp_path / "fresh"
  fresh.mkdir()
  (fresh / "config.json").write_text(json.dumps({"num_epochs": 3, "batch_size": 8}))
  row = progress.run_progress(fresh)
  assert (row.step, row.steps_total, row.hours_left, row.checkpoint) == (0, None, None, None)


def test_find_runs_skips_checkpoint_contents_and_refuses_a_missing_folder(tmp_path):
  a = _run(tmp_path / "study/ce/seed0")
  b = _run(tmp_path / "study/ldam_drw/seed0")
  (a / "checkpoints/200/config.json").write_text("{}")  # inside a checkpoint: not a run
  assert progress.find_runs([tmp_path / "study"]) == [a, b]
  assert progress.find_runs([a]) == [a]
  with pytest.raises(FileNotFoundError, match="no such folder"):
    progress.find_runs([tmp_path / "absent"])


def test_command_prints_one_row_per_run(tmp_path, capsys):
  _run(tmp_path / "ce/seed0")
  _run(tmp_path / "la/seed0", last_step=500, finished=True)
  assert progress.main(["--", str(tmp_path)]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("| run | state | step | epoch |")
  assert lines[2] == (f"| {tmp_path / 'ce/seed0'} | unfinished | 200 / 500 | 4.0 | 0.005 | 0.500 "
                      "| 200 | 200 | 0.0 |")
  assert lines[3].startswith(f"| {tmp_path / 'la/seed0'} | finished | 500 / 500 | 10.0 |")


def test_command_errors_are_one_line(tmp_path, capsys):
  assert progress.main([]) == 2
  assert "expected one or more folders" in capsys.readouterr().err
  assert progress.main(["--", str(tmp_path)]) == 2
  assert "no run (a folder with a config.json)" in capsys.readouterr().err
  assert progress.main(["--", str(tmp_path / "absent")]) == 2
  assert "no such folder" in capsys.readouterr().err
