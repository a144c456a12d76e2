"""experiments.report.run_tables: the comparison report from per-run summaries (tables, JSON, plots)."""

import json

import numpy as np
import pytest

from experiments.report import run_tables


def _write_run(path, seed, per_class, history=True):
  path.mkdir(parents=True)
  per_class = np.asarray(per_class, float)
  summary = {"seed": seed, "overall_accuracy": float(per_class.mean()),
             "per_class_accuracy": per_class.tolist(),
             "worst_class_accuracy": float(per_class.min()),
             "class_accuracy_std": float(per_class.std()),
             "train_class_counts": [300, 120, 60, 30, 10, 5],
             "many_medium_few": {"many": float(per_class[:2].mean()),
                                 "medium": float(per_class[2:4].mean()),
                                 "few": float(per_class[4:].mean())},
             "neural_collapse": {"nc1": 0.5, "nc2": 0.4, "nc2_classifier": 0.3, "nc3": 0.2,
                                 "nc4": 0.1, "rho": 0.05}}
  (path / "summary.json").write_text(json.dumps(summary))
  if history:
    rows = [{"step": s, "gamma": [1.0 + 0.01 * s * k for k in range(6)]} for s in (10, 20)]
    (path / "class_history.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_report_tables_groups_and_plots(tmp_path):
  erm = [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0.92, 0.78, 0.7, 0.62, 0.48, 0.4]]
  other = [[0.88, 0.8, 0.72, 0.65, 0.55, 0.5], [0.9, 0.8, 0.7, 0.65, 0.55, 0.46]]
  runs = {"ce": [], "mr2": []}
  for name, accs in (("ce", erm), ("mr2", other)):
    for seed, acc in enumerate(accs):
      _write_run(tmp_path / name / f"seed{seed}", seed, acc)
      runs[name].append(tmp_path / name / f"seed{seed}")
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report")
  table = json.loads((tmp_path / "report" / "comparison.json").read_text())
  # Groups from ERM's seed-mean accuracy: classes 0, 1 easy; 2, 3 medium; 4, 5 hard.
  assert table["_groups"] == [0, 0, 1, 1, 2, 2]
  hard = [np.mean([a[4], a[5]]) for a in other]
  assert table["mr2"]["easy_medium_hard"]["hard"] == pytest.approx(
      [np.mean(hard), np.std(hard, ddof=1)])  # sample std over seeds
  assert table["ce"]["overall"][0] == pytest.approx(np.mean([np.mean(a) for a in erm]))
  overall = [np.mean(a) for a in other]  # overall: mean ± sample std over seeds, in percent
  assert (f"| mr2 | {100 * np.mean(overall):.1f} ± {100 * np.std(overall, ddof=1):.1f} |"
          in markdown)
  per_class = np.array(other)
  np.testing.assert_allclose(table["mr2"]["per_class_std"], per_class.std(0, ddof=1))
  assert table["_std"] == "sample std (ddof = 1)"
  delta = table["mr2"]["delta_vs_reference"]["hard"]
  per_seed = [np.mean(o[4:]) - np.mean(e[4:]) for o, e in zip(other, erm)]  # same seed pairs
  assert [delta["mean"], delta["std"]] == pytest.approx([np.mean(per_seed), np.std(per_seed, ddof=1)])
  assert [delta["ahead"], delta["behind"], delta["paired"]] == [2, 0, 2]  # ahead on both seeds
  assert delta["deltas"] == pytest.approx(per_seed)
  assert "Paired Δ vs ce, same seed" in markdown
  # Every table's header states the spread: overall, paired Δ and per-class tables.
  headers = [line for line in markdown.split("What the paired Δ supports")[0].splitlines()
             if line and not line.startswith("|")]
  verdicts = markdown.split("What the paired Δ supports")[1].splitlines()
  assert any(line.startswith("- mr2, Δ Hard (2 classes: 4, 5): +7.0 points; 95 % interval "
                             "[+0.6, +13.4], 2/2 seeds ahead, sign test p = 0.5 — supported (a gain)")
             for line in verdicts)
  # The note on NC's centring (long-tailed counts here) is no table header: these runs recorded
  # no class-balanced values (experiments/report/nc_centring.py, tests/harness/report/test_nc_centring.py).
  notes = [line for line in markdown.splitlines() if line.startswith("NC1–NC3 above centre")]
  assert len(notes) == 1 and notes[0].endswith("these runs did not record them.")
  headers = [line for line in headers if line not in notes]
  assert len(headers) == 3
  assert all("sample std (ddof = 1)" in line or "95 % t-interval" in line for line in headers)
  assert "mean ± sample std (ddof = 1) over 2 seeds (seeds 0, 1)" in headers[0]  # which seeds
  assert "mean ± std" not in markdown
  shots = table["mr2"]["delta_vs_reference"]
  assert {"medium", "medium_shot", "many_shot", "few_shot"} <= set(shots)
  # The frequency splits and the difficulty groups have distinct column names.
  header = next(line for line in markdown.splitlines() if line.startswith("| method | overall"))
  assert "| Many-shot | Medium-shot | Few-shot | Easy | Medium | Hard |" in header
  assert shots["medium_shot"]["mean"] == pytest.approx(
      np.mean([np.mean(o[2:4]) - np.mean(e[2:4]) for o, e in zip(other, erm)]))
  assert (tmp_path / "report" / "per_class_accuracy.png").stat().st_size > 1000
  assert (tmp_path / "report" / "mr2_gamma.png").exists()


