"""experiments.report.nc_centring: the sample centring's floors (against the library's metrics on
an exact collapse) and the report's note; the trainer records both centrings."""

import json

import numpy as np
import pytest

import reweight_jax
from experiments.configs import digits_lt
from experiments.report import nc_centring
from experiments.report import run_tables
from experiments.train import loop

CIFAR10_LT_COUNTS = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]


@pytest.mark.parametrize("counts", [CIFAR10_LT_COUNTS, [7, 3, 1], [40, 20, 0, 5, 3]])
def test_floors_are_the_metrics_of_an_exact_collapse(counts):
  """The closed form against `reweight_jax.nc_metrics` on features at simplex vertices (a random
  rotation into d = 12), a classifier equal to the vertices; an empty class left out of both."""
  present = [c for c in counts if c > 0]
  k = len(present)
  rng = np.random.default_rng(0)
  basis, _ = np.linalg.qr(rng.normal(size=(12, k)))
  vertices = (basis @ (np.eye(k) - 1.0 / k)).T
  labels = np.repeat(np.arange(k), present)
  sample = reweight_jax.nc_metrics(vertices[labels].astype(np.float32), labels,
                                   vertices.astype(np.float32))
  np.testing.assert_allclose(nc_centring.simplex_floors(counts), [sample.nc2, sample.nc3],
                             rtol=1e-4, atol=1e-6)
  balanced = reweight_jax.nc_metrics(vertices[labels].astype(np.float32), labels,
                                     vertices.astype(np.float32), centring="class_balanced")
  np.testing.assert_allclose([balanced.nc2, balanced.nc3], 0.0, atol=1e-4)


def test_cifar10_lt_floors_and_no_note_at_equal_counts():
  np.testing.assert_allclose(nc_centring.simplex_floors(CIFAR10_LT_COUNTS), (0.6483, 0.1514),
                             atol=1e-4)
  assert nc_centring.centring_markdown({"ce": {}}, [500] * 10) == ""
  note = nc_centring.centring_markdown({"ce": {}}, CIFAR10_LT_COUNTS)
  assert "NC2 = 0.648 and NC3 = 0.151" in note and "did not record them" in note



def test_a_study_whose_older_runs_lack_the_balanced_centring_says_which_seeds_have_it():
  # Seed 0 ran before the class-balanced centring was recorded, seed 1 after (the 200-epoch study).
  def summary(seed, balanced):
    s = {"seed": seed, "overall_accuracy": 0.6, "worst_class_accuracy": 0.3,
         "class_accuracy_std": 0.2, "per_class_accuracy": [0.5] * 10,
         "neural_collapse": {"nc1": 0.25, "nc2": 0.77, "nc3": 0.4}}
    if balanced:
      s["neural_collapse_balanced"] = {"nc1": 0.27, "nc2": 0.71, "nc3": 0.31}
    return s
  table = run_tables.method_table({"ce": [summary(0, False), summary(1, True)]}, None)
  assert table["ce"]["seeds"] == [0, 1] and table["ce"]["neural_collapse_balanced_seeds"] == [1]
  assert table["ce"]["neural_collapse"]["nc2"][0] == pytest.approx(0.77)
  note = nc_centring.centring_markdown(table, CIFAR10_LT_COUNTS)
  assert "did not record them" not in note
  assert "those values (one seed; only the runs of seed 1 recorded them)" in note
  assert "| ce | 0.27 | 0.71 | 0.31 |" in note
  # Every seed recorded: no seeds named.
  table = run_tables.method_table({"ce": [summary(0, True), summary(1, True)]}, None)
  note = nc_centring.centring_markdown(table, CIFAR10_LT_COUNTS)
  assert "over 2 seeds)" in note and "only the runs" not in note
  # None recorded: said so.
  table = run_tables.method_table({"ce": [summary(0, False), summary(1, False)]}, None)
  assert "neural_collapse_balanced" not in table["ce"]
  assert "these runs did not record them" in nc_centring.centring_markdown(table, CIFAR10_LT_COUNTS)

def test_a_run_records_both_centrings_and_the_report_shows_them(tmp_path):
  config = digits_lt.get_config()
  config.num_epochs, config.batch_size, config.max_train_per_class = 2, 32, 40
  config.progress_bar, config.class_loss_every_epochs = False, 1
  summary = loop.train_and_evaluate(config, tmp_path / "run")
  balanced, sample = summary["neural_collapse_balanced"], summary["neural_collapse"]
  assert set(balanced) == {"nc1", "nc2", "nc2_classifier", "nc3"}
  assert balanced["nc2_classifier"] == pytest.approx(sample["nc2_classifier"], rel=1e-6)
  assert balanced["nc2"] != sample["nc2"]  # long-tailed digits: the centrings differ
  records = [json.loads(line)
             for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  assert [r["epoch"] for r in records if "train_nc2_balanced" in r] == [1.0, 2.0]
  markdown = run_tables.write_report({"ce": [tmp_path / "run"]}, "ce", tmp_path / "report")
  assert "NC2 (class-balanced)" in markdown and "the convention's floor" in markdown
