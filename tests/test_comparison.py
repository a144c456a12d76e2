"""experiments.comparison: method specs with config overrides, deferred methods started from the reference."""

import pytest

from experiments import comparison as compare
from experiments.config_errors import ConfigError
from experiments.configs import digits_lt


def test_parse_method():
  assert compare.parse_method("ce") == ("ce", "ce", {})
  assert compare.parse_method("g=mr2:mr2.lam=0.0:mr2.form=released") == (
      "g", "mr2", {"mr2.lam": 0.0, "mr2.form": "released"})


def test_method_config_applies_overrides_with_the_field_type():
  name, config = compare.method_config(digits_lt.get_config(), "ir=inverse_reweight:"
                                       "reweight.macro=False:reweight.start_epoch=3", seed=4)
  assert (name, config.loss, config.seed) == ("ir", "inverse_reweight", 4)
  assert config.reweight.macro is False and config.reweight.start_epoch == 3
  with pytest.raises(ConfigError, match="unknown config field 'mr2.nope'"):
    compare.method_config(digits_lt.get_config(), "x=mr2:mr2.nope=1", seed=0)


def test_method_config_rejects_a_wrong_type_in_one_line():
  with pytest.raises(ConfigError, match="reweight.start_epoch"):
    compare.method_config(digits_lt.get_config(), "x=inverse_reweight:reweight.start_epoch=0.5",
                          seed=0)
  with pytest.raises(ConfigError, match="unknown config field 'nope.lam'"):
    compare.method_config(digits_lt.get_config(), "x=mr2:nope.lam=1", seed=0)


def test_deferred_methods_start_from_the_reference_run_when_their_configs_allow(tmp_path):
  import json
  base = digits_lt.get_config()
  base.num_epochs, base.reweight.start_epoch, base.nc_metrics = 3, 2, False
  specs = ["ce", "inverse_reweight", "ir_lr=inverse_reweight:learning_rate=0.01",
           "mr2_ir=mr2+inverse_reweight"]
  compare.compare(base, specs, [0], tmp_path, tmp_path / "report")
  def init_from(method):
    return json.loads((tmp_path / method / "seed0" / "config.json").read_text())["init_from"]
  assert init_from("inverse_reweight") == f"{(tmp_path / 'ce' / 'seed0').resolve()}:2"
  assert init_from("ir_lr") is None      # another learning rate: trains every epoch itself
  assert init_from("mr2_ir") is None     # trains as MR2 (not the reference's CE) before its start
  assert (tmp_path / "report" / "report.md").is_file()