def test_paired_against_another_method_keeps_erm_groups(tmp_path):
  erm = [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0.92, 0.78, 0.7, 0.62, 0.48, 0.4]]
  uniform = [[0.5, 0.5, 0.9, 0.9, 0.3, 0.3], [0.52, 0.5, 0.9, 0.88, 0.31, 0.3]]
  gamma = [[0.5, 0.5, 0.9, 0.9, 0.35, 0.32], [0.5, 0.5, 0.9, 0.9, 0.3, 0.36]]
  runs = {}
  for name, accs in (("ce", erm), ("uniform", uniform), ("gamma", gamma)):
    runs[name] = []
    for seed, acc in enumerate(accs):
      _write_run(tmp_path / name / f"seed{seed}", seed, acc, history=False)
      runs[name].append(tmp_path / name / f"seed{seed}")
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report", paired_against="uniform")
  table = json.loads((tmp_path / "report" / "comparison.json").read_text())
  assert table["_groups"] == [0, 0, 1, 1, 2, 2]  # still from ERM, not from the uniform runs
  assert table["_paired_against"] == "uniform"
  assert "delta_vs_reference" not in table["uniform"]
  per_seed = [np.mean(g[4:]) - np.mean(u[4:]) for g, u in zip(gamma, uniform)]
  hard = table["gamma"]["delta_vs_reference"]["hard"]
  assert [hard["mean"], hard["std"]] == pytest.approx([np.mean(per_seed), np.std(per_seed, ddof=1)])
  hard = table["ce"]["delta_vs_reference"]["hard"]
  assert (hard["ahead"], hard["paired"]) == (2, 2)
  assert "Paired Δ vs uniform, same seed" in markdown
  with pytest.raises(KeyError, match="paired_against"):
    run_tables.method_table({"ce": []}, "ce", paired_against="nope")


def test_missing_summary_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="summary.json"):
    run_tables.load_summaries([tmp_path / "nope"])


