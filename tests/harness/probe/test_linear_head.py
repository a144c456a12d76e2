"""The linear probe (experiments/probe/linear_head.py, summary.py, features.py and the study
experiments/studies/linear_probe.py) on tiny synthetic features (seconds, no data)."""

import json

import numpy as np
import pytest

from experiments.data.batches import epoch_permutation
from experiments.data.holdout import stratified_holdout
from experiments.data.in_memory_sources import CIFAR10_CLASS_NAMES
from experiments.data.long_tail import many_medium_few
import mr2_jax
from experiments.probe import features as probe_features
from experiments.probe import linear_head as lp
from experiments.probe import summary as probe_summary
from experiments.studies import linear_probe as study

K = lp.NUM_CLASSES


def synthetic_features(num_per_class=30, dim=8, seed=0):
  """Gaussian blobs, one per class, separable but not trivially (as frozen features would be)."""
  rng = np.random.default_rng(seed)
  centres = 3.0 * rng.normal(size=(K, dim))
  labels = np.repeat(np.arange(K), num_per_class).astype(np.int32)
  features = np.abs(centres[labels] + rng.normal(size=(len(labels), dim))).astype(np.float32)
  return features, labels


def test_stratified_holdout_partitions_every_class():
  labels = np.repeat(np.arange(K), [50, 40, 30, 20, 10, 5, 3, 2, 2, 1])
  train, val = stratified_holdout(labels, K, 0.1, seed=3)
  assert len(np.intersect1d(train, val)) == 0
  assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(len(labels)))
  val_counts = np.bincount(labels[val], minlength=K)
  assert val_counts.tolist() == [5, 4, 3, 2, 1, 1, 1, 1, 1, 0]
  assert np.bincount(labels[train], minlength=K).min() >= 1
  again = stratified_holdout(labels, K, 0.1, seed=3)
  assert np.array_equal(again[1], val)


def test_epoch_batches_are_full_and_distinct():
  batches = lp.epoch_batches(100, 32, seed=1, epoch=2)
  assert batches.shape == (3, 32) and batches.dtype == np.int32
  assert len(np.unique(batches)) == 96
  np.testing.assert_array_equal(batches.ravel(), epoch_permutation(100, 1, 2)[:96])
  with pytest.raises(ValueError, match="fill one batch"):
    lp.epoch_batches(10, 32, seed=0, epoch=0)


def test_setting_indices_balanced_and_long_tailed():
  labels = np.repeat(np.arange(K), 5000)
  assert len(lp.setting_train_indices(labels, 1.0, seed=0)) == 50000
  lt = lp.setting_train_indices(labels, 100.0, seed=4)
  assert np.bincount(labels[lt]).tolist() == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
  assert not np.array_equal(lt, lp.setting_train_indices(labels, 100.0, seed=5))


@pytest.mark.parametrize("method", lp.METHODS)
def test_every_method_learns_separable_features(method):
  features, labels = synthetic_features()
  recipe = lp.ProbeSchedule(learning_rate=0.05, epochs=6, batch_size=60)
  state, losses = lp.train_probe(method, features, labels, recipe, seed=0)
  assert len(losses) == 6 and np.all(np.isfinite(losses)) and losses[-1] < losses[0]
  accuracy = lp.class_accuracy(state.params, features, labels)
  # Chance is 0.1; the stop-gradient reweighting up-weights easy classes and learns hard ones slowest.
  assert accuracy.shape == (K,) and np.mean(accuracy) > 0.5
  if method == "mr2":
    class_stats = state.loss_state["class_stats"]
    gamma = np.asarray(mr2_jax.class_margins(class_stats, lp.method_config("mr2").mr2.c_bar))
    assert bool(np.all(np.asarray(class_stats.seen)))
    np.testing.assert_allclose(gamma.mean(), 1.0, rtol=1e-5)
    assert gamma.std() > 0  # Classes with larger mean squared feature norm get larger γ.
  if method.startswith("reweight"):
    counts = np.asarray(state.loss_state["reweight"].batch_counts)
    assert counts.max() == 30 and counts.min() >= 25  # 30 batches; a class can miss a batch.
  else:
    assert "reweight" not in state.loss_state  # each method carries only its own loss state


