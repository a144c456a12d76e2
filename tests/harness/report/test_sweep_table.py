"""experiments.report.sweep_table: one table across comparison reports (an imbalance-factor sweep)."""

import json

import numpy as np
import pytest

from experiments.report import run_tables
from experiments.report import sweep_table
from tests.harness.report.test_run_tables import _write_run


def _report(root, accuracies):
  runs = {}
  for name, per_seed in accuracies.items():
    runs[name] = []
    for seed, acc in enumerate(per_seed):
      _write_run(root / name / f"seed{seed}", seed, acc, history=False)
      runs[name].append(root / name / f"seed{seed}")
  run_tables.write_report(runs, "ce", root / "report")
  return root / "report"


def test_sweep_table_reads_reports_in_order_with_paired_deltas(tmp_path):
  first = {"ce": [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0.9, 0.8, 0.7, 0.6, 0.4, 0.4]],
           "rw": [[0.8, 0.8, 0.7, 0.7, 0.6, 0.5], [0.9, 0.8, 0.7, 0.6, 0.5, 0.5]]}
  second = {"ce": [[0.9, 0.7, 0.5, 0.3, 0.1, 0.0], [0.9, 0.7, 0.5, 0.3, 0.2, 0.0]],
            "rw": [[0.8, 0.7, 0.5, 0.4, 0.2, 0.1], [0.8, 0.6, 0.5, 0.3, 0.1, 0.0]],
            "only_here": [[0.5] * 6, [0.5] * 6]}
  a, b = _report(tmp_path / "a", first), _report(tmp_path / "b", second)
  assert sweep_table.main([f"--reports=IF 50={a}", f"--reports=IF 200={b}",
                           f"--out={tmp_path / 'out'}"]) == 0
  rows = json.loads((tmp_path / "out" / "sweep.json").read_text())
  assert list(rows) == ["ce", "rw"]  # methods of every report only
  assert list(rows["rw"]) == ["IF 50", "IF 200"]
  per_seed = [np.mean(r) - np.mean(c) for r, c in zip(second["rw"], second["ce"])]
  delta = rows["rw"]["IF 200"]["delta"]
  assert [delta["mean"], delta["std"]] == pytest.approx([np.mean(per_seed), np.std(per_seed, ddof=1)])
  assert (delta["ahead"], delta["paired"]) == (1, 2)
  few = [np.mean(r[4:]) for r in first["rw"]]
  assert rows["rw"]["IF 50"]["few"] == pytest.approx([np.mean(few), np.std(few, ddof=1)])
  assert rows["rw"]["IF 50"]["seeds"] == 2
  text = (tmp_path / "out" / "sweep.md").read_text()
  overall = [np.mean(r) for r in second["rw"]]
  from scipy import stats
  low, high = stats.t.interval(0.95, 1, loc=np.mean(per_seed), scale=stats.sem(per_seed))
  assert (f"{100 * np.mean(overall):.1f} ± {100 * np.std(overall, ddof=1):.1f} "
          f"({100 * np.mean(per_seed):+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] (1/2))") in text
  headers = [line for line in text.splitlines() if line and not line.startswith("|")]
  assert len(headers) == 2
  assert all("mean ± sample std (ddof = 1) over 2 seeds" in line for line in headers)
  assert (tmp_path / "out" / "overall_accuracy.png").stat().st_size > 1000


def test_missing_report_is_a_clear_error(tmp_path):
  with pytest.raises(SystemExit, match="no comparison.json"):
    sweep_table.main(["--reports", f"x={tmp_path}", "--out", str(tmp_path / "out")])


def test_a_report_written_before_the_sample_std_is_refused(tmp_path):
  report = _report(tmp_path / "a", {"ce": [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]] * 2})
  table = json.loads((report / "comparison.json").read_text())
  del table["_std"]  # as written by the population-std evaluate
  (report / "comparison.json").write_text(json.dumps(table))
  with pytest.raises(SystemExit, match="sample std"):
    sweep_table.main(["--reports", f"x={report}", "--out", str(tmp_path / "out")])
