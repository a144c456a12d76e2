"""experiments/studies/probe_comparison*.py on tiny synthetic cached features (no data, seconds):
every method is a registry entry whose fields apply, each run is the trainer's (JTT after its
stage-1 run, SupCon on the adapter and the stored flipped view), tuning scores on validation only,
and the reports are written from the run files."""

import json

import numpy as np
import pytest

from experiments.data import cached_features
from experiments.data.in_memory_sources import CIFAR10_CLASS_NAMES
from experiments.methods import registry
from experiments.studies import probe_comparison as pc
from experiments.studies import probe_comparison_methods as pcm
from experiments.studies import probe_runs

K, N, D = 10, 320, 12


def write_features(folder, seed=0):
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=(K, D))
  for split, n in (("train", N), ("test", 100)):
    labels = np.repeat(np.arange(K), n // K).astype(np.int64)
    spread = np.linspace(0.5, 2.5, K)[labels, None]  # easy to hard classes
    features = (centres[labels] + spread * rng.normal(size=(n, D))).astype(np.float32)
    cached_features.write_split(folder, probe_runs.FEATURES, split, features, labels,
                                CIFAR10_CLASS_NAMES)
    if split == "train":
      cached_features.write_split(folder, probe_runs.FEATURES, "train-flip", features[:, ::-1],
                                  labels, CIFAR10_CLASS_NAMES)


@pytest.mark.parametrize("name", list(pcm.METHODS))
def test_every_candidate_is_a_registry_entry_whose_fields_apply(name, tmp_path):
  method = pcm.METHODS[name]
  assert method.loss in registry.REGISTRY
  for params in method.candidates():
    fields = {k: v for k, v in params.items() if k != pcm.STAGE1_EPOCHS}
    if method.loss == "jtt":
      fields["jtt.stage1"] = str(tmp_path)
    config = probe_runs.probe_config(method.loss, fields, seed=1, adapter=method.adapter)
    assert config.model == ("mlp_adapter" if method.adapter else "linear_head")
    assert config.dataset.endswith("+flip") == method.adapter


def selection(tmp_path, chosen):
  (tmp_path / "out").mkdir(exist_ok=True)
  (tmp_path / "out" / "selection.json").write_text(json.dumps(
      {"methods": {name: {"chosen": params} for name, params in chosen.items()}}))


def study(tmp_path, methods, seeds="0"):
  return pc.main(["--noxla_cpu_tuning", "study", f"--out={tmp_path / 'out'}",
                  f"--workdir={tmp_path / 'work'}", f"--data_dir={tmp_path / 'features'}",
                  f"--methods={methods}", f"--seeds={seeds}"])


def test_study_runs_jtt_after_its_stage1_run_and_writes_the_tables(tmp_path):
  write_features(tmp_path / "features")
  selection(tmp_path, {"erm": {}, "jtt": {pcm.STAGE1_EPOCHS: 2, "jtt.upweight": 3}})
  assert study(tmp_path, "erm,jtt") == 0
  stage1 = tmp_path / "work" / "study" / "stage1" / "ce-epochs2-seed0"
  stage1_config = json.loads((stage1 / "config.json").read_text())
  assert stage1_config["loss"] == "ce" and stage1_config["num_epochs"] == 2
  jtt_dir = tmp_path / "work" / "study" / "jtt-stage1_epochs2-upweight3-seed0"
  jtt_config = json.loads((jtt_dir / "config.json").read_text())
  assert jtt_config["jtt"] == {"stage1": str(stage1.resolve()), "upweight": 3}
  run = json.loads((tmp_path / "out" / "runs" / "jtt-seed0.json").read_text())
  errors = run["jtt_error_set_size"]
  assert run["loss"] == "jtt" and run["jtt_epoch_length"] == N + 3 * errors
  assert sum(run["jtt_error_set_per_class"]) == errors > 0
  assert run["class_accuracy"] == json.loads((jtt_dir / "summary.json").read_text())[
      "per_class_accuracy"]
  assert "| jtt |" in (tmp_path / "out" / "tables.md").read_text()
  # A second study call reads the finished runs instead of training them again.
  (tmp_path / "out" / "runs" / "jtt-seed0.json").unlink()
  before = (jtt_dir / "summary.json").stat().st_mtime_ns
  assert study(tmp_path, "erm,jtt") == 0
  assert (jtt_dir / "summary.json").stat().st_mtime_ns == before


def test_adapter_setting_trains_supcon_on_the_stored_flipped_view(tmp_path):
  write_features(tmp_path / "features")
  selection(tmp_path, {"erm_adapter": {"supcon.lam": 0.0},
                       "supcon": {"supcon.temperature": 0.1, "supcon.lam": 0.5}})
  assert study(tmp_path, "erm_adapter,supcon") == 0
  for name in ("erm_adapter", "supcon"):
    workdir = next((tmp_path / "work" / "study").glob(f"{name}*-seed0"))
    config = json.loads((workdir / "config.json").read_text())
    assert config["model"] == "mlp_adapter" and config["loss"] == "supcon"
    assert config["dataset"] == f"features:{probe_runs.FEATURES}+flip"
    run = json.loads((tmp_path / "out" / "runs" / f"{name}-seed0.json").read_text())
    assert run["setting"] == "adapter"
  assert "(ERM = `erm_adapter`" in (tmp_path / "out" / "tables.md").read_text()


def test_tune_scores_on_validation_and_records_the_choice(tmp_path):
  write_features(tmp_path / "features")
  record = pcm.tune(["erm", "focal"], tmp_path / "work", seeds=(0,), log=lambda *_: None,
                    data_dir=str(tmp_path / "features"))
  focal = record["methods"]["focal"]
  assert len(focal["candidates"]) == len(pcm.METHODS["focal"].candidates())
  best = max(focal["candidates"], key=lambda c: (c["val_worst_class"], c["val_mean_class"]))
  assert focal["chosen"] == best["params"]
  assert record["methods"]["erm"]["chosen"] == {}
  for workdir in (tmp_path / "work").glob("focal-*"):
    summary = json.loads((workdir / "summary.json").read_text())
    config = json.loads((workdir / "config.json").read_text())
    assert config["validation_fraction"] == pcm.VALIDATION_FRACTION
    # Trained on the rest: the held-out 10 % of each class never reaches training.
    assert summary["train_class_counts"] == [N // K - 3] * K  # round(0.1 · 32) = 3 held out
    score = next(c for c in focal["candidates"]
                 if workdir.name == pcm.run_name("focal", c["params"], 0))
    assert score["val_worst_class"] == min(summary["validation_class_accuracy"])


def test_report_from_run_files(tmp_path):
  rng = np.random.default_rng(0)
  (tmp_path / "runs").mkdir()
  for seed in range(3):
    for name in ("erm", "mr2", "uniform_gamma", "group_dro", "jtt"):
      run = {"setting": "balanced", "method": name, "seed": seed, "params": {"x": 1},
             "recipe": {"learning_rate": 0.01}, "wall_s": 1.0,
             "class_accuracy": rng.uniform(0.5, 1.0, 10).tolist()}
      (tmp_path / "runs" / f"{name}-seed{seed}.json").write_text(json.dumps(run))
  assert pc.main(["--noxla_cpu_tuning", "report", f"--out={tmp_path}"]) == 0
  tables = (tmp_path / "tables.md").read_text()
  assert "| group_dro |" in tables and "Paired Δ vs ERM" in tables
  results = json.loads((tmp_path / "results.json").read_text())
  assert results["seeds"] == [0, 1, 2]
  assert set(results["summaries"]["balanced"]["methods"]) == {"erm", "mr2", "uniform_gamma",
                                                               "group_dro", "jtt"}
  # MR2 against its control, paired per seed: the Overall Δ of the table against NumPy.
  runs = {(p.stem.rsplit("-seed", 1)[0], int(p.stem.rsplit("seed", 1)[1])):
          np.asarray(json.loads(p.read_text())["class_accuracy"]) for p in
          (tmp_path / "runs").glob("*.json")}
  delta = [100 * (runs["mr2", s].mean() - runs["uniform_gamma", s].mean()) for s in range(3)]
  row = next(line for line in tables.splitlines() if line.startswith("| mr2 − uniform_gamma |"))
  from scipy import stats
  low, high = stats.t.interval(0.95, 2, loc=np.mean(delta), scale=stats.sem(delta))
  assert row.split("|")[2].strip() == f"{np.mean(delta):+.2f} [{low:+.2f}, {high:+.2f}] " + (
      f"({sum(d > 0 for d in delta)}/3)")
  assert (tmp_path / "tradeoff.png").stat().st_size > 0
