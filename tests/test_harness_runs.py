"""Issue 37's behaviour check: digits runs train bit for bit as they did before the harness was
reorganised. Four (CE, paired GLMC with the inverse reweighting, JTT from the CE run's error set,
mixup) were recorded by `python -m tests.harness_runs` at commit 7eba1b5, before the move into
sub-packages; five more (SupCon, LfF, FairDRO, ETF-DR + reweighting with mixup, MR2 on three views)
at 78ada7d, before the methods' trainer hooks became recipes. Regenerate a record only for an
intended change of behaviour, and say so in the commit."""

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
