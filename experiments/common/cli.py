"""Command-line error handling: a bad config or data set is one line on stderr and exit status 2."""

from __future__ import annotations

import contextlib
import sys

from absl import app
from absl import flags

from experiments.common.errors import CheckpointError
from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.common.errors import MetricWriteError

EXPECTED = (ConfigError, CheckpointError, MetricWriteError, DataError, FileNotFoundError, FloatingPointError)


def fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


@contextlib.contextmanager
def one_line_errors():
  try:
    yield
  except EXPECTED as error:
    fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


def _parse_flags(argv):
  """Flag parsing where a bad `--config.*` override (unknown field, wrong type) is one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    fail(str(error).splitlines()[0])
  except (AttributeError, KeyError, TypeError, ValueError) as error:
    message = " ".join(str(error).replace("\\n", " ").replace("\\", "").split()).strip("'\"")
    fail(f"bad config override: {message}")


def run_app(main, argv):
  """absl's app.run, with bad flags and config overrides reported as one line too."""
  try:
    app.run(main, argv, flags_parser=_parse_flags)
  except app.UsageError as error:
    fail(str(error))
