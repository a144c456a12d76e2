"""Tests for tests/run_slow_properties.py (the slow twins' runner) and strategies.record_progress, on
log files written here: what counts as finished, the summary's counts, the progress of a running
test."""

import os

import pytest

from tests import run_slow_properties as runner
from tests import strategies as S


TEST = "tests/harness/methods/test_properties_registry.py::test_registry_entry_slow[mr2]"
OTHER = "tests/lib/reweight_jax/baselines/test_glmc.py::test_property_matches_reference_slow"

FINISHED_LOG = """commit=abc1234 started=2026-12-02 04:26:23
.
  - during generate phase (12.5 seconds):
    - 990 passing, 0 failing, and 3 invalid test cases
  - during shrink phase (1.0 seconds):
    - 10 passing, 0 failing, and 0 invalid test cases
1 passed in 13.52s

wall_seconds=14 returncode=0
"""


def test_log_names_and_what_counts_as_finished(tmp_path):
  out = str(tmp_path)
  assert runner.log_path(out, TEST) == os.path.join(out, "test_registry_entry_slow_mr2_.log")
  assert runner.display_name(OTHER) == "test_glmc.test_property_matches_reference_slow"
  path = runner.log_path(out, TEST)
  assert not runner.finished(path)
  with open(path, "w") as f:
    f.write("commit=abc1234 started=2026-12-02 04:26:23\n")  # killed before pytest reported
  assert not runner.finished(path)
  with open(path, "w") as f:
    f.write(FINISHED_LOG)
  assert runner.finished(path)


def test_summary_sums_the_phases_and_names_the_commit(tmp_path):
  out = str(tmp_path)
  with open(runner.log_path(out, TEST), "w") as f:
    f.write(FINISHED_LOG)
  with open(runner.log_path(out, OTHER), "w") as f:
    f.write(FINISHED_LOG.replace("1 passed", "1 failed").replace("10 passing, 0 failing",
                                                                    "9 passing, 1 failing"))
  rows = runner.summarize(out, [TEST, OTHER, TEST.replace("mr2", "ce")]).splitlines()
  assert rows[2] == "| `test_registry_entry_slow[mr2]` | abc1234 | 1000 | 0 | 3 | 14 | passed |"
  assert rows[3].endswith("| abc1234 | 999 | 1 | 3 | 14 | FAILED |")
  assert rows[4].endswith("| – | – | – | – | – | not run |")


def test_progress_of_a_running_test(tmp_path, monkeypatch):
  out = str(tmp_path)
  path = runner.log_path(out, TEST)
  assert runner.progress(out, [TEST]) == "nothing running"
  with open(path + ".partial", "w") as f:
    f.write("commit=abc1234 started=2026-12-02 04:26:23\n")
  assert runner.progress(out, [TEST]) == "test_registry_entry_slow[mr2]: fewer than 25 examples"
  monkeypatch.setenv("PROPERTY_PROGRESS", path + ".progress")
  monkeypatch.setattr(S, "_EXAMPLES_RUN", [0, 0.0])
  for _ in range(49):
    S.record_progress()
  assert open(path + ".progress").read().startswith("25 examples in ")
  S.record_progress()
  assert runner.progress(out, [TEST]).startswith("test_registry_entry_slow[mr2]: 50 examples in ")


def test_collect_takes_the_twins_not_the_tests_moved_to_the_slow_run():
  # conftest moves test_registry_entry_sharded[inv_freq] (default profile) to `-m slow`; its twin is
  # test_registry_entry_sharded_slow[inv_freq].
  ids = runner.collect("registry_entry_sharded and inv_freq")
  assert ids == ["tests/harness/methods/test_properties_registry.py"
                 "::test_registry_entry_sharded_slow[inv_freq]"]
