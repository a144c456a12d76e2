"""experiments.common.cli: one absl command line for every entry point — flags defined when a
command runs (never at import), parsed from argv, errors as one line with exit status 2 — and the
typed list flags."""

import importlib
import subprocess
import sys

import pytest
from absl import flags

from experiments.common import cli
from experiments.common.errors import ConfigError

# The entry points on `cli.run_command` (`define_flags(flag_values)` + `main(argv)`).
COMMANDS = ("experiments.benchmarks.class_stats", "experiments.benchmarks.cpu_gap",
            "experiments.benchmarks.mr2_step_profile", "experiments.benchmarks.neural_collapse",
            "experiments.benchmarks.run", "experiments.data.sources", "experiments.diagnose",
            "experiments.launch", "experiments.report.run_tables", "experiments.report.sweep_table",
            "experiments.studies.linear_probe", "experiments.studies.probe_comparison",
            "experiments.studies.regenerate_reports")


def define_toy(values: flags.FlagValues) -> None:
  flags.DEFINE_string("out", None, "Output.", required=True, flag_values=values)
  cli.define_list("seeds", [0, 1], "Seeds.", item=int, flag_values=values)
  cli.define_list("methods", ("a",), "Methods.", choices=("a", "b"), flag_values=values)


def test_flags_are_parsed_into_a_fresh_flag_values_per_call():
  seen, global_flags = [], set(flags.FLAGS)
  assert cli.run_command(define_toy, seen.append,
                         ["--out=x", "--seeds=3,4,", "--methods", "b"]) == 0
  assert cli.run_command(define_toy, seen.append, ["--out", "y"]) == 0
  assert [(v.out, v.seeds, v.methods) for v in seen] == [("x", [3, 4], ["b"]), ("y", [0, 1], ["a"])]
  assert set(flags.FLAGS) == global_flags  # the global flags are untouched


@pytest.mark.parametrize("argv, message", [
    (["--seeds=1"], "error: flag --out=None: Flag --out must have a value other than None."),
    (["--out=x", "--seeds=1,x"], "error: flag --seeds=1,x: invalid literal for int()"),
    (["--out=x", "--methods=a,c"], "error: flag --methods=a,c: ['c']: expected some of ['a', 'b']"),
    (["--out=x", "--nope=1"], "error: Unknown command line flag 'nope'"),
    (["--out=x", "extra"], "error: unexpected arguments: ['extra']"),
])
def test_a_bad_argument_is_one_line_and_status_2(argv, message, capsys):
  assert cli.run_command(define_toy, lambda values: 0, argv) == 2
  err = capsys.readouterr().err
  assert err.startswith(message) and err.count("\n") == 1, err


def test_an_expected_error_is_one_line_and_the_status_is_the_commands(capsys):
  def bad_config(values):
    raise ConfigError("config.lr: expected a value in (0, inf), got -1\nmore")
  assert cli.run_command(define_toy, bad_config, ["--out=x"]) == 2
  assert capsys.readouterr().err == "error: config.lr: expected a value in (0, inf), got -1\n"
  assert cli.run_command(define_toy, lambda values: 3, ["--out=x"]) == 3
  def bug(values):
    raise RuntimeError("bug")
  with pytest.raises(RuntimeError):  # not an expected error: the traceback stays
    cli.run_command(define_toy, bug, ["--out=x"])


def test_a_positional_argument_picks_the_command_or_passes_through(capsys):
  calls = []
  commands = {"tune": lambda v: calls.append(("tune", v.out)),
              "report": lambda v: calls.append(("report", v.out))}
  assert cli.run_command(define_toy, commands, ["report", "--out=r"]) == 0
  assert cli.run_command(define_toy, commands, ["--out=t", "tune"]) == 0
  assert calls == [("report", "r"), ("tune", "t")]
  for argv in (["--out=x"], ["--out=x", "study"], ["--out=x", "tune", "report"]):
    assert cli.run_command(define_toy, commands, argv) == 2
    assert "expected one command of ('tune', 'report')" in capsys.readouterr().err
  passed = []
  assert cli.run_command(define_toy, lambda v, rest: passed.append(rest),
                         ["--out=x", "--", "--config=c.py", "--workdir=w"], passthrough=True) == 0
  assert passed == [["--config=c.py", "--workdir=w"]]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_entry_point_defines_its_flags_only_when_it_runs_each_with_help(name):
  module = importlib.import_module(name)
  assert name not in flags.FLAGS.flags_by_module_dict(), f"{name} defines flags at import"
  values = flags.FlagValues()
  module.define_flags(values)
  by_module = values.flags_by_module_dict()
  assert list(by_module) == [name]  # `--help` lists them all (cli's helpers claim none)
  assert all(flag.help for flag in by_module[name]), name
  assert callable(module.main)


def test_help_lists_the_flags_with_their_help():
  run = subprocess.run([sys.executable, "-m", "experiments.report.sweep_table", "--help"],
                       capture_output=True, text=True, check=False)
  assert "--reports: A column: label=report_dir" in run.stdout, run.stdout + run.stderr
  assert "--[no]quiet: Do not print the table." in run.stdout
