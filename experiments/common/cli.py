"""The command line of every entry point, on absl flags: a bad flag, config or data set is one line
on stderr and exit status 2.

`experiments.main`, `compare` and `demo` define their flags at import and run under `run_app`. The
other commands — modules that are libraries too, imported by each other and by the tests — define
theirs in a `define_flags(flag_values)` function and run under `run_command`, so that importing one
defines no flag and two commands' `--out` never meet in one FlagValues.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from absl import app
from absl import flags
from absl import logging

from experiments.common.errors import CheckpointError
from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.common.errors import DiagnoseError
from experiments.common.errors import MetricWriteError
from experiments.common import xla_cpu

EXPECTED = (ConfigError, CheckpointError, MetricWriteError, DataError, DiagnoseError,
            FileNotFoundError, FloatingPointError)

# The flags `define_list` and `define_xla_cpu_tuning` define belong to the module that calls them
# (they are listed by its `--help`), not to this one.
flags.disclaim_key_flags()


def error_line(error: BaseException) -> str:
  """The first line of an error's message (its type's name when it has none)."""
  return str(error).splitlines()[0] if str(error) else type(error).__name__


def report(message: str) -> int:
  """Prints `error: <message>` on stderr; returns the exit status of an error, 2."""
  print(f"error: {message}", file=sys.stderr)
  return 2


def fail(message: str) -> NoReturn:
  sys.exit(report(message))


@contextlib.contextmanager
def one_line_errors():
  try:
    yield
  except EXPECTED as error:
    fail(error_line(error))


def _parse_flags(argv):
  """Flag parsing where a bad `--config.*` override (unknown field, wrong type) is one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    fail(str(error).splitlines()[0])
  except (AttributeError, KeyError, TypeError, ValueError) as error:
    message = " ".join(str(error).replace("\\n", " ").replace("\\", "").split()).strip("'\"")
    fail(f"bad config override: {message}")


def run_app(main, argv) -> NoReturn:
  """absl's app.run, with bad flags and config overrides reported as one line too."""
  try:
    app.run(main, argv, flags_parser=_parse_flags)
  except app.UsageError as error:
    fail(str(error))


# A command runs with the parsed flags (and, with `passthrough`, the positional arguments).
Command = Callable[..., "int | None"]


def run_command(define_flags: Callable[[flags.FlagValues], None],
                command: Command | Mapping[str, Command], argv: Sequence[str] | None = None, *,
                passthrough: bool = False) -> int:
  """Runs a command-line entry point: `define_flags(flag_values)` declares its absl flags, the
  arguments are parsed into them, and `command(flag_values)` runs.

  With `argv` None (`python -m ...`) the flags are absl's global FLAGS and `absl.app.run` parses
  sys.argv (`--help` lists the flags with their help; absl logging at WARNING, as `main` sets it);
  this never returns. With `argv` (the arguments after the program name: a call from Python or a
  test) they go to a fresh `flags.FlagValues` and the exit status is returned.

  `command` may be a mapping {name: command}: the one positional argument picks it
  (`python -m experiments.studies.linear_probe study --out=...`). Otherwise a positional argument is
  an error, unless `passthrough`: then the positional arguments (those after `--`) are the
  command's second argument. A bad flag or argument, or an expected error (`EXPECTED`), is one line
  on stderr and status 2; else the status is the command's return value (None: 0).
  """
  if argv is None:
    define_flags(flags.FLAGS)
    run_app(functools.partial(_main, command, passthrough), sys.argv)
  values = flags.FlagValues()
  define_flags(values)
  try:
    args = values(["", *argv])[1:]
  except flags.Error as error:
    return report(error_line(error))
  return _run_parsed(command, values, args, passthrough)


def _main(command, passthrough: bool, argv: list[str]) -> int:
  """`absl.app.run`'s main: the global FLAGS are parsed, argv[0] is the program."""
  logging.set_verbosity(logging.WARNING)
  return _run_parsed(command, flags.FLAGS, argv[1:], passthrough)


def _run_parsed(command, values: flags.FlagValues, args: list[str], passthrough: bool) -> int:
  if isinstance(command, Mapping):
    if len(args) != 1 or args[0] not in command:
      return report(f"expected one command of {tuple(command)}, got {args or 'none'}")
    command, args = command[args[0]], []
  if args and not passthrough:
    return report(f"unexpected arguments: {args}")
  try:
    status = command(values, args) if passthrough else command(values)
  except EXPECTED as error:
    return report(error_line(error))
  return status or 0


class _ItemListParser(flags.ListParser):
  """Comma-separated items (empty ones dropped), each converted by `item` and, with `choices`, one
  of them."""

  def __init__(self, item: Callable[[str], object], choices: tuple | None) -> None:
    super().__init__()
    self.item, self.choices = item, choices

  def parse(self, argument):
    values = [self.item(value) for value in super().parse(argument) if value != ""]
    unknown = [value for value in values if self.choices is not None and value not in self.choices]
    if unknown:
      raise ValueError(f"{unknown}: expected some of {list(self.choices)}")
    return values

  def flag_type(self) -> str:
    return f"comma-separated list of {getattr(self.item, '__name__', 'value')}"


def define_list(name: str, default: Sequence | None,
                help: str, *,  # pylint: disable=redefined-builtin
                item: Callable[[str], object] = str, choices: Sequence | None = None,
                flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """A comma-separated list flag (`--seeds=0,1,2`): absl's DEFINE_list whose items are parsed by
  `item` (int, float) and, with `choices` (listed in the help), must be among them."""
  if choices is not None:
    choices = tuple(choices)
    help = f"{help} Any of: {', '.join(map(str, choices))}."
  return flags.DEFINE(_ItemListParser(item, choices), name,
                      None if default is None else list(default), help, flag_values,
                      flags.CsvListSerializer(","))


def define_xla_cpu_tuning(flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """`--xla_cpu_tuning` / `--noxla_cpu_tuning`, as `experiments.main` has it."""
  return flags.DEFINE_bool(
      "xla_cpu_tuning", True, "Add experiments.common.xla_cpu.TUNED_FLAGS to XLA_FLAGS (CPU "
      "backend only); --noxla_cpu_tuning leaves XLA_FLAGS as they are.", flag_values=flag_values)


def with_xla_cpu_tuning(command: Command) -> Command:
  """`command`, run after `xla_cpu.configure(args.xla_cpu_tuning)` (the flag of
  `define_xla_cpu_tuning`), i.e. before its first JAX computation."""
  @functools.wraps(command)
  def configured(args: flags.FlagValues):
    xla_cpu.configure(args.xla_cpu_tuning)
    return command(args)
  return configured
