"""Tests for tests/extended.py: every entry names a test that exists, so a renamed test cannot leave a
stale entry behind while the test itself moves back into (or silently out of) the default run."""

import pathlib
import re

import pytest

from tests import conftest
from tests import extended

TESTS = pathlib.Path(__file__).parent
# chex.variants and absl's parameterized add these to a test method's name.
_VARIANT = re.compile(r"(__with_jit|__without_jit|__with_pmap|__with_device|__without_device)$")


def _defined(source: str) -> set[str]:
  """The names of the functions and classes a test file defines."""
  return {a or b for a, b in re.findall(r"^[ \t]*def\s+(\w+)|^[ \t]*class\s+(\w+)", source, re.M)}


@pytest.mark.parametrize("entry", extended.EXTENDED)
def test_each_entry_names_a_test_file_and_a_test_in_it(entry):
  path, _, rest = entry.partition("::")
  assert path.startswith(("lib/", "harness/", "tools/", "docs/")) and path.endswith(".py"), entry
  file = TESTS / path
  assert file.is_file(), f"{entry}: no file tests/{path}"
  names = _defined(file.read_text())
  *classes, function = rest.split("[", 1)[0].split("::")
  for cls in classes:
    assert cls in names, f"{entry}: no class {cls} in tests/{path}"
  base = _VARIANT.sub("", function)
  # absl's named parameters append "_<name>" (or the whole name) to the method's name.
  assert any(base == name or base.startswith(name + "_") for name in names
             if name.startswith("test")), f"{entry}: no test {function} in tests/{path}"


def test_no_entry_is_listed_twice_or_also_moved_to_the_slow_run():
  assert len(set(extended.EXTENDED)) == len(extended.EXTENDED)
  for entry in extended.EXTENDED:
    assert not any(key in entry or entry in key for key in conftest.MOVED_TO_SLOW), entry


LOG = """\
============================= slowest durations ==============================
26.19s setup    tests/harness/data/test_input_pipeline.py::test_refused
3.10s call     tests/harness/data/test_input_pipeline.py::test_refused
2.50s call     tests/harness/models/test_zoo.py::test_output_shapes[small_cnn-shape1-128-cosine]
0.60s setup    tests/harness/models/test_zoo.py::test_output_shapes[small_cnn-shape1-128-cosine]
9.00s call     tests/lib/mr2_jax/test_objective.py::Mr2LossTest::test_matches_reference_random__with_jit
4.00s call     tests/lib/mr2_jax/test_objective.py::Mr2LossTest::test_matches_reference_absent__with_pmap
3.00s call     tests/tools/test_standard_size.py::test_park
62.00s setup    tests/harness/test_harness_runs.py::test_run_trains_as_recorded_within_the_cross_cpu_tolerance[ce]
2.99s call     tests/harness/train/test_loop.py::test_short
(3693 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_durations_add_each_tests_setup_call_and_teardown():
  found = extended.durations(LOG)
  assert found["harness/data/test_input_pipeline.py::test_refused"] == pytest.approx(29.29)
  assert found["harness/models/test_zoo.py::test_output_shapes[small_cnn-shape1-128-cosine]"] == (
      pytest.approx(3.1))
  assert len(found) == 7


def test_candidates_follow_the_rule_longest_first():
  # harness and tools tests and library twins of 3 s or more; not a jitted library test, not a
  # kept one, not one under 3 s.
  assert extended.candidates(LOG) == [
      "harness/data/test_input_pipeline.py::test_refused",
      "lib/mr2_jax/test_objective.py::Mr2LossTest::test_matches_reference_absent__with_pmap",
      "harness/models/test_zoo.py::test_output_shapes[small_cnn-shape1-128-cosine]",
      "tools/test_standard_size.py::test_park",
  ]
  assert extended.candidates(LOG, seconds=5.0) == [
      "harness/data/test_input_pipeline.py::test_refused"]


def test_a_listed_test_is_no_candidate_and_no_kept_test_is_listed():
  listed = extended.EXTENDED[0]
  assert extended.candidates(f"40.00s call     tests/{listed}\n") == []
  assert not any(entry.startswith(extended.KEPT) for entry in extended.EXTENDED)


def test_twins_are_the_eager_and_pmap_variants_of_a_collected_jitted_library_test():
  lib = "tests/lib/mr2_jax/test_objective.py::Mr2LossTest::test_matches_reference_"
  ids = [lib + "random__with_jit", lib + "random__without_jit", lib + "random__with_pmap",
         lib + "absent__with_pmap",                       # no jitted twin collected: stays
         lib + "k[4]__with_jit", lib + "k[4]__without_jit",  # not the same name before "["
         "tests/lib/test_a.py::test_b__with_jit[x]", "tests/lib/test_a.py::test_b__without_jit[x]",
         "tests/lib/test_a.py::test_b__without_jit[y]",   # another parameter: stays
         "tests/harness/test_c.py::test_d__with_jit", "tests/harness/test_c.py::test_d__with_pmap"]
  assert extended.twins(ids) == {lib + "random__without_jit", lib + "random__with_pmap",
                                 "tests/lib/test_a.py::test_b__without_jit[x]"}
