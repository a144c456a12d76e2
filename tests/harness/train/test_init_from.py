"""config.init_from: a deferred loss starts from its `before` run's checkpoint at the switch epoch
and ends equal to the run that trained the same epochs itself, its logs starting with the other
run's up to the switch; any other difference is refused."""

import json

import chex
import pytest

from experiments.train import loop
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from tests import checkpoints as checkpoint_files

STEPS_PER_EPOCH = 7  # digits LT at batch 64
SWITCH = 2
TOTAL = 4 * STEPS_PER_EPOCH


def config_for(loss, **overrides):
  config = digits_lt.get_config()
  config.loss = loss
  config.num_epochs = 4
  config.reweight.start_epoch = SWITCH
  config.ldam.drw_epoch = SWITCH
  config.checkpoint_every_steps = 100  # only the kept switch epoch and the end are written
  config.log_every_steps = 7
  config.progress_bar = False
  config.nc_metrics = False
  config.class_loss_every_epochs = 1  # class_history.jsonl and ρ every epoch
  for field, value in overrides.items():
    config[field] = value
  return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("init_from")
  source = root / "ce"
  loop.train_and_evaluate(config_for("ce"), source)  # keeps epoch 2 (reweight.start_epoch)
  return root, source


def test_source_run_keeps_its_switch_epoch_checkpoint(runs):
  _, source = runs
  steps = sorted(int(p.name) for p in (source / "checkpoints").iterdir() if p.name.isdigit())
  assert SWITCH * STEPS_PER_EPOCH in steps and TOTAL in steps


def test_deferred_run_from_the_switch_equals_the_uninterrupted_run(runs):
  root, source = runs
  straight = root / "straight"
  loop.train_and_evaluate(config_for("inverse_reweight"), straight)
  started = root / "started"
  summary = loop.train_and_evaluate(
      config_for("inverse_reweight", init_from=f"{source}:{SWITCH}"), started)
  (step_a, a), (step_b, b) = (checkpoint_files.restore_latest(straight),
                              checkpoint_files.restore_latest(started))
  assert step_a == step_b == TOTAL
  # Bit for bit: before its start the deferred loss computes CE (one branch of its cond).
  chex.assert_trees_all_equal(a, b)
  straight_summary = (straight / "summary.json").read_text()
  assert '"per_class_accuracy"' in straight_summary
  assert summary["per_class_accuracy"] == json.loads(straight_summary)["per_class_accuracy"]
  # Its logs start with the source's records up to the switch (copied), then its own, which are
  # the uninterrupted run's. metrics.jsonl equals that run's throughout (only the measured speed
  # differs); class_history.jsonl lacks, before the switch, the per-class weights the uninterrupted
  # run logged while its loss computed CE (the source never computed them).
  switch = SWITCH * STEPS_PER_EPOCH
  for name in ("metrics.jsonl", "class_history.jsonl"):
    straight_rows, started_rows, source_rows = (_records(run / name)
                                                for run in (straight, started, source))
    copied = [r for r in source_rows if r["step"] <= switch]
    assert any("train_class_ce" in r or "train_rho" in r for r in copied)
    assert started_rows == copied + [r for r in straight_rows if r["step"] > switch], name
  assert _records(started / "metrics.jsonl") == _records(straight / "metrics.jsonl")


def _records(path):
  """The JSON lines of a log, without the measured images/s."""
  rows = [json.loads(line) for line in path.read_text().splitlines()]
  return [{k: v for k, v in row.items() if k != "images_per_sec"} for row in rows]


@pytest.mark.parametrize("loss, overrides, message", [
    ("inverse_reweight", {"learning_rate": 0.01}, "fields learning_rate"),
    ("inverse_reweight", {"seed": 1}, "fields seed"),
    ("mr2+inverse_reweight", {}, "trains as 'mr2' before its start"),
    ("inverse_reweight", {"init_from": "{source}:1"},
     r"no checkpoint at the end of epoch 1 \(step 7\); it kept epochs \[2, 4\]"),
    ("inverse_reweight", {"init_from": "{source}"}, "expected '<workdir>:<epoch>'"),
])
def test_init_from_refuses_a_run_that_differs(runs, tmp_path, loss, overrides, message):
  _, source = runs
  overrides = {k: (v.format(source=source) if isinstance(v, str) else v)
               for k, v in overrides.items()}
  overrides.setdefault("init_from", f"{source}:{SWITCH}")
  with pytest.raises(ConfigError, match=message):
    loop.train_and_evaluate(config_for(loss, **overrides), tmp_path / "run")


def test_init_from_refuses_an_epoch_after_the_start(runs, tmp_path):
  _, source = runs
  config = config_for("inverse_reweight", init_from=f"{source}:{SWITCH}")
  config.reweight.start_epoch = 1
  with pytest.raises(ConfigError, match="after the start of 'inverse_reweight'"):
    loop.train_and_evaluate(config, tmp_path / "run")
