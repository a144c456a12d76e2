"""A run's lineage: a run that derives from another one — resumes its workdir, starts from its
checkpoint (`config.init_from`), freezes its encoder (`config.frozen_encoder_from`), trains on its
error set (`config.jtt.stage1`) — reads that run's config.json and refuses to go on where the two
differ in a field that must agree. One reading (`read_saved_config`), one comparison
(`differences`), one error (`check_same_config`: a `ConfigError` naming the other run, every field
that differs and both values)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Collection
from typing import Any

from experiments.common.errors import ConfigError
from experiments.configs import default
from experiments.configs import schema
from experiments.methods import registry

class _Absent:
  """The value of a field one side does not have (shown as `absent` in an error)."""

  def __repr__(self) -> str:
    return "absent"


ABSENT = _Absent()

# The fields that select a run's training set: a run that reads another run's predictions on it
# (JTT's error set) or freezes its encoder must share them.
TRAINING_SET_FIELDS = ("dataset", "imbalance_factor", "lt_selection", "max_train_per_class",
                       "validation_fraction", "seed")


def _with_defaults(saved: dict, defaults: dict) -> dict:
  merged = dict(defaults)
  for key, value in saved.items():
    merged[key] = (_with_defaults(value, defaults[key])
                   if isinstance(value, dict) and isinstance(defaults.get(key), dict) else value)
  return merged


def saved_run_config(saved: dict) -> dict:
  """A run's recorded config (its config.json as a dict) as today's run config reads
  (`schema.complete`): fields added to the project since it was written at their defaults (a
  field that did not exist then had its default's behaviour: every new field is added so), the
  sub-trees of the methods its loss trains with their fields likewise, and no other method's
  sub-tree (runs recorded before a run's config held its methods' sub-trees alone hold every
  method's). So an older run compares equal to a run of today that leaves a field at its default —
  it can be resumed, started from (`init_from`) and read back."""
  shared = json.loads(default.get_config().to_json_best_effort())
  out = _with_defaults({key: value for key, value in saved.items()
                        if key not in registry.CONFIG_TREES}, shared)
  if saved.get("loss") not in registry.REGISTRY:  # a method since removed: kept as recorded
    return {**out, **{key: saved[key] for key in registry.CONFIG_TREES if key in saved}}
  for key in registry.method_trees(saved["loss"]):
    tree = json.loads(registry.method_tree(key).to_json_best_effort())
    out[key] = _with_defaults(saved.get(key, {}), tree)
  return out


def read_saved_config(path: str | pathlib.Path) -> dict:
  """The config.json at `path` as today's run config reads (`saved_run_config`)."""
  return saved_run_config(json.loads(pathlib.Path(path).read_text()))


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
  """{'a.b': leaf} of a nested dict; an empty dict is a leaf (it differs from an absent field)."""
  out = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict) and value:
      out.update(flatten(value, f"{name}."))
    else:
      out[name] = value
  return out


def _covers(names: Collection[str], field: str) -> bool:
  """Whether `field` ('a.b.c') is one of `names` or lies under one ('a', 'a.b')."""
  parts = field.split(".")
  return any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))


def differences(before: dict, now: dict, *, fields: Collection[str] | None = None,
                free: Collection[str] = ()) -> list[tuple[str, Any, Any]]:
  """(field, value before, value now) of every leaf field ('reweight.start_epoch') in which two
  JSON dicts differ, sorted by field: only fields in or under `fields` when given, else every field
  but those in or under `free`. A field one side lacks has the value `ABSENT` there."""
  flat_before, flat_now = flatten(before), flatten(now)
  changed = []
  for field in sorted(set(flat_before) | set(flat_now)):
    if (fields is not None and not _covers(fields, field)) or _covers(free, field):
      continue
    old, new = flat_before.get(field, ABSENT), flat_now.get(field, ABSENT)
    if old != new:
      changed.append((field, old, new))
  return changed


def describe(changed: list[tuple[str, Any, Any]]) -> str:
  """'fields seed (0 there, 1 here), views (1 there, 2 here)' of `differences`."""
  return "fields " + ", ".join(f"{field} ({old!r} there, {new!r} here)"
                               for field, old, new in changed)


def check_same_config(source: str | pathlib.Path, config, *, label: str, why: str,
                      fields: Collection[str] | None = None, free: Collection[str] = ()) -> dict:
  """The config of the run in `source` (`read_saved_config`), refused where it differs from
  `config` (a ConfigDict) in the fields compared (`differences`: `fields`, or all but `free`).

  Raises:
    ConfigError: '<label>: <source> holds no config.json of a run', or '<label>: <source> was run
      with a different config (fields f (a there, b here), ...); <why>'.
  """
  saved = pathlib.Path(source) / "config.json"
  if not saved.is_file():
    raise ConfigError(f"{label}: {source} holds no config.json of a run")
  before = read_saved_config(saved)
  changed = differences(before, json.loads(config.to_json_best_effort()), fields=fields,
                        free=free)
  if changed:
    raise ConfigError(f"{label}: {source} was run with a different config ({describe(changed)}); "
                      f"{why}")
  return before
