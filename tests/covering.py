"""A parametrization's covering subset for the default test run, the full set for the slow run.

`covering(cases)` keeps, in order, every case that brings a value not seen yet on one of its axes
(each entry of a tuple case is an axis): every value of every axis then runs in the default test
command at least once, and a product of axes of sizes n₁, n₂, … keeps about n₁ + n₂ + … cases of
n₁·n₂·…. The other cases are marked slow (`python -m pytest -m slow` runs them). Test ids stay those
of the plain parametrization.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pytest


def covering(cases: Iterable[Any], axes: Sequence[int] | None = None) -> list[Any]:
  """`cases` as `pytest.param`s, those that add no new value on any axis (the tuple entries at
  `axes`; every entry when None) marked `slow`."""
  seen: set[tuple[int, Any]] = set()
  params = []
  for case in cases:
    values = case if isinstance(case, tuple) else (case,)
    keys = {(axis, repr(values[axis])) for axis in (range(len(values)) if axes is None else axes)}
    new = not keys <= seen
    seen |= keys
    params.append(pytest.param(*values) if new else pytest.param(*values, marks=pytest.mark.slow))
  return params
