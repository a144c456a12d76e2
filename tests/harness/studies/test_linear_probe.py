"""The linear-probe study (experiments/studies/linear_probe.py and probe_tables.py) on tiny
synthetic cached features: each row is the trainer's run of its registry entry, and the tables
are rebuilt from the run files."""

import json

import numpy as np

from experiments.data import cached_features
from experiments.data.in_memory_sources import CIFAR10_CLASS_NAMES
from experiments.data.long_tail import many_medium_few
from experiments.methods import registry
from experiments.studies import linear_probe as study
from experiments.studies import probe_runs
from experiments.studies import probe_tables

K = 10


def write_features(folder, num_per_class=30, dim=8, seed=0):
  """Gaussian blobs, one per class, separable but not trivially (as frozen features would be)."""
  rng = np.random.default_rng(seed)
  centres = 3.0 * rng.normal(size=(K, dim))
  for split, n in (("train", num_per_class), ("test", 10)):
    labels = np.repeat(np.arange(K), n).astype(np.int32)
    features = np.abs(centres[labels] + rng.normal(size=(len(labels), dim))).astype(np.float32)
    cached_features.write_split(folder, probe_runs.FEATURES, split, features, labels,
                                CIFAR10_CLASS_NAMES)


def test_every_row_is_a_registry_entry_whose_fields_apply():
  for name, (loss, fields) in study.METHODS.items():
    assert loss in registry.REGISTRY, name
    config = probe_runs.probe_config(loss, fields, seed=3, imbalance_factor=100.0)
    assert (config.loss, config.seed, config.model) == (loss, 3, "linear_head")
    assert config.dataset == f"features:{probe_runs.FEATURES}" and not config.augment
  assert study.METHODS["reweight_sg"][1]["reweight.stop_gradient"] is True


def test_study_trains_each_row_through_the_trainer(tmp_path):
  write_features(tmp_path / "features")
  out, workdir = tmp_path / "out", tmp_path / "runs"
  assert study.main(["--noxla_cpu_tuning", "study", f"--out={out}", f"--workdir={workdir}",
                     f"--features_dir={tmp_path / 'features'}", "--settings=balanced",
                     "--seeds=0", "--epochs=10", "--learning_rate=0.5"]) == 0
  for method in study.SETTINGS["balanced"][1]:
    run = json.loads((out / "runs" / f"balanced-{method}-seed0.json").read_text())
    summary = json.loads((workdir / "study" / f"balanced-{method}-seed0" / "summary.json")
                         .read_text())
    config = json.loads((workdir / "study" / f"balanced-{method}-seed0" / "config.json")
                        .read_text())
    assert run["loss"] == config["loss"] == study.METHODS[method][0]
    assert config["num_epochs"] == 10 and config["learning_rate"] == 0.5 and config["model"] == "linear_head"
    assert run["class_accuracy"] == summary["per_class_accuracy"]
    assert np.mean(run["class_accuracy"]) > 0.3  # learnt something (chance is 0.1)
  reweight = json.loads((out / "runs" / "balanced-reweight-seed0.json").read_text())
  assert len(reweight["reweight_batch_counts"]) == K
  tables = (out / "tables.md").read_text()
  assert "| reweight |" in tables and "one seed" in tables


def fake_runs(setting, seeds=(0, 1, 2)):
  """ERM accuracies descending by class; 'mr2' adds 2 points on the three hardest classes."""
  counts = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
  runs = []
  for seed in seeds:
    erm = np.linspace(0.95, 0.5, K) + 0.01 * seed
    for method, acc in (("erm", erm), ("mr2", erm + np.r_[np.zeros(7), 0.02 * np.ones(3)])):
      runs.append({"setting": setting, "method": method, "seed": seed,
                   "class_accuracy": acc.tolist(),
                   "shot_groups": many_medium_few(np.asarray(counts)).tolist()})
  return runs


