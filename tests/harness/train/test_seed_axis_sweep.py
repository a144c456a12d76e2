"""Sweeps in one program (`experiments.train.seed_axis` with members that differ in a traceable
field; `compare --sweep`): an S = 3 sweep of MR2's λ, and one of the reweighting's α, equal the
three solo runs number by number (summary.json, metrics.jsonl, class_history.jsonl, the final
state) within `test_seed_axis`'s tolerance; each member's summary records its values; a field its
method does not declare traceable is refused, named, before a workdir is written; the CLI's
spellings.

Measured on this machine (2026-12-06, AVX-512), one digits epoch (15 steps), largest |Δ| of a
logged number / largest relative ‖Δ‖ of a state leaf over the three members: MR2's λ 1.9e-6 /
4.7e-7, the reweighting's α 9.5e-7 / 6.7e-7 (printed by the tests under `pytest -s`), within the
seed axis's bounds (1e-4 relative on a number, 1e-3 on a leaf).
"""

import json
import subprocess
import sys
import types

import pytest

from experiments.common.errors import ConfigError
from experiments.methods import registry
from experiments.studies import method_comparison
from experiments.train import loop
from experiments.train import seed_axis
from tests.harness.train.test_seed_axis import assert_close
from tests.harness.train.test_seed_axis import config_of


def member_config(loss: str, seed: int, **fields):
  config = registry.with_method_trees(config_of(loss, seed))
  for path, value in fields.items():
    key, name = path.split("__")
    config[key][name] = value
  return config


# The reweighting's sweep in the slow run: its traced α is checked against the static loss in the
# default run (tests/harness/methods/test_registry.py), and mr2's sweep takes this path here.
@pytest.mark.parametrize("loss, field, values", [
    ("mr2", "mr2__lam", (0.01, 0.1, 0.3)),
    pytest.param("inverse_reweight", "reweight__alpha", (0.0, 0.5, 3.0), marks=pytest.mark.slow),
])
def test_a_sweep_of_three_values_equals_the_three_solo_runs(loss, field, values, tmp_path):
  configs = [member_config(loss, 0, **{field: v}) for v in values]
  solo = [loop.train_and_evaluate(c, tmp_path / f"solo{i}") for i, c in enumerate(configs)]
  swept = seed_axis.train_and_evaluate_seeds(
      [member_config(loss, 0, **{field: v}) for v in values],
      [tmp_path / f"swept{i}" for i in range(len(values))])
  dotted = field.replace("__", ".")
  for index, (value, summary) in enumerate(zip(values, swept)):
    assert summary["sweep"] == {dotted: value} and summary["seed_axis"] == [0, 0, 0]
    worst, worst_leaf = assert_close(tmp_path / f"solo{index}", tmp_path / f"swept{index}", loss)
    print(f"{dotted}={value}: largest |Δ| of a logged number {worst:.1e}, largest relative "
          f"‖Δ‖ of a state leaf {worst_leaf:.1e}")
  # The values change the runs (else the test would not tell a member's value from another's).
  losses = [[line["loss"] for line in map(json.loads, (tmp_path / f"solo{i}" / "metrics.jsonl"
                                                       ).read_text().splitlines()) if "loss" in line]
            for i in range(len(values))]
  assert all(losses) and len({tuple(x) for x in losses}) == len(values)


def test_a_sweep_with_seeds_and_two_fields_records_each_members_values(tmp_path):
  configs = [member_config("mr2", seed, mr2__lam=lam, mr2__c_bar=c_bar)
             for lam, c_bar in ((0.05, 1.0), (0.2, 2.0)) for seed in (0, 1)]
  assert seed_axis.swept_fields(configs) == ("mr2.lam", "mr2.c_bar")
  summaries = seed_axis.train_and_evaluate_seeds(configs, [tmp_path / f"m{i}" for i in range(4)],
                                                 max_steps=3)
  assert [s["sweep"] for s in summaries] == [{"mr2.lam": 0.05, "mr2.c_bar": 1.0}] * 2 + [
      {"mr2.lam": 0.2, "mr2.c_bar": 2.0}] * 2
  assert [s["seed"] for s in summaries] == [0, 1, 0, 1]


def test_a_declared_sweep_field_is_traced_where_the_members_agree_and_refused_if_not_traceable():
  """An extended sweep's new value alone (its seeds agree on it) is still a member of the sweep;
  a declared field its method does not trace is refused, named."""
  configs = [member_config("mr2", seed, mr2__lam=0.3) for seed in (0, 1)]
  assert seed_axis.swept_fields(configs) == ()
  assert seed_axis.swept_fields(configs, sweep=["mr2.lam"]) == ("mr2.lam",)
  assert seed_axis.swept_values(configs, ["mr2.lam"])["mr2.lam"].tolist() == [
      pytest.approx(0.3)] * 2
  with pytest.raises(ConfigError, match=r"'mr2' declares no traceable field \['mr2.form'\]"):
    seed_axis.swept_fields(configs, sweep=["mr2.form"])


@pytest.mark.parametrize("change, message", [
    (lambda c: setattr(c.mr2, "form", "released"), r"differ in \['mr2.form'\]"),
    (lambda c: setattr(c.mr2, "p", 3.0), r"differ in \['mr2.p'\]"),
    (lambda c: setattr(c.mr2, "lam", 0.1), r"the seeds \[0, 0\] repeat"),
])
def test_a_member_that_differs_in_a_field_not_traceable_is_refused(change, message, tmp_path):
  configs = [member_config("mr2", 0, mr2__lam=0.1), member_config("mr2", 0, mr2__lam=0.3)]
  change(configs[1])
  with pytest.raises(ConfigError, match=message):
    seed_axis.train_and_evaluate_seeds(configs, [tmp_path / "a", tmp_path / "b"])
  assert not any(tmp_path.iterdir())   # refused before any workdir is written