def test_training_is_a_function_of_the_seed():
  features, labels = synthetic_features()
  recipe = lp.ProbeSchedule(learning_rate=0.05, epochs=2, batch_size=60)
  first, _ = lp.train_probe("erm", features, labels, recipe, seed=7)
  second, _ = lp.train_probe("erm", features, labels, recipe, seed=7)
  other, _ = lp.train_probe("erm", features, labels, recipe, seed=8)
  np.testing.assert_array_equal(first.params["kernel"], second.params["kernel"])
  assert not np.allclose(first.params["kernel"], other.params["kernel"])


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
  summary = probe_summary.summarise(fake_runs("lt100"), "lt100")
  assert summary["difficulty_groups"] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
  mr2 = summary["methods"]["mr2"]
  assert mr2["seeds"] == [0, 1, 2]
  np.testing.assert_allclose(mr2["delta_mean"]["hard"], 2.0, atol=1e-9)
  np.testing.assert_allclose(mr2["delta_std"]["hard"], 0.0, atol=1e-9)
  assert mr2["delta_wins"]["hard"] == 3 and mr2["delta_wins"]["easy"] == 0
  np.testing.assert_allclose(mr2["delta_mean"]["overall"], 0.6, atol=1e-9)
  erm = summary["methods"]["erm"]
  np.testing.assert_allclose(erm["mean"]["easy"], 100 * np.mean(np.linspace(0.95, 0.5, K)[:4]) + 1)
  np.testing.assert_allclose(erm["std"]["overall"], 1.0)  # sample std of x, x + 1, x + 2
  overall = [np.mean(np.linspace(0.95, 0.5, K)) * 100 + s for s in range(3)]
  np.testing.assert_allclose(erm["std"]["overall"], np.std(overall, ddof=1))
  assert mr2["delta_seeds"]["hard"] == 3 and summary["seed_spread"] == "sample std (ddof = 1)"
  assert np.isnan(erm["mean"]["few"])  # CIFAR-10-LT IF 100 has no class under 20 images.
  json.dumps(summary)  # JSON-serialisable as written to results.json.

  table = probe_summary.markdown_tables(summary, "lt100", CIFAR10_CLASS_NAMES)
  # Every seed +2.00: an interval without width (the verdict lines read it with the sign test).
  assert "| mr2 |" in table and "+2.00 [+2.00, +2.00] (3/3)" in table and "n/a" in table
  headers = [line for line in table.splitlines() if line and not line.startswith("|")]
  assert len(headers) == 2 and "sample std (ddof = 1)" in headers[0]
  assert "95 % t-interval" in headers[1]
  assert "mean ± sample std (ddof = 1) over 3 seeds" in headers[0]
  assert "Hard: frog, horse, ship" not in table and "Hard: horse, ship, truck" in table


def test_plot_is_written(tmp_path):
  summary = probe_summary.summarise(fake_runs("balanced"), "balanced")
  probe_summary.plot_sorted_class_accuracy(summary, "balanced", CIFAR10_CLASS_NAMES, tmp_path / "p.png")
  assert (tmp_path / "p.png").stat().st_size > 1000


def test_report_rebuilds_tables_from_the_run_files(tmp_path):
  (tmp_path / "runs").mkdir()
  for run in fake_runs("lt100") + fake_runs("balanced"):
    run.update(recipe=lp.SCHEDULE._asdict(), resolution=64)
    (tmp_path / "runs" / f"{run['setting']}-{run['method']}-seed{run['seed']}.json").write_text(
        json.dumps(run))
  assert study.main(["--noxla_cpu_tuning", "report", "--quiet", "--out", str(tmp_path)]) == 0
  results = json.loads((tmp_path / "results.json").read_text())
  assert list(results["settings"]) == ["balanced", "lt100"] and results["seeds"] == [0, 1, 2]
  assert json.dumps(results["settings"]["lt100"]) == json.dumps(
      probe_summary.summarise(fake_runs("lt100"), "lt100"))
  tables = (tmp_path / "tables.md").read_text()
  assert tables.startswith("# Lite0 linear probe on CIFAR-10 (features at 64 px)")
  assert tables.count("mean ± sample std (ddof = 1) over 3 seeds") == 2
  assert (tmp_path / "per_class_lt100.png").exists()


def test_missing_features_name_the_command(tmp_path):
  with pytest.raises(SystemExit, match="linear_probe features"):
    probe_features.load_features(64, "train", cache=tmp_path)
