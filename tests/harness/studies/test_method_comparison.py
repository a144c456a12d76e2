"""experiments.studies.method_comparison: method specs with config overrides, deferred methods started from the reference."""

import pytest

from experiments.studies import method_comparison
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt


def test_parse_method():
  assert method_comparison.parse_method("ce") == ("ce", "ce", {})
  assert method_comparison.parse_method("g=mr2:mr2.lam=0.0:mr2.form=released") == (
      "g", "mr2", {"mr2.lam": 0.0, "mr2.form": "released"})


def test_method_config_applies_overrides_with_the_field_type():
  name, config = method_comparison.method_config(digits_lt.get_config(), "ir=inverse_reweight:"
                                       "reweight.macro=False:reweight.start_epoch=3", seed=4)
  assert (name, config.loss, config.seed) == ("ir", "inverse_reweight", 4)
  assert config.reweight.macro is False and config.reweight.start_epoch == 3
  with pytest.raises(ConfigError, match="unknown config field 'mr2.nope'"):
    method_comparison.method_config(digits_lt.get_config(), "x=mr2:mr2.nope=1", seed=0)


def test_method_config_rejects_a_wrong_type_in_one_line():
  with pytest.raises(ConfigError, match="reweight.start_epoch"):
    method_comparison.method_config(digits_lt.get_config(), "x=inverse_reweight:reweight.start_epoch=0.5",
                          seed=0)
  with pytest.raises(ConfigError, match="unknown config field 'nope.lam'"):
    method_comparison.method_config(digits_lt.get_config(), "x=mr2:nope.lam=1", seed=0)


def test_which_deferred_methods_start_from_the_reference():
  import json
  base = digits_lt.get_config()
  reference = json.loads(method_comparison.method_config(base, "ce", 0)[1].to_json_best_effort())
  def shares(spec):
    return method_comparison.shares_reference(method_comparison.method_config(base, spec, 0)[1], reference, "ce")
  assert shares("inverse_reweight") and shares("ib")
  assert shares("x=inverse_reweight:reweight.macro=False")   # a loss hyper-parameter: free
  assert not shares("x=inverse_reweight:learning_rate=0.01")  # trains differently from epoch 0
  assert not shares("mr2+inverse_reweight")  # trains as MR2, not CE, before its start
  assert not shares("ldam_drw")              # trains as LDAM before its start
  assert not shares("x=inverse_reweight:reweight.start_epoch=0")  # nothing to share
  assert not shares("mr2")                   # not deferred


# ≈ 55 s on 2 cores; init_from's equality with the uninterrupted run: tests/harness/train/test_init_from.py
@pytest.mark.slow
def test_deferred_method_starts_from_the_reference_run(tmp_path):
  import json
  base = digits_lt.get_config()
  base.num_epochs, base.reweight.start_epoch, base.nc_metrics = 2, 1, False
  method_comparison.compare(base, ["ce", "inverse_reweight"], [0], tmp_path, tmp_path / "report")
  config = json.loads((tmp_path / "inverse_reweight" / "seed0" / "config.json").read_text())
  assert config["init_from"] == f"{(tmp_path / 'ce' / 'seed0').resolve()}:1"
  assert (tmp_path / "report" / "report.md").is_file()


def test_a_deferred_method_starts_from_the_first_earlier_run_it_equals():
  """The reweighting inside a pipeline starts from that pipeline's run, not from the reference's."""
  import json
  base = digits_lt.get_config()
  views = ":views=3:augmentation=released"
  specs = ["ce", "released=ce" + views, "etf=etf_dr:head=etf", "etf_twin=etf_dr:head=etf"]
  earlier = [(method_comparison.parse_method(s)[0], method_comparison.parse_method(s)[1],
              json.loads(method_comparison.method_config(base, s, 0)[1].to_json_best_effort()))
             for s in specs]
  def source(spec):
    return method_comparison.deferred_source(method_comparison.method_config(base, spec, 0)[1], earlier)
  assert source("inverse_reweight") == "ce"
  assert source("rw=inverse_reweight" + views) == "released"
  assert source("rw=etf_dr+inverse_reweight:head=etf") == "etf"   # the first of two equal runs
  assert source("rw=etf_dr+inverse_reweight:head=etf:mixup_alpha=1.0") is None  # etf ran without
  assert source("rw=etf_dr+inverse_reweight:head=etf:reweight.macro=False") == "etf"
  assert source("etf_dr") is None                                   # not deferred
  assert source("rw=inverse_reweight" + views) == "released"
  assert method_comparison.deferred_source(method_comparison.method_config(base, "inverse_reweight", 0)[1], []) is None


def test_run_counter_says_which_run_and_about_how_long_is_left(monkeypatch):
  """The main job's progress line: run i of n, then (from the second run on) the time elapsed and
  the mean time per finished run times the runs left."""
  from experiments.studies import method_comparison
  clock = iter([100.0, 100.0, 130.0, 160.0])
  monkeypatch.setattr(method_comparison.time, "perf_counter", lambda: next(clock))
  counter = method_comparison.RunCounter(4)
  assert counter.starting("ce, seed 0") == "run 1 of 4: ce, seed 0"
  counter.finished()
  assert counter.starting("ce, seed 1") == ("run 2 of 4: ce, seed 1  (30 s elapsed, about 90 s "
                                            "left)")
  counter.finished()
  assert counter.starting("mr2, seed 0") == ("run 3 of 4: mr2, seed 0  (60 s elapsed, about 60 s "
                                             "left)")
