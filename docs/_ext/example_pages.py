"""One page per script in examples/: each training script as a notebook that the build executes, its
code, what it printed and its figures interleaved; a module the scripts import, as its code.

A training script (a file of examples/ with an `if __name__ == "__main__":` block) is split into
cells at its `# %%` lines (the percent format that Jupytext, VS Code and Spyder read as cells;
`# %% [markdown]` starts a cell of prose written as comments) and written to
docs/_generated/examples/<name>.md as a MyST-NB notebook. Its `__main__` block, which prints the
tables, is replaced by cells that run the same `main()` and show each table followed by its figure
(`toy_comparison.plot_table`). myst-nb runs each notebook in a kernel while the page is read, with
`JAX_PLATFORMS=cpu` and the checkout and examples/ first on the path, as `python examples/<name>.py`
runs from the repository root, and with an IPython profile of the build's own (beside the cache);
a cell that raises is a warning (an error under `-W`).

Outputs are cached by myst-nb (`nb_execution_mode = "cache"`, in `<outdir>/../.jupyter_cache`),
keyed on the notebook's code and its cells' metadata: the first cell's metadata holds a digest of
the examples' and the libraries' sources and of the installed jax, optax, flax and matplotlib, so a
rebuild runs a notebook again when one of those changed and reuses its outputs otherwise.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
import pathlib

LIBRARIES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
PACKAGES = ("jax", "jaxlib", "optax", "flax", "matplotlib")
CELL_MARK = "# %%"
MARKDOWN_MARK = "# %% [markdown]"

# The cells that replace a training script's `__main__` block: the same `main()`, then each
# setting's table and figure. Every training script defines `main` and imports `toy_comparison`
# as `toy`.
RESULTS = """\
## What it prints, and the figures

`python examples/{name}.py` runs `main()` and prints the two tables. Here `main()` ran when this
site was built (`JAX_PLATFORMS=cpu`, seed 0; another CPU may differ in the last digit), and each
table is followed by its figure, drawn by `toy_comparison.plot_table`.

```{{code-cell}} ipython3
result = main()  # every run of both settings, seed 0
```

### The balanced set: MR2's setting

Easy, Medium and Hard are the tertiles of CE's per-class accuracy; MR2 claims that the Hard
classes gain and the Easy ones do not pay for it.

```{{code-cell}} ipython3
---
mystnb:
  image:
    alt: "Bar charts on the balanced set: each class's held-out accuracy per method, and each
      method's difference from CE on overall, worst and the three groups"
---
table = result["tables"]["balanced"]
print(table.text)
toy.plot_table(table)
```

### The long-tailed set: the reweighting's setting

Many, Medium and Few are the tertiles of the training counts; the reweighting claims that the Few
classes gain.

```{{code-cell}} ipython3
---
mystnb:
  image:
    alt: "Bar charts on the long-tailed set: each class's held-out accuracy per method, and each
      method's difference from CE on overall, worst and the three groups"
---
table = result["tables"]["long_tailed"]
print(table.text)
toy.plot_table(table)
```
"""


def _root(app) -> pathlib.Path:
  return pathlib.Path(app.confdir).parent


def _out_dir(app) -> pathlib.Path:
  return pathlib.Path(app.confdir) / "_generated" / "examples"


def _scripts(root: pathlib.Path) -> list[pathlib.Path]:
  return sorted((root / "examples").glob("*.py"))


def _main_block(path: pathlib.Path) -> ast.If | None:
  """The script's `if __name__ == "__main__":` block, or None for a module."""
  for node in ast.parse(path.read_text()).body:
    if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
      return node
  return None


def _runs(path: pathlib.Path) -> bool:
  """Whether the file is a script (it has an `if __name__ == "__main__":` block)."""
  return _main_block(path) is not None


def _key(root: pathlib.Path) -> str:
  """A digest of the examples' and the libraries' sources and of the installed packages they use."""
  digest = hashlib.sha256()
  sources = _scripts(root) + sorted(p for lib in LIBRARIES for p in (root / lib).rglob("*.py"))
  for path in sources:
    digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
  for package in PACKAGES:
    try:
      digest.update(f"{package}=={importlib.metadata.version(package)}".encode())
    except importlib.metadata.PackageNotFoundError:
      digest.update(f"{package} missing".encode())
  return digest.hexdigest()


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


