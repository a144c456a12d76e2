"""experiments.report.diagnosis: every number against an independent float64 NumPy computation, the CLI on a
feature file, and a real (interrupted) training workdir."""

import json
import pathlib
import re

import numpy as np
import pytest
from scipy import special
from scipy import stats

from experiments import diagnose as diagnose_cli
from experiments.common.errors import DiagnoseError
from experiments.report import diagnosis
from experiments.report import diagnosis_report
from experiments.train import run_features

REPO = pathlib.Path(__file__).resolve().parents[3]
NUM_CLASSES = 6
DIM = 8
# Class 3 absent, class 4 has one example: the adversarial cases.
CLASS_SIZES = (30, 12, 7, 0, 1, 9)
PLOTS = ("accuracy_vs_spread.png", "accuracy_vs_variance.png", "margins.png", "class_loss.png",
         "confusion.png")


def _synthetic(seed=0):
  """Features with class-dependent means and spreads, a noisy classifier, shuffled labels."""
  rng = np.random.default_rng(seed)
  labels = np.concatenate([np.full(n, k) for k, n in enumerate(CLASS_SIZES)])
  labels = labels[rng.permutation(len(labels))]
  centres = 2.0 * rng.normal(size=(NUM_CLASSES, DIM))
  spread = np.linspace(2.0, 5.0, NUM_CLASSES)
  features = centres[labels] + spread[labels, None] * rng.normal(size=(len(labels), DIM))
  classifier = centres + 2.5 * rng.normal(size=centres.shape)
  bias = 0.3 * rng.normal(size=NUM_CLASSES)
  return features, labels, classifier, bias


def _reference(features, labels, logits, classifier, bias, c_bar):
  """The spec's quantities, written out class by class in float64."""
  present = np.array([np.any(labels == k) for k in range(NUM_CLASSES)])
  a = np.full(NUM_CLASSES, np.nan)
  v = np.full(NUM_CLASSES, np.nan)
  means = np.zeros((NUM_CLASSES, DIM))
  for k in range(NUM_CLASSES):
    rows = features[labels == k]
    if len(rows):
      means[k] = rows.mean(axis=0)
      a[k] = np.sum(means[k] ** 2)
      v[k] = np.mean([np.sum((row - means[k]) ** 2) for row in rows])
  # MR2 spec: γ_y = c̄·K·(A_y+V_y)^{1/3} / Σ_k (A_k+V_k)^{1/3}, K and Σ over the classes seen;
  # an unseen class keeps c̄.
  roots = np.cbrt(a[present] + v[present])
  gamma = np.full(NUM_CLASSES, c_bar)
  gamma[present] = c_bar * present.sum() * roots / roots.sum()

  log_probs = special.log_softmax(logits, axis=1)
  ce = -log_probs[np.arange(len(labels)), labels]
  class_loss = np.array([ce[labels == k].mean() if present[k] else np.nan
                         for k in range(NUM_CLASSES)])
  # REWEIGHT spec: ρ = std_c L_c / mean_c L_c (population std, classes with examples).
  rho = np.std(class_loss[present]) / np.mean(class_loss[present])

  predictions = logits.argmax(axis=1)
  accuracy = np.array([np.mean(predictions[labels == k] == k) if present[k] else np.nan
                       for k in range(NUM_CLASSES)])
  confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), int)
  for y, z in zip(labels, predictions):
    confusion[y, z] += 1
  pairs = [(int(confusion[i, j]), confusion[i, j] / confusion[i].sum(), i, j)
           for i in range(NUM_CLASSES) for j in range(NUM_CLASSES) if i != j and confusion[i, j]]
  pairs.sort(key=lambda t: (-t[0], -t[1], t[2], t[3]))

  # NC1–NC4 (REWEIGHT spec; project conventions: present classes only, μ_G the sample mean).
  kp = present.sum()
  global_mean = features.mean(axis=0)
  centred = means[present] - global_mean
  within = sum(np.outer(h - means[y], h - means[y]) for h, y in zip(features, labels)) / len(labels)
  between = centred.T @ centred / kp
  nc1 = np.trace(within @ np.linalg.pinv(between, rcond=1e-10, hermitian=True)) / kp
  etf = (np.eye(kp) - np.ones((kp, kp)) / kp) / np.sqrt(kp - 1)

  def etf_distance(matrix):
    gram = matrix @ matrix.T
    return np.linalg.norm(gram / np.linalg.norm(gram) - etf)

  w = classifier[present]
  nc3 = np.sum((w / np.linalg.norm(w) - centred / np.linalg.norm(centred)) ** 2)
  nearest = np.array([np.argmin([np.sum((h - means[k]) ** 2) if present[k] else np.inf
                                 for k in range(NUM_CLASSES)]) for h in features])
  decisions = (features @ classifier.T + bias).argmax(axis=1)
  nc = {"nc1": nc1, "nc2": etf_distance(centred), "nc2_classifier": etf_distance(w), "nc3": nc3,
        "nc4": np.mean(decisions != nearest)}
  return dict(present=present, A=a, V=v, gamma=gamma, class_loss=class_loss, rho=rho,
              accuracy=accuracy, confusion=confusion, pairs=pairs, nc=nc,
              nc4_from_logits=np.mean(predictions != nearest))


