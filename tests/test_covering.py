"""tests/covering.py: the default run keeps every value of every axis; the rest is marked slow."""

import itertools

from tests.covering import covering


def _slow(param):
  return any(mark.name == "slow" for mark in param.marks)


def test_a_product_keeps_each_value_of_each_axis_once_and_marks_the_rest_slow():
  cases = list(itertools.product("abcd", (1, 2, 3)))
  params = covering(cases)
  assert [tuple(p.values) for p in params] == cases
  kept = [tuple(p.values) for p in params if not _slow(p)]
  assert kept == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("d", 1)]
  for axis in (0, 1):
    assert {case[axis] for case in kept} == {case[axis] for case in cases}


def test_axes_names_the_entries_to_cover_and_single_values_are_one_axis():
  cases = [("mr2", "lam"), ("mr2", "decay"), ("ce", "lam"), ("ce", "decay")]
  assert [_slow(p) for p in covering(cases, axes=[0])] == [False, True, False, True]
  assert [_slow(p) for p in covering([3, 3, 4])] == [False, True, False]
