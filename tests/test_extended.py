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