def _spearman(x, y):
  keep = np.isfinite(x) & np.isfinite(y)
  return stats.spearmanr(x[keep], y[keep])


def test_every_number_against_float64_reference():
  features, labels, classifier, bias = _synthetic()
  c_bar = 1.5
  result = diagnosis.diagnose(features, labels, NUM_CLASSES, classifier=classifier, bias=bias,
                             c_bar=c_bar, top_pairs=6)
  ref = _reference(features, labels, features @ classifier.T + bias, classifier, bias, c_bar)

  np.testing.assert_array_equal(result["count"], CLASS_SIZES)
  np.testing.assert_allclose(result["A"], ref["A"], rtol=2e-6)
  np.testing.assert_allclose(result["V"], ref["V"], rtol=2e-6, atol=1e-6)
  assert result["V"][4] == 0.0 and np.isnan(result["A"][3]) and np.isnan(result["V"][3])
  np.testing.assert_allclose(result["A_plus_V"], ref["A"] + ref["V"], rtol=2e-6)
  np.testing.assert_allclose(result["gamma"], ref["gamma"], rtol=2e-6)  # float32 library
  assert result["gamma"][3] == c_bar
  np.testing.assert_allclose(result["class_loss"], ref["class_loss"], rtol=2e-6)
  assert result["rho"] == pytest.approx(ref["rho"], rel=1e-5)
  np.testing.assert_allclose(result["accuracy"], ref["accuracy"], rtol=0)
  accuracy = np.nan_to_num(ref["accuracy"])
  assert result["overall_accuracy"] == pytest.approx(
      np.sum(accuracy * np.asarray(CLASS_SIZES)) / sum(CLASS_SIZES))
  np.testing.assert_array_equal(result["confusion"], ref["confusion"])
  # Ties: equal counts ranked by rate, then equal rates by class indices.
  assert len(ref["pairs"]) > 6 and ref["pairs"][0][0] == ref["pairs"][1][0]
  assert ref["pairs"][4][:2] == ref["pairs"][5][:2]
  assert [(p["count"], p["rate"], p["true"], p["predicted"]) for p in result["confused_pairs"]] == [
      pytest.approx(pair) for pair in ref["pairs"][:6]]
  for key, values in (("accuracy_vs_spread", ref["A"] + ref["V"]),
                      ("accuracy_vs_variance", ref["V"])):
    expected = _spearman(ref["accuracy"], values)
    got = result["spearman"][key]
    assert got["classes"] == 5  # the absent class is left out
    assert got["rho"] == pytest.approx(expected.statistic, abs=1e-12)
    assert got["pvalue"] == pytest.approx(expected.pvalue, rel=1e-9)
  for name, value in ref["nc"].items():
    assert result["nc"][name] == pytest.approx(value, rel=1e-3, abs=1e-6), name
  assert result["skipped"] == []
  assert any("no example in the statistics set" in note for note in result["notes"])
  assert any("one example" in note for note in result["notes"])


