"""The harness's shape (issue 37): packages by role that import only downward, no import cycle, an
import inside a function only for an optional dependency (said at the import), no module over
450 lines, and code only (issue 48.6: results live in results/). Every module of experiments/ is
parsed (not imported); imports inside functions count."""

import ast
import pathlib
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = ROOT / "experiments"
# Bottom to top: a module may import its own package and the ones before it.
LAYERS = ("common", "data", "models", "methods", "configs", "train", "report", "probe",
          "studies", "benchmarks")
ENTRY_POINTS = ("main", "compare", "demo", "launch", "diagnose")  # `python -m experiments.<name>`
# Commands that belong to one package keep their `main` in their module (`python -m
# experiments.<package>.<module>`): these, and any benchmark. experiments/__init__.py names each.
PACKAGE_COMMANDS = ("data.sources", "report.run_tables", "report.sweep_table", "report.progress",
                    "report.setting_curves",
                    "studies.linear_probe", "studies.probe_comparison",
                    "studies.regenerate_reports")
# Dependencies a module may import inside a function, because a run can do without them (an
# accelerator image without grain, plots without a display, PyTorch only for references).
OPTIONAL = ("grain", "torch", "torchvision", "timm", "matplotlib", "tensorflow_datasets",
            "array_record", "safetensors", "tensorboardX", "tqdm")
# Harness modules that themselves need an optional dependency at import (torch).
OPTIONAL_MODULES = ("experiments.benchmarks.torch_resnet",)
MAX_LINES = 450
# The trainer reads top to bottom: no function of experiments/train/ longer than this (the loop is
# `plan`, `start`, `train`, `summarize` and the events after a step).
MAX_TRAIN_FUNCTION_LINES = 80
# Data tables may be longer (none yet).
LONG_TABLES = ()


def modules() -> dict[str, pathlib.Path]:
  out = {}
  for path in sorted(HARNESS.rglob("*.py")):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


MODULES = modules()


def layer(name: str) -> int:
  """The rank of a module's package (entry points above everything; the package root at 0)."""
  parts = name.split(".")
  if len(parts) == 1:
    return 0
  if len(parts) == 2 and parts[1] in ENTRY_POINTS:
    return len(LAYERS)
  return LAYERS.index(parts[1])


def imported_modules(name: str, node: ast.AST) -> list[str]:
  """The harness modules an import statement loads (a package's __init__ included)."""
  if isinstance(node, ast.Import):
    targets = [alias.name for alias in node.names]
  else:
    base = node.module or ""
    if node.level:
      package = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
      base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
    targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
               for alias in node.names]
  out = []
  for target in targets:
    if target.split(".")[0] != "experiments":
      continue
    while target not in MODULES and "." in target:
      target = target.rsplit(".", 1)[0]
    # `import experiments.a.b` loads experiments.a's __init__ too; a submodule's own package init
    # is loaded by Python anyway and holds only a docstring here.
    out.append(target)
  return out


def imports(name: str):
  """(line, imported harness module, inside a function?) for every import of module `name`."""
  tree = ast.parse(MODULES[name].read_text())
  nested = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      nested.update(id(n) for n in ast.walk(node) if n is not node)
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node, imported_modules(name, node), id(node) in nested


def test_the_packages_are_the_documented_layers():
  packages = {p.name for p in HARNESS.iterdir() if (p / "__init__.py").is_file()}
  assert packages == set(LAYERS)
  top = {p.stem for p in HARNESS.glob("*.py")} - {"__init__"}
  assert top == set(ENTRY_POINTS)


def runs_as_a_command(path: pathlib.Path) -> bool:
  """Whether the module has an `if __name__ == "__main__":` block."""
  return any(isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
             and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
             and any(isinstance(c, ast.Constant) and c.value == "__main__"
                     for c in node.test.comparators)
             for node in ast.parse(path.read_text()).body)


def test_entry_points_are_where_the_harness_says():
  """A `__main__` only in the top-level commands, the listed package commands and the benchmarks;
  each listed command has one, and experiments/__init__.py names it."""
  commands = {name.removeprefix("experiments.") for name, path in MODULES.items()
              if runs_as_a_command(path)}
  allowed = set(ENTRY_POINTS) | set(PACKAGE_COMMANDS)
  stray = sorted(c for c in commands - allowed if not c.startswith("benchmarks."))
  assert not stray, f"modules with a __main__ that experiments/__init__.py does not list: {stray}"
  assert not allowed - commands, f"listed commands without a __main__: {sorted(allowed - commands)}"
  said = (HARNESS / "__init__.py").read_text()
  unsaid = [c for c in PACKAGE_COMMANDS if f"`{c}`" not in said]
  assert not unsaid, f"experiments/__init__.py does not name the commands {unsaid}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_downward(name):
  upward = [f"line {node.lineno}: {target}" for node, targets, _ in imports(name)
            for target in targets
            if target != name and layer(target) > layer(name)]
  assert not upward, f"{name} imports a higher layer: {upward}"