def cells(path: pathlib.Path) -> list[tuple[str, str]]:
  """[(kind, text)] of a script after its docstring, kind 'code' or 'markdown': split at its `# %%`
  lines, the comment marks taken off a markdown cell's lines, the `__main__` block left out."""
  lines = path.read_text().splitlines()
  main = _main_block(path)
  # The main block and the cell mark right above it.
  end = main.lineno - 1 if main else len(lines)
  while end > 0 and (not lines[end - 1].strip() or lines[end - 1].strip() == CELL_MARK):
    end -= 1
  found, kind, current = [], "code", []

  def close():
    text = "\n".join(current).strip("\n")
    if text.strip():
      found.append((kind, text))

  for line in lines[_code_start(path) - 1:end]:
    if line.startswith(CELL_MARK):
      close()
      kind, current = ("markdown" if line.strip() == MARKDOWN_MARK else "code"), []
    elif kind == "markdown":
      current.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    else:
      current.append(line)
  close()
  return found


def notebook(path: pathlib.Path, root: pathlib.Path, key: str) -> str:
  """The MyST-NB notebook of a training script."""
  title, description = _docstring(path)
  relative = path.relative_to(root).as_posix()
  parts = ["---", "file_format: mystnb", "kernelspec:", "  name: python3",
           "  display_name: Python 3",
           # No contents column on the right: the article gets its width, for the output's tables.
           "html_theme.sidebar_secondary.remove: true", "---", "",
           f"# {path.name}", "", f"*{title}*", "", description, "",
           f"The code below is `{relative}` after its docstring (the text above), cell by cell.",
           "",
           # Figures as SVG (sharp at any zoom). The key is the cache's: a new one runs the
           # notebook again.
           "```{code-cell} ipython3", ":tags: [remove-cell]", f":sources_key: {key}", "",
           "%matplotlib inline", "%config InlineBackend.figure_formats = ['svg']", "```", ""]
  for kind, text in cells(path):
    parts += [text, ""] if kind == "markdown" else ["```{code-cell} ipython3", text, "```", ""]
  parts.append(RESULTS.format(name=path.stem))
  return "\n".join(parts)


def module_page(path: pathlib.Path, root: pathlib.Path) -> str:
  """The page of a module the scripts import: its description and its code."""
  title, description = _docstring(path)
  relative = path.relative_to(root).as_posix()
  return "\n".join([
      "---", "html_theme.sidebar_secondary.remove: true", "---", "",
      f"# {path.name}", "", f"*{title}*", "", description, "",
      "## The code", "", f"`{relative}` after its docstring (the text above):", "",
      f"```{{literalinclude}} ../../../{relative}", ":language: python",
      f":lines: {_code_start(path)}-", "```", ""])


def _write(path: pathlib.Path, text: str) -> None:
  """Writes only a change: an unchanged page is not read (nor its notebook run) again."""
  if not path.exists() or path.read_text() != text:
    path.write_text(text)


def write_pages(app, config):
  """Writes the pages and their index, and sets the path the notebooks' kernels import from."""
  del config
  root, out = _root(app), _out_dir(app)
  out.mkdir(parents=True, exist_ok=True)
  # The kernels start from this process's environment: the checkout's libraries and examples/
  # first, as when a script runs from the repository root (`toy_comparison` is in examples/).
  os.environ["PYTHONPATH"] = os.pathsep.join(
      filter(None, [str(root), str(root / "examples"), os.environ.get("PYTHONPATH")]))
  # An IPython profile of the build's own, beside myst-nb's cache: no startup file or setting of
  # the user's reaches the notebooks, and the kernel logs errors only (not its notice that it talks
  # to the build over local TCP).
  profile = pathlib.Path(app.outdir).parent / ".ipython" / "profile_default"
  profile.mkdir(parents=True, exist_ok=True)
  _write(profile / "ipython_kernel_config.py", 'c.IPKernelApp.log_level = "ERROR"\n')
  os.environ["IPYTHONDIR"] = str(profile.parent)
  key = _key(root)
  pages = []
  for script in _scripts(root):
    page = notebook(script, root, key) if _runs(script) else module_page(script, root)
    _write(out / f"{script.stem}.md", page)
    pages.append(script.stem)
  scripts = [p for p in pages if _runs(root / "examples" / f"{p}.py")]
  modules = [p for p in pages if p not in scripts]
  index = ["# Examples", "",
           "Complete training scripts, each run when this site was built: the code, what it "
           "printed and per-class figures, cell by cell. They train a small MLP on two synthetic "
           "sets in seconds on a CPU and compare MR2 and the inverse reweighting with "
           "cross-entropy trained on the same batches ({doc}`../../guides/getting_started` says "
           "what to read in the tables).", "",
           "```{toctree}", ":maxdepth: 1", "", *scripts, *modules, "```", ""]
  _write(out / "index.md", "\n".join(index))
  for stale in out.iterdir():
    if stale.is_file() and stale.name not in {f"{page}.md" for page in [*pages, "index"]}:
      stale.unlink()  # a removed script's page, the output files of an earlier version


def setup(app):
  app.connect("config-inited", write_pages)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
