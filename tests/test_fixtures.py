"""Every file in tests/fixtures/ is read by a test: each entry is opened through a
`"fixtures" / "<name>"` path in a module of tests/, the recorded configs are one per shipped
config, and the harness-run records one per run of `tests.harness_runs.NAMES`. A log or record
that no test reads (a slow run's output, a config since removed) belongs in a workdir, not here."""

import pathlib
import re

from tests import harness_runs

TESTS = pathlib.Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
CONFIGS = TESTS.parent / "experiments" / "configs"


def test_every_fixture_is_opened_by_a_test_module():
  sources = "\n".join(path.read_text() for path in TESTS.rglob("*.py")
                      if FIXTURES not in path.parents and path != pathlib.Path(__file__))
  unread = [entry.name for entry in sorted(FIXTURES.iterdir())
            if not re.search(rf"""["']fixtures["']\s*/\s*["']{re.escape(entry.name)}["']""",
                             sources)]
  assert not unread, f"tests/fixtures/ entries no test opens: {unread}"


def test_the_recorded_configs_are_the_shipped_configs():
  shipped = {p.stem for p in CONFIGS.glob("*.py") if "\ndef get_config(" in p.read_text()}
  assert {p.stem for p in (FIXTURES / "configs").iterdir()} == shipped


def test_the_harness_run_records_are_the_recorded_runs():
  assert {p.stem for p in (FIXTURES / "harness_runs").iterdir()} == set(harness_runs.NAMES)
