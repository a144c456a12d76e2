"""experiments.common.overrides: the one parser of `field=value` config overrides, and its callers
(`experiments.compare --methods` specs, the probes' loss configs) agreeing on it."""

import ml_collections
import pytest

from experiments.common import overrides
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from experiments.studies import probe_runs
from experiments.studies import method_comparison


def config():
  return ml_collections.ConfigDict({"lr": 0.1, "name": "ce", "tree": {
      "rate": 0.5, "steps": 3, "flag": False, "form": "paper",
      "p": ml_collections.config_dict.placeholder(float)}})


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("0.5", 0.5), ("-2", -2), ("False", False), ("None", None), ("'x'", "x"),
    ("(1, 2)", (1, 2)), ("released", "released"), ("a b", "a b"), ("", "")])
def test_a_value_is_a_python_literal_else_the_text(text, value):
  assert overrides.parse_value(text) == value


def test_parse_override_splits_at_the_first_equals_sign():
  assert overrides.parse_override("tree.rate=0") == ("tree.rate", 0)
  assert overrides.parse_override("name=a=b") == ("name", "a=b")
  assert overrides.parse_overrides(["tree.steps=4", "name=x", "tree.steps=5"]) == {
      "tree.steps": 5, "name": "x"}
  for text in ("tree.rate", "=1", ""):
    with pytest.raises(ConfigError, match="is not field=value"):
      overrides.parse_override(text)


def test_a_valid_override_takes_the_field_type():
  c = overrides.apply_overrides(config(), overrides.parse_overrides(
      ["lr=1", "tree.steps=7", "tree.flag=True", "tree.form=released", "tree.p=5"]))
  assert c.lr == 1.0 and isinstance(c.lr, float)  # an int for a float field is widened
  assert c.tree.steps == 7 and c.tree.flag is True and c.tree.form == "released"
  assert c.tree.p == 5.0 and isinstance(c.tree.p, float)  # a placeholder keeps its type
  c = overrides.apply_overrides(config(), [("tree.rate", 0.25), ("name", "mr2")])  # (field, value)
  assert (c.tree.rate, c.name) == (0.25, "mr2")


@pytest.mark.parametrize("field", ["nope", "tree.nope", "nope.rate", "name.rate", "tree.rate.x"])
def test_an_unknown_field_is_a_config_error_naming_it(field):
  c = config()
  with pytest.raises(ConfigError, match=f"^ctx: unknown config field '{field}'$"):
    overrides.apply_override(c, field, 1, context="ctx")
  assert c.to_dict() == config().to_dict()  # never a new field


@pytest.mark.parametrize("field, value", [("tree.steps", 0.5), ("tree.flag", 1), ("name", 2),
                                          ("tree.rate", "fast")])
def test_a_value_of_the_wrong_type_is_a_config_error_naming_the_field(field, value):
  with pytest.raises(ConfigError, match=f"^{field}: Could not override"):
    overrides.apply_override(config(), field, value)


def test_the_callers_apply_overrides_the_same_way():
  """`compare --methods` specs and the probe studies' run configs go through the one parser."""
  _, from_spec = method_comparison.method_config(
      digits_lt.get_config(), "g=mr2:mr2.lam=0:mr2.form=paper:mr2.c_bar=1.5", seed=0)
  from_probe = probe_runs.probe_config("mr2", {"mr2.lam": 0, "mr2.form": "paper",
                                               "mr2.c_bar": 1.5}, seed=0)
  for field in ("lam", "form", "c_bar"):
    assert from_spec.mr2[field] == from_probe.mr2[field]
    assert type(from_spec.mr2[field]) is type(from_probe.mr2[field])
  assert isinstance(from_probe.mr2.lam, float)
  with pytest.raises(ConfigError, match="--methods: g: unknown config field 'mr2.nope'"):
    method_comparison.method_config(digits_lt.get_config(), "g=mr2:mr2.nope=1", seed=0)
  with pytest.raises(ConfigError, match="--methods: g: override 'mr2.lam' is not field=value"):
    method_comparison.parse_method("g=mr2:mr2.lam")
  with pytest.raises(ConfigError, match="loss 'mr2': unknown config field 'mr2.nope'"):
    probe_runs.probe_config("mr2", {"mr2.nope": 1.0}, seed=0)
  with pytest.raises(ConfigError, match="loss 'focal': focal.gamma: Could not override"):
    probe_runs.probe_config("focal", {"focal.gamma": "high"}, seed=0)
