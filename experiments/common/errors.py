"""The harness's error types (each reported by the command line as one line, exit status 2:
`experiments.common.cli`), how a numeric field's interval is written (`Range`, `INF`) and a
dotted field's value (`field_value`); the config check itself is `experiments.configs.schema`."""

from __future__ import annotations

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


class DiagnoseError(ValueError):
  """An input the diagnosis cannot use (reported by the CLI as one line, exit status 2)."""


class DataError(Exception):
  """A data set cannot be loaded or a data option is invalid; the message is one line naming why."""


class CheckpointError(RuntimeError):
  """A checkpoint that cannot be read or does not match its digest (the message names the step)."""


class MetricWriteError(OSError):
  """Metrics could not be written (the message names the file and the step)."""
