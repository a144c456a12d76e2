"""experiments.compare: method specs with config overrides."""

import pytest

from experiments import compare
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
