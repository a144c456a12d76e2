"""The harness's error types (each reported by the command line as one line, exit status 2:
`experiments.common.cli`) and the one range check every config field goes through."""

from __future__ import annotations

from collections.abc import Sequence

INF = float("inf")

# (field, (low, inclusive), (high, inclusive)): a numeric field's allowed interval.
Range = tuple[str, tuple[float, bool], tuple[float, bool]]


class ConfigError(ValueError):
  """A configuration value the harness cannot run with (reported as one line, naming the field)."""


def field_value(config, field: str):
  """config['a']['b'] for field 'a.b'."""
  value = config
  for part in field.split("."):
    value = value[part]
  return value


def check_ranges(config, ranges: Sequence[Range]) -> None:
  """Raises ConfigError naming the first field outside its interval (None values are skipped)."""
  for field, low, high in ranges:
    value = field_value(config, field)
    if value is None:
      continue
    if not (low[0] <= value if low[1] else low[0] < value) or not (
        value <= high[0] if high[1] else value < high[0]):
      interval = f"{'[' if low[1] else '('}{low[0]}, {high[0]}{']' if high[1] else ')'}"
      raise ConfigError(f"config.{field}: expected a value in {interval}, got {value}")


def check_choice(config, field: str, choices: Sequence[str]) -> None:
  """Raises ConfigError when a string field is not one of `choices`."""
  value = field_value(config, field)
  if value not in choices:
    raise ConfigError(f"config.{field}: expected one of {tuple(choices)}, got {value!r}")


class DiagnoseError(ValueError):
  """An input the diagnosis cannot use (reported by the CLI as one line, exit status 2)."""


class DataError(Exception):
  """A data set cannot be loaded or a data option is invalid; the message is one line naming why."""


class CheckpointError(RuntimeError):
  """A checkpoint that cannot be read or does not match its digest (the message names the step)."""


class MetricWriteError(OSError):
  """Metrics could not be written (the message names the file and the step)."""
