"""experiments/train/lineage.py: one check that a run agrees with the run it derives from (the
trainer's refusals through it are tested in test_train, test_init_from, test_frozen_encoder and
test_stage1)."""

import json

import ml_collections
import pytest

from experiments.common.errors import ConfigError
from experiments.configs import default
from experiments.train import lineage

BEFORE = {"seed": 0, "loss": "ce", "reweight": {"start_epoch": 2, "power": 1.0}, "tags": {}}
NOW = {"seed": 1, "loss": "mr2", "reweight": {"start_epoch": 3, "power": 1.0}, "views": 2}


def test_differences_are_leaf_fields_with_both_values():
  assert lineage.differences(BEFORE, NOW) == [
      ("loss", "ce", "mr2"), ("reweight.start_epoch", 2, 3), ("seed", 0, 1),
      ("tags", {}, lineage.ABSENT), ("views", lineage.ABSENT, 2)]


def test_differences_in_given_fields_or_all_but_free_ones():
  assert lineage.differences(BEFORE, NOW, fields=("seed", "reweight")) == [
      ("reweight.start_epoch", 2, 3), ("seed", 0, 1)]
  assert lineage.differences(BEFORE, NOW, free=("loss", "reweight", "tags", "views")) == [
      ("seed", 0, 1)]
  assert lineage.differences(BEFORE, BEFORE) == []


def test_describe_names_each_field_and_both_values():
  changed = lineage.differences(BEFORE, NOW, fields=("seed", "views"))
  assert lineage.describe(changed) == "fields seed (0 there, 1 here), views (absent there, 2 here)"


def test_check_same_config_refuses_naming_the_run_the_fields_and_both_values(tmp_path):
  config = default.get_config()
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  assert lineage.check_same_config(tmp_path, config, label="config.x", why="w") == json.loads(
      config.to_json_best_effort())
  config.seed, config.learning_rate = 7, 0.5
  with pytest.raises(ConfigError, match=rf"^config\.x: {tmp_path} was run with a different config "
                     r"\(fields seed \(0 there, 7 here\)\); only the seed$"):
    lineage.check_same_config(tmp_path, config, label="config.x", fields=("seed", "model"),
                              why="only the seed")
  with pytest.raises(ConfigError, match=r"fields learning_rate \(.* there, 0\.5 here\), seed"):
    lineage.check_same_config(tmp_path, config, label="config.x", why="w")
  lineage.check_same_config(tmp_path, config, label="config.x", why="w",
                            free=("seed", "learning_rate"))
  with pytest.raises(ConfigError, match=r"config\.x: .*nothing holds no config\.json of a run"):
    lineage.check_same_config(tmp_path / "nothing", config, label="config.x", why="w")


def test_a_saved_config_reads_with_the_fields_added_since_at_their_defaults(tmp_path):
  saved = json.loads(default.get_config().to_json_best_effort())
  del saved["views"]
  (tmp_path / "config.json").write_text(json.dumps(saved))
  config = ml_collections.ConfigDict(lineage.read_saved_config(tmp_path / "config.json"))
  assert config.views == default.get_config().views