def test_spearman_ranks_ties_by_their_average_and_leaves_out_non_finite_entries():
  """Ties share their average rank (scipy.stats.rankdata); a NaN or inf entry drops the class."""
  x = np.array([0.5, 0.5, 0.2, np.nan, 0.9, 0.2, 0.2, 0.7])
  y = np.array([3.0, 1.0, 1.0, 2.0, 4.0, np.inf, 0.5, 1.0])
  got = diagnosis.spearman(x, y)
  expected = _spearman(x, y)
  assert got["classes"] == 6
  assert got["rho"] == pytest.approx(expected.statistic, abs=1e-12)
  assert got["pvalue"] == pytest.approx(expected.pvalue, rel=1e-9)
  assert np.isnan(diagnosis.spearman(x, np.ones_like(x))["rho"])  # constant: undefined
  assert "need 3" in diagnosis.spearman(x[3:6], y[3:6])["note"]  # one finite pair


def test_given_logits_and_a_separate_evaluation_set():
  features, labels, classifier, bias = _synthetic()
  logits = features @ classifier.T + bias + np.random.default_rng(1).normal(size=(len(labels),
                                                                                   NUM_CLASSES))
  eval_features, eval_labels, _, _ = _synthetic(seed=2)
  eval_logits = eval_features @ classifier.T
  result = diagnosis.diagnose(features, labels, NUM_CLASSES, logits=logits,
                             eval_labels=eval_labels, eval_logits=eval_logits)
  ref = _reference(features, labels, logits, classifier, bias, 1.0)
  np.testing.assert_allclose(result["class_loss"], ref["class_loss"], rtol=2e-6)
  assert result["rho"] == pytest.approx(ref["rho"], rel=1e-5)
  eval_ref = _reference(eval_features, eval_labels, eval_logits, classifier, bias, 1.0)
  np.testing.assert_allclose(result["accuracy"], eval_ref["accuracy"], rtol=0)
  np.testing.assert_array_equal(result["confusion"], eval_ref["confusion"])
  # Without a classifier: NC1, NC2 of the means and NC4 from the logits; NC2 (W), NC3 skipped.
  assert result["nc"]["nc1"] == pytest.approx(ref["nc"]["nc1"], rel=1e-3)
  assert result["nc"]["nc2"] == pytest.approx(ref["nc"]["nc2"], rel=1e-3)
  assert result["nc"]["nc4"] == pytest.approx(ref["nc4_from_logits"], abs=1e-12)
  assert result["nc"]["nc2_classifier"] is None and result["nc"]["nc3"] is None
  assert any("NC3" in line for line in result["skipped"])


def test_statistics_only_says_what_is_skipped(tmp_path):
  features, labels, _, _ = _synthetic()
  result = diagnosis.diagnose(features, labels, NUM_CLASSES, p=5.0)
  ref_a = np.array([np.sum(np.abs(features[labels == k].mean(0)) ** 5) ** 0.4
                    if CLASS_SIZES[k] else np.nan for k in range(NUM_CLASSES)])
  np.testing.assert_allclose(result["A"], ref_a, rtol=2e-6)
  assert result["accuracy"] is None and result["class_loss"] is None and result["rho"] is None
  assert result["spearman"] is None and result["nc"]["nc4"] is None
  assert np.isfinite(result["nc"]["nc1"])
  assert len(result["skipped"]) == 3
  report = diagnosis_report.write_report(result, tmp_path).read_text()
  assert "Sorted by A_k + V_k" in report and "Skipped: L_c and ρ" in report
  assert sorted(p.name for p in tmp_path.glob("*.png")) == ["margins.png"]


@pytest.mark.parametrize("change, message", [
    (dict(labels=np.array([0, 1, 6, 2])), "labels: values must lie in [0, 6)"),
    (dict(labels=np.array([0, -1, 2, 2])), "labels: values must lie in [0, 6)"),
    (dict(labels=np.array([0, 1, 2])), "labels: expected 4 labels"),
    (dict(labels=np.array([0, 1.5, 2, 2])), "labels: expected integer class indices"),
    (dict(labels=np.array([True, False, True, True])), "labels: expected integer class indices"),
    (dict(features=np.ones((4,))), "features: expected shape [N, d]"),
    (dict(features=np.array([[np.nan, 0.0]] * 4)), "features: 4 non-finite"),
    (dict(classifier=np.ones((6, 3))), "classifier: expected shape [K, d] = (6, 2)"),
    (dict(classifier=np.ones((6, 2)), bias=np.ones(5)), "bias: expected shape [K] = (6,)"),
    (dict(bias=np.ones(6)), "bias: given without a classifier"),
    (dict(logits=np.ones((4, 5))), "logits: expected shape [N, K] = (4, 6)"),
    (dict(eval_logits=np.ones((3, 6))), "eval_labels and eval_logits: give both or neither"),
    (dict(eval_logits=np.ones((3, 6)), eval_labels=np.array([0, 9, 1])), "eval_labels: values"),
    (dict(num_classes=0), "num_classes: expected a positive integer"),
    (dict(class_names=["a"]), "class_names: expected 6 names"),
    (dict(c_bar=0.0), "c_bar: expected a positive"),
])
def test_bad_inputs_name_the_array(change, message):
  args = dict(features=np.ones((4, 2)), labels=np.array([0, 1, 2, 2]), num_classes=NUM_CLASSES)
  args.update(change)
  with pytest.raises(DiagnoseError) as error:
    diagnosis.diagnose(**args)
  assert message in str(error.value)


