"""One page per script in examples/: its description, its code, and what it printed when the site
was built.

Each training script (a file of examples/ with an `if __name__ == "__main__":` block) runs once per
build in its own process, `python examples/<name>.py` from the repository root with
`JAX_PLATFORMS=cpu` and the checkout first on the path, so the page shows the output of the code
beside it. The scripts start together when the configuration is read and are collected after the
API pages are generated, so they run while autosummary imports the libraries; a script that fails
or prints nothing is a warning (an error under `-W`). The output is kept in docs/_generated/examples
with a key of the examples' and the libraries' sources and of the installed jax, optax and flax; a
rebuild with the same key reuses it. A module the scripts import (no `__main__` block) gets a page
with its code only.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
import pathlib
import subprocess
import sys


def _logger():
  """Sphinx's logger, imported when the build runs: the test of the example list
  (tests/docs/test_docs_site.py) reads this module where Sphinx is not installed."""
  from sphinx.util import logging  # pylint: disable=g-import-not-at-top
  return logging.getLogger(__name__)


LIBRARIES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
TIMEOUT_S = 600
_running: dict[str, subprocess.Popen] = {}


def _root(app) -> pathlib.Path:
  return pathlib.Path(app.confdir).parent


def _out_dir(app) -> pathlib.Path:
  return pathlib.Path(app.confdir) / "_generated" / "examples"


def _scripts(root: pathlib.Path) -> list[pathlib.Path]:
  return sorted((root / "examples").glob("*.py"))


def _runs(path: pathlib.Path) -> bool:
  """Whether the file is a script (it has an `if __name__ == "__main__":` block)."""
  for node in ast.parse(path.read_text()).body:
    if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
      return True
  return False


def _key(root: pathlib.Path) -> str:
  digest = hashlib.sha256()
  sources = _scripts(root) + sorted(p for lib in LIBRARIES for p in (root / lib).rglob("*.py"))
  for path in sources:
    digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
  for package in ("jax", "jaxlib", "optax", "flax"):
    try:
      digest.update(f"{package}=={importlib.metadata.version(package)}".encode())
    except importlib.metadata.PackageNotFoundError:
      digest.update(f"{package} missing".encode())
  return digest.hexdigest()


def start(app, config):
  """Starts every script whose kept output is missing or stale."""
  del config
  root, out = _root(app), _out_dir(app)
  key = _key(root)
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
  for script in filter(_runs, _scripts(root)):
    kept = out / f"{script.stem}.out"
    key_file = out / f"{script.stem}.key"
    if kept.exists() and key_file.exists() and key_file.read_text() == key:
      continue
    _running[script.stem] = subprocess.Popen(
        [sys.executable, str(script.relative_to(root))], cwd=root, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(app, name: str, process: subprocess.Popen, key: str) -> None:
  out = _out_dir(app)
  try:
    stdout, stderr = process.communicate(timeout=TIMEOUT_S)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate()
    _logger().warning(f"examples/{name}.py ran past {TIMEOUT_S} s", type="example_pages")
    return
  if process.returncode != 0 or not stdout.strip():
    _logger().warning(f"examples/{name}.py exited with {process.returncode} and printed "
                   f"{len(stdout)} characters:\n{stderr[-3000:]}", type="example_pages")
    return
  (out / f"{name}.out").write_text(stdout)
  (out / f"{name}.key").write_text(key)


def _docstring(path: pathlib.Path) -> tuple[str, str]:
  """(first line, the rest) of a module's docstring."""
  doc = ast.get_docstring(ast.parse(path.read_text())) or path.stem
  first, _, rest = doc.partition("\n")
  return first.strip(), rest.strip()


def _code_start(path: pathlib.Path) -> int:
  """The first line after the module's docstring and the blank lines below it."""
  lines = path.read_text().splitlines()
  body = ast.parse(path.read_text()).body
  start = body[0].end_lineno if body and isinstance(body[0], ast.Expr) else 0
  while start < len(lines) and not lines[start].strip():
    start += 1
  return start + 1


def _write(path: pathlib.Path, text: str) -> None:
  if not path.exists() or path.read_text() != text:
    path.write_text(text)


def write_pages(app):
  """Collects the scripts' output and writes the pages and their index."""
  root, out = _root(app), _out_dir(app)
  out.mkdir(parents=True, exist_ok=True)
  key = _key(root)
  started = len(_running)
  while _running:
    name, process = _running.popitem()
    _finish(app, name, process, key)
  if started:
    _logger().info(f"example pages: ran {started} example scripts")
  pages = []
  for script in _scripts(root):
    title, description = _docstring(script)
    relative = script.relative_to(root).as_posix()
    # No contents column on the right: the article gets its width, for the output's tables.
    parts = ["---", "html_theme.sidebar_secondary.remove: true", "---", "",
             f"# {script.name}", "", f"*{title}*", "", description, ""]
    parts += ["## The code", "", f"`{relative}` after its docstring (the text above):", "",
              f"```{{literalinclude}} ../../../{relative}", ":language: python",
              f":lines: {_code_start(script)}-", "```", ""]
    kept = out / f"{script.stem}.out"
    if _runs(script) and kept.exists():
      parts += ["## What it printed", "",
                "Captured when this site was built (`JAX_PLATFORMS=cpu`, seed 0); another CPU may "
                "differ in the last digit.", "", "```{code-block} text", ":class: example-output",
                "", kept.read_text().rstrip(), "```", ""]
    _write(out / f"{script.stem}.md", "\n".join(parts))
    pages.append(script.stem)
  scripts = [p for p in pages if _runs(root / "examples" / f"{p}.py")]
  modules = [p for p in pages if p not in scripts]
  index = ["# Examples", "",
           "Complete training scripts, each run when this site was built: the code, then what it "
           "printed. They train a small MLP on two synthetic sets in seconds on a CPU and compare "
           "MR2 and the inverse reweighting with cross-entropy trained on the same batches "
           "({doc}`../../guides/getting_started` says what to read in the tables).", "",
           "```{toctree}", ":maxdepth: 1", "", *scripts, *modules, "```", ""]
  _write(out / "index.md", "\n".join(index))
  for stale in out.glob("*.md"):
    if stale.stem not in pages and stale.stem != "index":
      stale.unlink()


def setup(app):
  app.connect("config-inited", start)
  # After autosummary (priority 500) has imported the libraries and written the API pages.
  app.connect("builder-inited", write_pages, priority=900)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
