"""Command-line error handling: a bad config or data set is one line on stderr and exit status 2."""

from __future__ import annotations

import contextlib
import sys

from absl import app

from experiments import data as data_lib
from experiments import train

EXPECTED = (train.ConfigError, data_lib.DataError, FileNotFoundError, FloatingPointError)


def fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


@contextlib.contextmanager
def one_line_errors():
  try:
    yield
  except EXPECTED as error:
    fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


def run_app(main, argv):
  """absl's app.run, with config-file parse errors (unknown fields, bad types) as one line too."""
  try:
    app.run(main, argv)
  except app.UsageError as error:
    fail(str(error))
