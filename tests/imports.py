"""What a Python file imports, read from its syntax tree (module level and inside functions).

Used by tests/conftest.py to leave out, in the library-only CI job, the test files that need the
harness (`experiments`) or a package the plain `pip install .` does not bring.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def imported_modules(path: str) -> frozenset[str]:
  """The absolute module names imported anywhere in the file at `path` (relative imports skipped)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), filename=path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module)
      # `from tests import cases` imports the module tests.cases.
      names.update(f"{node.module}.{alias.name}" for alias in node.names)
  return frozenset(names)


def _tests_module_path(name: str) -> str | None:
  """The file of a `tests.*` helper module, or None if `name` is not one."""
  parts = name.split(".")
  if parts[0] != "tests" or len(parts) < 2:
    return None
  base = os.path.join(os.path.dirname(TESTS_DIR), *parts)
  for candidate in (base + ".py", os.path.join(base, "__init__.py")):
    if os.path.isfile(candidate):
      return candidate
  return None


@functools.lru_cache(maxsize=None)
def import_closure(path: str) -> frozenset[str]:
  """The modules `path` imports, followed through the `tests.*` helper modules it imports."""
  seen, todo, names = {os.path.abspath(path)}, [os.path.abspath(path)], set()
  while todo:
    for name in imported_modules(todo.pop()):
      names.add(name)
      helper = _tests_module_path(name)
      if helper is not None and helper not in seen:
        seen.add(helper)
        todo.append(helper)
  return frozenset(names)


def marked_harness(path: str) -> bool:
  """True when the file sets `pytestmark = pytest.mark.harness` at module level: it needs the
  checkout's harness without importing it (it runs or reads a file under experiments/)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), filename=path)
  for node in tree.body:
    if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark"
                                             for t in node.targets)
        and "mark.harness" in ast.unparse(node.value)):
      return True
  return False


def missing_top_levels(path: str) -> list[str]:
  """The top-level packages the file's import closure needs that cannot be imported here, sorted
  (`tests` itself excluded); the harness `experiments` counts as missing when it is not importable
  or when `library_only` mode is on, and for a file marked `harness` (`marked_harness`) in that
  mode."""
  missing = {"experiments"} if library_only() and marked_harness(path) else set()
  for name in import_closure(path):
    top = name.split(".")[0]
    if top == "tests" or top in missing:
      continue
    if (top == "experiments" and library_only()) or importlib.util.find_spec(top) is None:
      missing.add(top)
  return sorted(missing)


def library_only() -> bool:
  """True in the library-only test run (MR2_JAX_LIBRARY_ONLY=1): the harness is out of scope."""
  return os.environ.get("MR2_JAX_LIBRARY_ONLY", "") == "1"