def test_compare_refuses_a_sweep_of_a_field_not_traceable_before_anything_runs(tmp_path):
  base = config_of("ce", 0)
  with pytest.raises(ConfigError, match=r"mr2.form is not a field 'mr2' declares traceable"):
    method_comparison.compare(base, ["ce", "mr2"], [0], tmp_path / "work", tmp_path / "report",
                              sweep={"mr2.form": ["paper", "released"]})
  with pytest.raises(ConfigError, match="reweight.start_epoch is not a field"):
    method_comparison.compare(base, ["ce", "inverse_reweight"], [0], tmp_path / "work",
                              tmp_path / "report", sweep={"reweight.start_epoch": [0, 1]})
  with pytest.raises(ConfigError, match=r"no method of \['ce', 'mr2'\] reads reweight.alpha"):
    method_comparison.compare(base, ["ce", "mr2"], [0], tmp_path / "work", tmp_path / "report",
                              sweep={"reweight.alpha": [0.0, 1.0]})
  with pytest.raises(ConfigError, match="the reference 'mr2'"):
    method_comparison.compare(base, ["mr2", "ce"], [0], tmp_path / "work", tmp_path / "report",
                              sweep={"mr2.lam": [0.0, 1.0]})
  assert not any(tmp_path.iterdir())


def test_compare_trains_a_sweep_as_members_the_report_reads_as_runs(tmp_path):
  base = config_of("ce", 0, epochs=2)
  base.reweight.start_epoch = 1
  method_comparison.compare(base, ["ce", "inverse_reweight"], [0, 1], tmp_path / "work",
                            tmp_path / "report", sweep={"reweight.alpha": [0.0, 2.0]})
  report = json.loads((tmp_path / "report" / "comparison.json").read_text())
  text = json.dumps(report)
  for alpha in ("0", "2"):
    member = f"inverse_reweight-alpha{alpha}"
    assert member in text
    for seed in (0, 1):
      folder = tmp_path / "work" / member.replace("+", "_") / f"seed{seed}"
      summary = json.loads((folder / "summary.json").read_text())
      config = json.loads((folder / "config.json").read_text())
      assert summary["sweep"] == {"reweight.alpha": float(alpha)}
      assert summary["seed_axis"] == [0, 1, 0, 1]
      assert config["reweight"]["alpha"] == float(alpha)
      assert config["init_from"].endswith(f"ce/seed{seed}:1")   # the deferred start from CE
  # Extended by a value: the finished members are re-evaluated as they were (a stack of their
  # own), and the new value's seeds train as one program.
  before = {seed: json.loads((tmp_path / "work" / "inverse_reweight-alpha2" / f"seed{seed}" /
                              "summary.json").read_text()) for seed in (0, 1)}
  method_comparison.compare(base, ["ce", "inverse_reweight"], [0, 1], tmp_path / "work",
                            tmp_path / "report", sweep={"reweight.alpha": [0.0, 2.0, 5.0]})
  for seed in (0, 1):
    old = json.loads((tmp_path / "work" / "inverse_reweight-alpha2" / f"seed{seed}" /
                      "summary.json").read_text())
    assert old["overall_accuracy"] == before[seed]["overall_accuracy"]
    new = json.loads((tmp_path / "work" / "inverse_reweight-alpha5" / f"seed{seed}" /
                      "summary.json").read_text())
    assert new["sweep"] == {"reweight.alpha": 5.0} and new["seed_axis"] == [0, 1]


@pytest.mark.parametrize("texts, message", [
    (["mr2.lam"], "not field=value"),
    (["mr2.lam=0,0"], "repeat"),
    (["mr2.lam=0", "mr2.lam=1"], "swept twice"),
    (["mr2.lam=a,b"], "not all numbers"),
])
def test_bad_sweep_spellings_are_refused(texts, message):
  with pytest.raises(ConfigError, match=message):
    method_comparison.parse_sweep(texts)


def test_seed_ranges():
  assert method_comparison.parse_seeds(["0-4"]) == [0, 1, 2, 3, 4]
  assert method_comparison.parse_seeds(["3", "1"]) == [3, 1]
  with pytest.raises(ConfigError, match="repeat"):
    method_comparison.parse_seeds(["0-2", "1"])
  with pytest.raises(ConfigError, match="neither"):
    method_comparison.parse_seeds(["x"])


def test_the_cli_refuses_a_field_not_traceable_in_one_line_before_any_run(tmp_path):
  done = subprocess.run([sys.executable, "-m", "experiments.compare", "--methods=ce,mr2",
                         "--sweep=mr2.p=2,3", "--seeds=0-1", f"--workdir={tmp_path / 'w'}"],
                        capture_output=True, text=True, check=False)
  assert done.returncode != 0
  assert "mr2.p is not a field 'mr2' declares traceable" in done.stderr
  assert "Traceback" not in done.stderr and not (tmp_path / "w").exists()


def test_members_of_one_seed_share_one_input_pipeline():
  """A sweep's members of one seed read the same batches from their solo pipelines: one pipeline
  serves them (the stacked batch holds one row per seed); a state that differs keeps its own."""
  def run(seed):
    return types.SimpleNamespace(config=types.SimpleNamespace(seed=seed))
  runs = [run(s) for s in (0, 1, 0, 1)]
  assert seed_axis.shared_pipelines(runs, [None] * 4) == [0, 1, 0, 1]
  assert seed_axis.shared_pipelines([run(0)] * 3, [None] * 3) == [0, 0, 0]
  states = [{"epoch": 1}, {"epoch": 1}, {"epoch": 2}]
  assert seed_axis.shared_pipelines([run(0)] * 3, states) == [0, 0, 1]
