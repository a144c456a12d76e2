"""Every loss of both libraries against the contract table of docs/api/contract.md: its shape
(per-example, batch objective, stateful), keyword-only `where` / `axis_name`, a typed `aux`, and
the one naming of random arguments (`key` a JAX key, `rng` a NumPy generator, `seed` an int)."""

import importlib
import inspect
import pathlib
import re
import typing

import jax
import numpy as np
import pytest

import mr2_jax
import reweight_jax
from reweight_jax import baselines

CONTRACT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api" / "contract.md"
LIBRARIES = (mr2_jax, reweight_jax, baselines)


def _table():
  if not CONTRACT.exists():
    pytest.skip("the docs are not here (an installed copy of the tests)")
  rows = re.findall(r"^\| `([\w.]+)` \| (per-example|batch objective|stateful) \| `?([^|]+?)`? \|$",
                    CONTRACT.read_text(), re.M)
  return {name: (shape, result) for name, shape, result in rows}


def _members(library):
  """(name, value) of a library's public names; the Flax heads are left out where Flax is not
  installed (the library-only job), as they are classes, not losses."""
  for name in library.__all__:
    try:
      yield name, getattr(library, name)
    except ModuleNotFoundError:
      continue


def _public_losses():
  names = set()
  for library in LIBRARIES:
    for name, value in _members(library):
      if inspect.isfunction(value) and (name.endswith("_loss") or name == "margin_cross_entropy"):
        if name == "mean_class_loss":  # a mean of class losses, not a loss of a batch
          continue
        names.add(f"{library.__name__}.{name}")
  return sorted(names)


def _resolve(qualified):
  module, name = qualified.rsplit(".", 1)
  return getattr(importlib.import_module(module), name)


def test_the_table_lists_every_public_loss_once():
  table = _table()
  assert sorted(table) == _public_losses()


@pytest.mark.parametrize("qualified", _public_losses())
def test_a_loss_has_the_shape_the_table_gives_it(qualified):
  shape, _ = _table()[qualified]
  function = _resolve(qualified)
  signature = inspect.signature(function)
  hints = typing.get_type_hints(function)
  for name in ("where", "axis_name"):
    if name in signature.parameters:
      assert signature.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (qualified, name)
  assert "where" in signature.parameters, qualified
  result = hints["return"]
  if shape == "per-example":
    assert result is jax.Array, (qualified, result)
    return
  assert typing.get_origin(result) is tuple, (qualified, result)
  parts = typing.get_args(result)
  assert parts[0] is jax.Array
  assert len(parts) == (2 if shape == "batch objective" else 3), (qualified, parts)
  aux = parts[-1]
  per_example_aux = qualified.endswith("dot_regression_loss")
  if per_example_aux:
    assert aux is jax.Array
  else:  # a NamedTuple, documented with its fields
    assert issubclass(aux, tuple) and hasattr(aux, "_fields") and aux.__doc__, (qualified, aux)
  if shape == "stateful":
    assert "axis_name" in signature.parameters, qualified


def _public_callables():
  for library in LIBRARIES:
    for name, value in _members(library):
      if inspect.isfunction(value):
        yield f"{library.__name__}.{name}", value


RANDOM_TYPES = {"key": "jax.Array", "rng": "np.random.Generator", "seed": None}


def test_random_arguments_have_one_name_per_kind():
  seen = {}
  for qualified, function in _public_callables():
    for parameter in inspect.signature(function).parameters.values():
      annotation = str(parameter.annotation)
      lowered = parameter.name.lower()
      if "Generator" in annotation:
        assert parameter.name == "rng", (qualified, parameter.name)
      if parameter.name == "key" or "prng" in lowered or lowered in ("random_state", "rng_key"):
        assert parameter.name == "key" and "jax.Array" in annotation, (qualified, parameter)
      if parameter.name in RANDOM_TYPES:
        seen.setdefault(parameter.name, []).append(qualified)
  assert set(seen) == set(RANDOM_TYPES), seen  # each kind is used somewhere, under its one name
  assert np.random.Generator  # the annotation the `rng` arguments name


# Families: a loss and its variants (and the reductions that share one signature). An argument they
# share is taken the same way by each (positional or keyword-only, with a default or without), so
# switching between them changes the function's name, not the call.
FAMILIES = {
    "MR2": ("mr2_jax.mr2_loss", "mr2_jax.mr2_terms", "mr2_jax.update_class_stats",
            "mr2_jax.margin_cross_entropy", "mr2_jax.representation_margin_loss"),
    "reweighting": ("reweight_jax.inverse_reweighted_loss",
                    "reweight_jax.mixed_inverse_reweighted_loss"),
    "ETF-DR": ("reweight_jax.baselines.dot_regression_loss",
               "reweight_jax.baselines.mixup_dot_regression_loss"),
    "class-weighted DRO": ("reweight_jax.baselines.class_weighted_loss",
                           "reweight_jax.baselines.group_dro_loss",
                           "reweight_jax.baselines.fairdro_loss"),
    "per-example cross-entropies": (
        "reweight_jax.cross_entropy_loss", "reweight_jax.baselines.focal_loss",
        "reweight_jax.baselines.ldam_loss", "reweight_jax.baselines.ib_loss",
        "reweight_jax.baselines.logit_adjusted_loss", "reweight_jax.baselines.balanced_softmax_loss",
        "reweight_jax.baselines.eql_loss", "reweight_jax.baselines.gce_loss",
        "reweight_jax.baselines.soft_cross_entropy"),
    "LfF": ("reweight_jax.baselines.gce_loss", "reweight_jax.baselines.lff_loss"),
    "per-class sums": ("reweight_jax.batch_class_losses", "reweight_jax.per_class_loss_sums",
                       "reweight_jax.per_class_correct"),
    "Neural Collapse": ("reweight_jax.nc_metrics", "reweight_jax.NCAccumulator.update"),
}


def _resolve_member(qualified):
  try:
    return _resolve(qualified)
  except (AttributeError, ModuleNotFoundError):  # Class.method
    owner, method = qualified.rsplit(".", 1)
    return getattr(_resolve(owner), method)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_takes_its_shared_arguments_alike(family):
  kinds = {}
  for qualified in FAMILIES[family]:
    for parameter in inspect.signature(_resolve_member(qualified)).parameters.values():
      if parameter.name == "self":
        continue
      how = (parameter.kind, parameter.default is inspect.Parameter.empty)
      kinds.setdefault(parameter.name, {}).setdefault(how, []).append(qualified)
  unlike = {name: ways for name, ways in kinds.items() if len(ways) > 1}
  assert not unlike, unlike