def test_float_labels_with_integer_values_are_accepted():
  features, labels, _, _ = _synthetic()
  a = diagnosis.diagnose(features, labels.astype(np.float32), NUM_CLASSES)["A"]
  np.testing.assert_array_equal(a, diagnosis.diagnose(features, labels, NUM_CLASSES)["A"])


def test_cli_on_a_feature_file(tmp_path, capsys):
  features, labels, classifier, bias = _synthetic()
  names = np.asarray([f"c{k}" for k in range(NUM_CLASSES)])
  path = tmp_path / "feats.npz"
  np.savez(path, features=features.astype(np.float32), labels=labels, classifier=classifier,
           bias=bias, class_names=names)
  assert diagnose_cli.main(["--features", str(path), "--top_pairs", "3"]) == 0
  out = tmp_path / "feats_diagnose"
  printed = capsys.readouterr().out
  assert f"report: {out / 'report.md'}" in printed and "Spearman(accuracy, A_k+V_k)" in printed
  report = (out / "report.md").read_text()
  for heading in ("## Per-class table", "## Neural collapse", "## Most confused pairs",
                  "Sorted by accuracy (lowest first)", "the feature file feats.npz (59 examples)"):
    assert heading in report
  result = diagnosis.diagnose(features.astype(np.float32), labels, NUM_CLASSES,
                             classifier=classifier, bias=bias, class_names=names, top_pairs=3)
  # The table's first row is the hardest class, with its name and 4-digit values.
  hardest = int(np.nanargmin(np.where(np.isnan(result["accuracy"]), np.inf,
                                      result["accuracy"])))
  row = next(line for line in report.splitlines() if re.match(r"\| \d+ c\d+ \|", line))
  assert row.startswith(f"| {hardest} c{hardest} |")
  assert f"| {diagnosis_report.format_value(result['gamma'][hardest])} |" in row
  saved = json.loads((out / "diagnose.json").read_text())
  assert saved["A"][3] is None and saved["gamma"][3] == 1.0
  assert len(saved["confused_pairs"]) == 3
  for name in PLOTS:
    assert (out / name).stat().st_size > 1000, name


def test_cli_errors_are_one_line(tmp_path, capsys):
  def run(*argv):
    code = diagnose_cli.main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err

  code, err = run("--features", str(tmp_path / "missing.npz"))
  assert code == 2 and err.startswith("error: --features") and "\n" not in err
  np.savez(tmp_path / "nolabels.npz", features=np.ones((3, 2)))
  code, err = run("--features", str(tmp_path / "nolabels.npz"))
  assert code == 2 and "missing array 'labels'" in err
  np.savez(tmp_path / "bad.npz", features=np.ones((3, 2)), labels=np.array([0, 1, 5]),
           logits=np.ones((3, 4)))
  code, err = run("--features", str(tmp_path / "bad.npz"))
  assert code == 2 and "labels: values must lie in [0, 4)" in err and "\n" not in err
  code, err = run("--workdir", str(tmp_path / "nowhere"))
  assert code == 2 and "no such directory" in err
  (tmp_path / "run").mkdir()
  code, err = run("--workdir", str(tmp_path / "run"))
  assert code == 2 and "config.json: not found" in err
  (tmp_path / "run" / "config.json").write_text("{}")
  code, err = run("--workdir", str(tmp_path / "run"))
  assert code == 2 and "no checkpoint" in err
  assert not (tmp_path / "run" / "checkpoints").exists()  # diagnosing writes nothing there


