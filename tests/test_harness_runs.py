"""Issue 37's behaviour check: four digits runs (CE, paired GLMC with the inverse reweighting, JTT
from the CE run's error set, mixup) train bit for bit as they did before the harness moved into
sub-packages. The records in tests/fixtures/harness_move/ were written by `python -m
tests.harness_runs` at commit 18a5f5b, before the move; regenerate them only for an intended change of
behaviour, and say so in the commit."""

import json

import pytest

from tests import harness_runs

pytestmark = pytest.mark.harness


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  return harness_runs.record_all(tmp_path_factory.mktemp("harness_runs"))


@pytest.mark.parametrize("name", harness_runs.NAMES)
def test_run_trains_bit_for_bit_as_before_the_move(records, name):
  expected = json.loads((harness_runs.FIXTURES / f"{name}.json").read_text())
  assert records[name] == expected
