"""experiments.train.recipes: what a method trains on besides its batch loss, declared once per
method and read by the trainer — and a method the trainer has never seen (a model wrapper, two
views, dataset positions and a sampler) trains through the unchanged loop and step."""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.configs import digits_lt
from experiments.losses import registry as losses
from experiments.losses.entry import recipe_indices
from experiments.losses.entry import recipe_output
from experiments.models import registry as models
from experiments.train import loop
from experiments.train import recipes
from experiments.train import samplers


def test_every_recipe_is_a_loss_and_a_deferred_entry_trains_on_its_before_entrys_recipe():
  assert set(recipes.RECIPES) <= set(losses.LOSSES)
  for name, entry in losses.REGISTRY.items():
    if entry.start is not None:  # one model and one batch layout for both phases
      recipe, before = recipes.method_recipe(name), recipes.method_recipe(entry.before)
      assert recipe == before, name
  assert recipes.method_recipe("focal") is recipes.PLAIN
  for recipe in recipes.RECIPES.values():
    assert recipe.sampler is None or recipe.sampler in samplers.SAMPLERS
    assert (recipe.pair is None) == (recipe.mix is None)  # paired batches are mixed on the device


def test_step_info_carries_what_every_loss_may_read_and_one_recipe_field():
  assert losses.StepInfo._fields == ("epoch", "step_in_epoch", "class_counts", "axis_name", "rng",
                                     "recipe")
  assert set(losses.Loss.__dataclass_fields__) == {"apply", "reads", "state", "start", "before",
                                                   "check", "reads_mix"}


def test_mixup_is_added_to_the_methods_recipe_where_the_method_takes_it():
  config = digits_lt.get_config()
  assert recipes.of(config) == recipes.method_recipe("ce")
  config.mixup_alpha = 0.4
  recipe = recipes.of(config)
  assert (recipe.pair, recipe.mix) == (recipes.mixup_pair, recipes.mixup_mix)
  config.loss, config.head = "etf_dr", "etf"
  assert recipes.of(config).model is recipes.etf_model and recipes.of(config).mix is recipes.mixup_mix
  config.loss = "supcon"
  with pytest.raises(ConfigError, match="does not take mixup batches"):
    recipes.validate(config)
  # From the losses' reads_mix (tests/test_losses.py checks each flag against its loss): the
  # cross-entropy family and ETF-DR; GLMC reads its own pairs' mix, not mixup's.
  assert [n for n in losses.LOSSES if recipes.takes_mixup(n)] == [
      "ce", "inverse_reweight", "jtt", "etf_dr", "etf_dr+inverse_reweight"]


def test_lookup_of_an_unknown_method_names_it():
  with pytest.raises(ConfigError, match="unknown loss 'nope'"):
    recipes.method_recipe("nope")


# A method the trainer does not know: CE plus a penalty on a projection head's outputs, trained on
# two views of the first half of the training set, logging the largest dataset position it saw.
HALF_RECORD = {}


def _toy_loss(config, logits, features, labels, state, info):
  del config, features
  projection = recipe_output(info, "projection", "toy")
  loss = (jnp.mean(reweight_jax.cross_entropy_loss(logits, labels))
          + 1e-3 * jnp.mean(jnp.sum(projection ** 2, axis=-1)))
  return loss, state, {"max_index": jnp.max(recipe_indices(info)).astype(jnp.float32),
                       "rows": jnp.asarray(labels.shape[0], jnp.float32)}


def _first_half(config, train):
  del config
  positions = np.arange(len(train.labels) // 2)
  HALF_RECORD["size"] = len(positions)
  return positions, {"toy_sampler": {"examples": len(positions)}}


def test_a_new_method_with_a_recipe_trains_without_touching_the_step_or_the_loop(
    monkeypatch, tmp_path):
  monkeypatch.setitem(losses.REGISTRY, "toy", losses.Loss(_toy_loss))
  monkeypatch.setitem(samplers.SAMPLERS, "first_half", _first_half)
  monkeypatch.setitem(recipes.RECIPES, "toy", recipes.Recipe(
      model=lambda config, base: models.WithProjection(base, features=8), views=2, indices=True,
      sampler="first_half"))
  config = digits_lt.get_config()
  config.loss, config.num_epochs, config.warmup_epochs, config.batch_size = "toy", 1, 0, 32
  config.log_every_steps, config.progress_bar = 1, False
  summary = loop.train_and_evaluate(config, tmp_path / "toy", max_steps=3)
  rows = [json.loads(line) for line in (tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()
          if '"max_index"' in line]
  assert [r["step"] for r in rows] == [1, 2, 3]
  assert all(r["rows"] == 2 * 32 for r in rows)  # two views of each example reach the loss
  assert all(0 <= r["max_index"] < HALF_RECORD["size"] for r in rows)  # positions, sampled half
  assert summary["toy_sampler"] == {"examples": HALF_RECORD["size"]}
  assert np.isfinite(summary["overall_accuracy"])