def test_no_import_cycle():
  graph = {name: {t for _, targets, _ in imports(name) for t in targets if t != name}
           for name in MODULES}
  # A package's __init__ is not an edge of its own submodules (Python loads it first anyway).
  state, stack, cycles = {}, [], []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == "open":
        cycles.append(stack[stack.index(nxt):] + [nxt])
      elif nxt not in state:
        visit(nxt)
    stack.pop()
    state[node] = "done"

  for name in sorted(graph):
    if name not in state:
      visit(name)
  assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_inside_functions_are_optional_dependencies_said_at_the_import(name):
  lines = MODULES[name].read_text().splitlines()
  bad = []
  for node, _, nested in imports(name):
    if not nested:
      continue
    roots = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
             else [node.module or ""])
    said = "optional" in lines[node.lineno - 1] or "optional" in lines[node.lineno - 2]
    if isinstance(node, ast.ImportFrom) and node.module:
      roots = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in OPTIONAL_MODULES
               else node.module for alias in node.names]
    if not all(root.split(".")[0] in OPTIONAL or root in OPTIONAL_MODULES for root in roots) \
        or not said:
      bad.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()}")
  assert not bad, f"{name}: imports inside functions that are not optional dependencies: {bad}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_450_lines(name):
  path = MODULES[name]
  if path.relative_to(ROOT).as_posix() in LONG_TABLES:
    return
  count = len(path.read_text().splitlines())
  assert count <= MAX_LINES, f"{path.relative_to(ROOT)}: {count} lines"


def test_no_function_of_the_trainer_over_80_lines():
  long = []
  for path in sorted((HARNESS / "train").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_TRAIN_FUNCTION_LINES:
          long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
  assert not long, long


def test_the_harness_takes_the_per_class_metrics_from_one_place():
  """Both libraries re-export the per-class metrics of `mr2_reweight_core.metrics`; the harness
  reads them there, never as `mr2_jax.<metric>` beside `reweight_jax.<metric>`."""
  from mr2_reweight_core import metrics
  found = []
  for name, path in MODULES.items():
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Attribute) and node.attr in metrics.__all__
          and isinstance(node.value, ast.Name) and node.value.id in ("mr2_jax", "reweight_jax")):
        found.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
  assert not found, found


def test_the_harness_holds_code_only():
  """A run's output (JSON, Markdown reports, logs) goes to results/, not beside the code; a
  README that says how to run the code beside it is code's documentation."""
  others = sorted(path.relative_to(ROOT).as_posix() for path in HARNESS.rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts
                  and path.suffix != ".py" and path.name != "README.md")
  assert not others, others


def test_the_library_tests_import_no_harness():
  """The library-only CI job runs tests/lib alone (.ci/run): none of them, nor a module of tests/
  they import, may need `experiments` (it is not installed there)."""
  files = sorted((ROOT / "tests" / "lib").rglob("*.py"))
  seen, bad = set(), []
  while files:
    path = files.pop()
    if path in seen:
      continue
    seen.add(path)
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
      else:
        continue
      for name in names:
        if name.split(".")[0] == "experiments":
          bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
        elif name.split(".")[0] == "tests":
          module = ROOT.joinpath(*name.split("."))
          files += [f for f in (module.with_suffix(".py"), module / "__init__.py") if f.is_file()]
  assert not bad, bad


def test_the_checks_see_a_cycle_an_upward_import_and_a_function_import(tmp_path, monkeypatch):
  """The checks above fail on what they are for (a fake tree of three modules)."""
  fake = tmp_path / "experiments"
  for package in ("common", "data"):
    (fake / package).mkdir(parents=True)
    (fake / package / "__init__.py").write_text("")
  (fake / "__init__.py").write_text("")
  (fake / "common" / "a.py").write_text("from experiments.data import b\n")
  (fake / "data" / "b.py").write_text("def f():\n  from experiments.common import a\n")
  monkeypatch.setattr(sys.modules[__name__], "HARNESS", fake)
  monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
  fake_modules = modules()
  monkeypatch.setattr(sys.modules[__name__], "MODULES", fake_modules)
  with pytest.raises(AssertionError, match="higher layer"):
    test_imports_only_downward("experiments.common.a")
  with pytest.raises(AssertionError, match="import cycles"):
    test_no_import_cycle()
  with pytest.raises(AssertionError, match="inside functions"):
    test_imports_inside_functions_are_optional_dependencies_said_at_the_import(
        "experiments.data.b")
