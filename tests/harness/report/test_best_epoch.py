"""The periodic test pass (`config.test_every_epochs`) and the report's best-epoch column
(`experiments.report.best_epoch`): logged, never selecting anything, the final epoch the headline."""

import json

import numpy as np
import pytest

from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from experiments.report import best_epoch
from experiments.report import run_tables
from experiments.configs import schema
from experiments.train import loop


def _tiny_config(seed=0):
  config = digits_lt.get_config()
  config.num_epochs = 3
  config.batch_size = 32
  config.max_train_per_class = 40
  config.log_every_steps = 2
  config.progress_bar = False
  config.test_every_epochs = 1
  config.seed = seed
  return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("best_epoch")
  summaries = {}
  for seed in (0, 1):
    summaries[seed] = loop.train_and_evaluate(_tiny_config(seed), root / f"seed{seed}")
  return root, summaries


def test_each_epoch_logs_the_test_accuracy_and_the_last_is_the_final_evaluation(runs):
  root, summaries = runs
  for seed, summary in summaries.items():
    logged = best_epoch.logged_test_accuracy(root / f"seed{seed}")
    assert sorted(logged) == [1.0, 2.0, 3.0]
    assert all(0 <= a <= 1 for a in logged.values())
    # The same state and test set as the final evaluation.
    np.testing.assert_allclose(logged[3.0], summary["overall_accuracy"], rtol=0, atol=1e-7)
    history = [json.loads(line) for line in
               (root / f"seed{seed}" / "class_history.jsonl").read_text().splitlines()]
    per_class = [r["test_class_accuracy"] for r in history if "test_class_accuracy" in r]
    assert len(per_class) == 3
    np.testing.assert_allclose(per_class[-1], summary["per_class_accuracy"], rtol=0, atol=1e-7)


def test_the_report_adds_the_labelled_best_epoch_column_beside_the_final_epoch(runs, tmp_path):
  root, summaries = runs
  markdown = run_tables.write_report({"ce": [root / "seed0", root / "seed1"]}, "ce", tmp_path)
  assert best_epoch.BEST_EPOCH_LABEL in markdown
  table = json.loads((tmp_path / "comparison.json").read_text())["_best_epoch"]["ce"]
  final = [s["overall_accuracy"] for s in summaries.values()]
  best = [max(best_epoch.logged_test_accuracy(root / f"seed{s}").values()) for s in (0, 1)]
  np.testing.assert_allclose(table["final"], [np.mean(final), np.std(final, ddof=1)])
  np.testing.assert_allclose(table["best"], [np.mean(best), np.std(best, ddof=1)])
  assert all(b >= f - 1e-7 for b, f in zip(best, final))  # the final epoch is one of those logged
  assert table["seeds"] == 2


def test_best_epoch_is_the_first_maximum_and_none_without_test_passes(tmp_path):
  rows = [{"epoch": 1.0, "loss": 2.0}, {"epoch": 1.0, "test_accuracy": 0.5},
          {"epoch": 2.0, "test_accuracy": 0.7}, {"epoch": 3.0, "test_accuracy": 0.7},
          {"epoch": 4.0, "test_accuracy": 0.6}]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert best_epoch.best_epoch(tmp_path) == (0.7, 2.0)
  (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
  assert best_epoch.best_epoch(tmp_path) is None
  assert best_epoch.best_epoch_table({"ce": [tmp_path]}, {"ce": [{"overall_accuracy": 0.6}]}) is None


def test_a_negative_period_is_refused_naming_the_field():
  config = _tiny_config()
  config.test_every_epochs = -1
  with pytest.raises(ConfigError, match="test_every_epochs"):
    schema.validate(config)
