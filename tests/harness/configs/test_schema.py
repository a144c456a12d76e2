"""experiments/configs/schema.py, the one config check: the run's config (`complete`) holds the
shared fields and the sub-trees of the methods its loss trains, each the method's defaults under
what the config sets, and nothing else; a field that is no field, a sub-tree field the method does
not have or a value of another type is named; the deferred starts a config sets decide which
checkpoints a run keeps; and what was recorded before every config held every method's sub-tree
is read as today's run config: the parked run of results/cifar10_lt_200/unfinished/ resumes (its
config.json and its checkpoint, the loss state of CE empty)."""

import json
import pathlib
import shutil

import jax
import ml_collections
import pytest

from experiments.common.errors import ConfigError
from experiments.configs import cifar10_lt_200
from experiments.configs import default
from experiments.configs import digits_lt
from experiments.configs import schema
from experiments.methods import registry
from experiments.train import checkpoints
from experiments.train import lineage
from experiments.train import train_state

ROOT = pathlib.Path(__file__).resolve().parents[3]
PARKED = ROOT / "results" / "cifar10_lt_200" / "unfinished" / "ce" / "seed1"


def test_the_run_config_holds_the_sub_trees_its_loss_reads_at_their_defaults_under_the_file():
  config = digits_lt.get_config()  # sets reweight.start_epoch, ldam.drw_epoch, ib.start_epoch
  config.loss = "mr2+inverse_reweight"
  config.mr2 = ml_collections.ConfigDict(dict(lam=0))  # an int for a float field: widened
  run = schema.complete(config)
  shared = set(default.get_config())
  assert set(run) == shared | {"mr2", "reweight"}
  assert run.mr2.lam == 0.0 and isinstance(run.mr2.lam, float)
  assert run.mr2.decay == registry.CONFIG_TREES["mr2"].defaults()["decay"]
  assert run.reweight.start_epoch == 20 and run.reweight.alpha == 0.0
  recorded = list(json.loads(run.to_json_best_effort()))  # config.json's order
  assert recorded[recorded.index("loss") + 1:][:2] == ["mr2", "reweight"]  # beside the loss
  assert schema.complete(run).to_json() == run.to_json()
  config.loss = "ce"
  assert set(schema.complete(config)) == shared
  config.loss = "ldam_drw"  # deferred: LDAM's sub-tree, read in both phases
  assert schema.complete(config).ldam.drw_epoch == 20


@pytest.mark.parametrize("change, message", [
    (lambda c: setattr(c, "learning_rat", 0.1), r"config\.learning_rat: not a field"),
    (lambda c: setattr(c, "mr2", ml_collections.ConfigDict(dict(lamda=0.1))),
     r"config\.mr2\.lamda: not a field of the 'mr2' sub-tree"),
    (lambda c: setattr(c, "mr2", ml_collections.ConfigDict(dict(form=3))), r"config\.mr2\.form"),
    (lambda c: setattr(c, "mr2", 0.1), r"config\.mr2: the 'mr2' method's sub-tree is a ConfigDict"),
    (lambda c: setattr(c, "loss", "nope"), r"config\.loss: unknown loss 'nope'"),
])
def test_what_is_no_field_of_the_run_is_named(change, message):
  config = digits_lt.get_config()
  config.loss = "mr2"
  change(config)
  with pytest.raises(ConfigError, match=message):
    schema.validate(config)


def test_a_sub_tree_the_config_sets_is_checked_though_the_run_leaves_it_out():
  """A value out of range is refused where the run does not train its method too (the flag's
  config has every method's sub-tree: `--config.focal.gamma=-1` on a CE run is a mistake)."""
  config = digits_lt.get_config()
  config.focal = ml_collections.ConfigDict(dict(gamma=-1.0))
  assert "focal" not in schema.complete(config)
  for loss in ("ce", "focal"):
    config.loss = loss
    with pytest.raises(ConfigError, match=r"config\.focal\.gamma: expected a value in \[0, inf\)"):
      schema.validate(config)
  config.focal.gamma = 2.0
  config.loss = "ce"
  schema.validate(config)


def test_with_method_trees_gives_a_sub_tree_to_set_in_code():
  config = default.get_config()
  config.loss = "mr2"
  filled = registry.with_method_trees(config)
  filled.mr2.form = "released"
  assert "mr2" not in config  # a copy
  assert schema.complete(filled).mr2.form == "released"
  every = registry.with_method_trees(config, registry.CONFIG_TREES)
  assert set(every) == set(config) | set(registry.CONFIG_TREES)


def test_the_deferred_starts_are_the_configs_or_the_methods_defaults():
  """A run keeps the checkpoints at the start epochs of the deferred methods its config sets
  (so that a sibling can start there), a method it does not set at its default."""
  starts = schema.deferred_starts(cifar10_lt_200.get_config())
  assert starts == {"ib.start_epoch": 160, "ldam.drw_epoch": 160, "reweight.start_epoch": 160}
  config = default.get_config()
  defaults = {f: registry.CONFIG_TREES[f.split(".")[0]].defaults()[f.split(".")[1]]
              for f in registry.start_fields()}
  assert schema.deferred_starts(config) == defaults
  config.num_epochs = 150
  assert checkpoints.start_epochs(config) == tuple(sorted(
      e for e in set(defaults.values()) if 0 < e < 150))


def test_a_config_json_with_every_methods_sub_tree_reads_as_the_run_config():
  """Runs recorded before a config held only its methods' sub-trees (every committed config.json
  under results/) read as today's run config: their loss's sub-trees, the others left out."""
  saved = json.loads((PARKED / "config.json").read_text())
  assert set(registry.CONFIG_TREES) <= set(saved)  # recorded with every method's sub-tree
  config = cifar10_lt_200.get_config()
  config.seed = 1
  read = lineage.read_saved_config(PARKED / "config.json")
  assert not set(read) & set(registry.CONFIG_TREES)  # CE reads none
  now = json.loads(schema.complete(config).to_json_best_effort())
  assert lineage.differences(read, now, free=checkpoints.RESUMABLE_FIELDS) == []


def test_the_parked_run_resumes_from_its_checkpoint(tmp_path):
  """The parked CE run's latest checkpoint restores into the state today's trainer builds for its
  config (digest checked; CE's loss state is empty), and its workdir resumes with today's config."""
  workdir = tmp_path / "seed1"
  shutil.copytree(PARKED, workdir)
  config = schema.complete(cifar10_lt_200.get_config())
  config.seed = 1
  checkpoints.check_resumable(workdir, config)
  model = train_state.build_model(config, 10)
  template = train_state.create_train_state(
      config, model, (32, 32, 3), 10, train_state.create_learning_rate_fn(config, 96),
      jax.random.key(config.seed))
  assert template.loss_state == {}
  restored = checkpoints.restore_latest(checkpoints.manager(workdir, config), template)
  assert int(restored.step) == max(int(p.name) for p in (workdir / "checkpoints").iterdir()
                                   if p.name.isdigit())