# ≈ 45 s on 2 cores (a run killed mid-training); the other diagnose tests read finished runs
@pytest.mark.slow
def test_interrupted_training_workdir(tmp_path, capsys):
  """A 3-step digits run; with summary.json removed (an interrupted run) the CLI still diagnoses it,
  and the numbers agree with what the trainer itself reported."""
  from experiments.train import loop
  from experiments.configs import digits_lt
  config = digits_lt.get_config()
  config.nc_metrics = True  # the trainer's own NC1–NC4 and ρ, to compare with (under a second)
  config.progress_bar = False
  workdir = tmp_path / "run"
  loop.train_and_evaluate(config, workdir, max_steps=3)
  summary = json.loads((workdir / "summary.json").read_text())
  (workdir / "summary.json").unlink()

  data = run_features.features_from_workdir(workdir, ("train", "test"))
  trained, test = data["train"], data["test"]
  assert trained.step == 3 and trained.num_classes == 10
  assert len(trained.labels) == sum(summary["train_class_counts"])
  np.testing.assert_allclose(trained.logits, trained.features @ trained.classifier.T + trained.bias,
                             rtol=1e-4, atol=1e-4)  # the linear head's W [K, d] and b

  assert diagnose_cli.main(["--workdir", str(workdir), "--out", str(tmp_path / "out")]) == 0
  assert "report:" in capsys.readouterr().out
  saved = json.loads((tmp_path / "out" / "diagnose.json").read_text())
  assert saved["overall_accuracy"] == pytest.approx(summary["overall_accuracy"], abs=1e-6)
  np.testing.assert_allclose(saved["accuracy"], summary["per_class_accuracy"], atol=1e-6)
  np.testing.assert_allclose(saved["class_loss"], summary["train_class_loss"], rtol=1e-5)
  assert saved["count"] == summary["train_class_counts"]
  trainer_nc = summary["neural_collapse"]
  assert saved["rho"] == pytest.approx(trainer_nc["rho"], rel=1e-4)
  for name in ("nc1", "nc2", "nc2_classifier", "nc3", "nc4"):
    assert saved["nc"][name] == pytest.approx(trainer_nc[name], rel=1e-3, abs=1e-6), name
  assert saved["num_eval_examples"] == len(test.labels)
  report = (tmp_path / "out" / "report.md").read_text()
  assert "checkpoint step 3 (interrupted or still running: no summary.json)" in report
  assert "the training split (" in report and "the test split (" in report
  for name in PLOTS:
    assert (tmp_path / "out" / name).exists(), name
  # A checkpoint that does not fit the model config.json describes: one line, no traceback.
  saved_config = json.loads((workdir / "config.json").read_text())
  (workdir / "config.json").write_text(json.dumps({**saved_config, "head": "cosine"}))
  assert diagnose_cli.main(["--workdir", str(workdir), "--out", str(tmp_path / "out2")]) == 2
  assert "parameters do not fit the model of config.json" in capsys.readouterr().err


def test_l2_statistics_read_the_normalised_features_and_nc_the_features_as_given():
  """`l2_statistics` (a run with `config.mr2.features='l2'`): A_k, V_k, γ of φ/‖φ‖₂ from float64
  NumPy (p = 3, the paper's choice there); the NC metrics as without it."""
  features, labels, classifier, bias = _synthetic(3)
  plain = diagnosis.diagnose(features, labels, NUM_CLASSES, classifier=classifier, bias=bias, p=3.0)
  l2 = diagnosis.diagnose(features, labels, NUM_CLASSES, classifier=classifier, bias=bias, p=3.0,
                          l2_statistics=True)
  unit = features / np.linalg.norm(features, axis=1, keepdims=True)
  for k, n in enumerate(CLASS_SIZES):
    if n == 0:
      assert np.isnan(l2["A"][k])
      continue
    rows = unit[labels == k]
    mean = rows.mean(axis=0)
    lp_sq = lambda x: np.sum(np.abs(x) ** 3, axis=-1) ** (2 / 3)  # noqa: E731
    np.testing.assert_allclose(l2["A"][k], lp_sq(mean), rtol=1e-5)
    np.testing.assert_allclose(l2["V"][k], np.mean(lp_sq(rows - mean)), rtol=1e-4, atol=1e-7)
  assert not np.allclose(l2["A"], plain["A"], equal_nan=True)
  assert l2["nc"] == plain["nc"]