def test_summary_groups_from_erm_and_paired_deltas():
  summary = probe_tables.summarise(fake_runs("lt100"), "lt100", ("erm", "mr2"), long_tailed=True)
  assert summary["difficulty_groups"] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
  mr2 = summary["methods"]["mr2"]
  assert mr2["seeds"] == [0, 1, 2]
  np.testing.assert_allclose(mr2["delta_mean"]["hard"], 2.0, atol=1e-9)
  np.testing.assert_allclose(mr2["delta_std"]["hard"], 0.0, atol=1e-9)
  assert mr2["delta_wins"]["hard"] == 3 and mr2["delta_wins"]["easy"] == 0
  np.testing.assert_allclose(mr2["delta_mean"]["overall"], 0.6, atol=1e-9)
  erm = summary["methods"]["erm"]
  np.testing.assert_allclose(erm["mean"]["easy"], 100 * np.mean(np.linspace(0.95, 0.5, K)[:4]) + 1)
  overall = [np.mean(np.linspace(0.95, 0.5, K)) * 100 + s for s in range(3)]
  np.testing.assert_allclose(erm["std"]["overall"], np.std(overall, ddof=1))
  assert mr2["delta_seeds"]["hard"] == 3 and summary["seed_spread"] == "sample std (ddof = 1)"
  assert np.isnan(erm["mean"]["few"])  # CIFAR-10-LT IF 100 has no class under 20 images.
  json.dumps(summary)  # JSON-serialisable as written to results.json.

  table = probe_tables.markdown_tables(summary, CIFAR10_CLASS_NAMES, long_tailed=True)
  # Every seed +2.00: an interval without width (the verdict lines read it with the sign test).
  assert "| mr2 |" in table and "+2.00 [+2.00, +2.00] (3/3)" in table and "n/a" in table
  headers = [line for line in table.splitlines() if line and not line.startswith("|")]
  assert len(headers) == 2 and "mean ± sample std (ddof = 1) over 3 seeds" in headers[0]
  assert "95 % t-interval" in headers[1]
  assert "Hard: horse, ship, truck" in table
  assert "Few" in table
  assert "Few" not in probe_tables.markdown_tables(summary, CIFAR10_CLASS_NAMES, long_tailed=False)


def test_plot_is_written(tmp_path):
  summary = probe_tables.summarise(fake_runs("balanced"), "balanced", ("erm", "mr2"), False)
  probe_tables.plot_sorted_class_accuracy(summary, "balanced", CIFAR10_CLASS_NAMES,
                                          tmp_path / "p.png")
  assert (tmp_path / "p.png").stat().st_size > 1000


def test_report_rebuilds_tables_from_the_run_files(tmp_path):
  (tmp_path / "runs").mkdir()
  for run in fake_runs("lt100") + fake_runs("balanced"):
    run.update(recipe={"learning_rate": 0.01})
    (tmp_path / "runs" / f"{run['setting']}-{run['method']}-seed{run['seed']}.json").write_text(
        json.dumps(run))
  assert study.main(["--noxla_cpu_tuning", "report", "--quiet", "--out", str(tmp_path)]) == 0
  results = json.loads((tmp_path / "results.json").read_text())
  assert list(results["settings"]) == ["balanced", "lt100"] and results["seeds"] == [0, 1, 2]
  assert json.dumps(results["settings"]["lt100"]) == json.dumps(
      probe_tables.summarise(fake_runs("lt100"), "lt100", study.SETTINGS["lt100"][1], True))
  tables = (tmp_path / "tables.md").read_text()
  assert tables.startswith("# Lite0 linear probe on CIFAR-10 (features at 128 px)")
  assert tables.count("mean ± sample std (ddof = 1) over 3 seeds") == 2
  assert (tmp_path / "per_class_lt100.png").exists()


def test_missing_features_name_the_command(tmp_path, capsys):
  assert study.main(["--noxla_cpu_tuning", "study", f"--out={tmp_path}", f"--workdir={tmp_path}",
                     f"--features_dir={tmp_path}", "--settings=balanced", "--seeds=0"]) == 2
  error = capsys.readouterr().err
  assert "lite0-r128-train-features.npy" in error
  assert "python -m experiments.studies.linear_probe features" in error
