"""Config overrides, one way for every caller: `field=value` strings parsed to Python values, and
{field: value} pairs applied to an `ml_collections.ConfigDict` field by dotted name.

Used by `experiments.studies.method_comparison` (the `name=loss:field=value:...` method specs of
`python -m experiments.compare --methods`) and `experiments.studies.probe_runs.probe_config` (the
frozen-feature studies' run configs). `--config.field=value` on the command line is
`ml_collections.config_flags`'s own parser and does not come here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

import ml_collections

from experiments.common.errors import ConfigError


def parse_value(text: str) -> object:
  """The Python literal `text` spells ('0' → 0, '0.5', 'False', "'x'", '(1, 2)', 'None'), else the
  text itself ('released' → 'released'). The field's type is checked when the value is applied."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def parse_override(text: str) -> tuple[str, object]:
  """'mr2.lam=0' → ('mr2.lam', 0); ConfigError when `text` is not `field=value`."""
  field, equals, value = text.partition("=")
  if not equals or not field:
    raise ConfigError(f"override {text!r} is not field=value")
  return field, parse_value(value)


def parse_overrides(texts: Iterable[str]) -> dict[str, object]:
  """['a.b=1', 'c=x'] → {'a.b': 1, 'c': 'x'} (a later assignment of a field wins)."""
  return dict(parse_override(text) for text in texts)


def apply_override(config: ml_collections.ConfigDict, field: str, value: object,
                   context: str = "") -> None:
  """config.<field> = value for a dotted `field` that exists, in place.

  The ConfigDict checks the type: an int for a float field is widened, any other mismatch is a
  ConfigError naming the field, as is an unknown field (never a new one). `context`, when given,
  starts the message ('--methods: g: ...').
  """
  prefix = f"{context}: " if context else ""
  *path, last = field.split(".")
  holder = config
  for part in path:
    holder = holder.get(part) if isinstance(holder, ml_collections.ConfigDict) else None
  if not isinstance(holder, ml_collections.ConfigDict) or last not in holder:
    raise ConfigError(f"{prefix}unknown config field {field!r}")
  try:
    holder[last] = value
  except TypeError as error:
    raise ConfigError(f"{prefix}{field}: {error}") from None


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Mapping[str, object] | Iterable[tuple[str, object]],
                    context: str = "") -> ml_collections.ConfigDict:
  """`apply_override` for each (field, value) in order; returns `config` (changed in place)."""
  pairs = overrides.items() if isinstance(overrides, Mapping) else overrides
  for field, value in pairs:
    apply_override(config, field, value, context)
  return config