def test_rho_over_training_mean_std_at_common_epochs_table_and_plot(tmp_path):
  rhos = {"ce": [[0.9, 0.7, 0.6], [0.8, 0.7, 0.5]], "rw": [[0.9, 0.4, 0.2], [0.7, 0.3, 0.25]]}
  runs = {}
  for name, per_seed in rhos.items():
    runs[name] = []
    for seed, values in enumerate(per_seed):
      run = tmp_path / name / f"seed{seed}"
      _write_run(run, seed, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], history=False)
      rows = [{"step": 7 * (e + 1), "loss": 1.0} for e in range(3)]  # ordinary log records
      rows += [{"step": 10 * (e + 1), "epoch": float(e + 1), "train_rho": v}
               for e, v in enumerate(values)]
      if seed == 1:  # an extra epoch in one run only: not a common epoch, left out
        rows.append({"step": 40, "epoch": 4.0, "train_rho": 0.1})
      (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
      runs[name].append(run)
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report")
  table = json.loads((tmp_path / "report" / "comparison.json").read_text())
  history = table["_rho_history"]["rw"]
  assert history["epoch"] == [1.0, 2.0, 3.0]
  values = np.array(rhos["rw"])
  np.testing.assert_allclose(history["mean"], values.mean(0))
  np.testing.assert_allclose(history["std"], values.std(0, ddof=1))  # sample std over seeds
  assert history["seeds"] == 2
  assert "| rw | 0.800 ± 0.141 | 0.350 ± 0.071 | 0.225 ± 0.035 |" in markdown
  assert "training (mean ± sample std (ddof = 1) over 2 seeds):" in markdown
  assert (tmp_path / "report" / "rho_over_training.png").stat().st_size > 1000
  # Runs without the records: no section, no plot.
  assert run_tables.metric_history([tmp_path / "nope"]) is None


def test_rho_table_uses_the_epochs_every_method_logged():
  histories = {"a": {"epoch": [1.0, 2.0, 3.0], "mean": [0.9, 0.8, 0.7], "std": [0.0, 0.0, 0.0]},
               "b": {"epoch": [2.0, 3.0], "mean": [0.5, 0.4], "std": [0.1, 0.1]}}
  text = run_tables.rho_markdown(histories)
  assert "| method | epoch 2 | epoch 3 |" in text
  assert "| a | 0.800 ± 0.000 | 0.700 ± 0.000 |" in text
  assert "| b | 0.500 ± 0.100 | 0.400 ± 0.100 |" in text


def test_rho_table_shows_every_logged_epoch_up_to_ten_then_ten_spread_over_them():
  def histories(epochs):
    return {"a": {"epoch": epochs, "mean": [0.5] * len(epochs), "std": [0.0] * len(epochs)}}

  every_20 = [float(e) for e in range(20, 201, 20)]  # a 200-epoch run's ten records
  header = run_tables.rho_markdown(histories(every_20)).splitlines()[2]
  assert header == "| method | " + " | ".join(f"epoch {e:g}" for e in every_20) + " |"
  header = run_tables.rho_markdown(histories([float(e) for e in range(1, 41)])).splitlines()[2]
  shown = [float(cell.split()[1]) for cell in header.strip("| ").split(" | ")[1:]]
  assert len(shown) == 10 and shown[0] == 1.0 and shown[-1] == 40.0


def test_nc_over_training_mean_std_table_and_plot_where_the_runs_logged_it(tmp_path):
  """NC1–NC4 of the periodic training pass: mean and sample std over seeds at the common epochs,
  a table per metric and one plot; a method whose runs did not log them is left out."""
  nc2 = {"ce": [[0.9, 0.6], [0.7, 0.4]], "rw": [[0.8, 0.3], [0.6, 0.2]]}
  runs = {}
  for name, per_seed in nc2.items():
    runs[name] = []
    for seed, values in enumerate(per_seed):
      run = tmp_path / name / f"seed{seed}"
      _write_run(run, seed, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], history=False)
      rows = [{"step": 10 * (e + 1), "epoch": float(e + 1), "train_rho": 0.5, "train_nc1": 2.0,
               "train_nc2": v, "train_nc3": 0.5, "train_nc4": 0.1} for e, v in enumerate(values)]
      (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
      runs[name].append(run)
  runs["plain"] = []
  for seed in range(2):  # no NC records
    run = tmp_path / "plain" / f"seed{seed}"
    _write_run(run, seed, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], history=False)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "epoch": 1.0, "train_rho": 0.4})
                                       + "\n")
    runs["plain"].append(run)
  markdown = run_tables.write_report(runs, "ce", tmp_path / "report")
  table = json.loads((tmp_path / "report" / "comparison.json").read_text())
  assert set(table["_nc_history"]) == {"ce", "rw"}
  history = table["_nc_history"]["rw"]["train_nc2"]
  values = np.array(nc2["rw"])
  np.testing.assert_allclose(history["mean"], values.mean(0))
  np.testing.assert_allclose(history["std"], values.std(0, ddof=1))
  assert "NC2 of the training set's features, over training" in markdown
  assert "| rw | 0.700 ± 0.141 | 0.250 ± 0.071 |" in markdown
  assert (tmp_path / "report" / "nc_over_training.png").stat().st_size > 1000
