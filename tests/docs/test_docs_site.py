"""The documentation site's own extensions (docs/_ext), without building the site: docstrings keep
their written maths, and the example pages are notebooks made from the scripts, cell for cell."""

import importlib.util
import pathlib
import types

import pytest

# Reads docs/ and examples/ of the checkout (not in the library-only job's copy of tests/).

DOCS_EXT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_ext"


def _load(name: str):
  path = DOCS_EXT / f"{name}.py"
  if not path.exists():
    pytest.skip("a copy of tests/ without docs/")
  spec = importlib.util.spec_from_file_location(f"docs_ext_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_docstring_maths_is_passed_on_as_written():
  literal_blocks = _load("docstring_blocks").literal_blocks
  doc = ["The norm :math:`|x|_2` of a vector, |x| in words.",
         "",
         "    |x| = sqrt(sum_i x_i^2)",
         "",
         ".. math::",
         "",
         "   \\gamma_k \\propto (A_k + V_k)^{1/3}, \\quad |x|",
         "",
         "Returns:",
         "  Its norm:",
         "",
         "  .. math::",
         "     |x| \\ge 0",
         ""]
  out = literal_blocks(doc)
  # The role and both `.. math::` bodies are untouched; a bar in prose is escaped.
  assert out[0] == "The norm :math:`|x|_2` of a vector, \\|x\\| in words."
  assert "   \\gamma_k \\propto (A_k + V_k)^{1/3}, \\quad |x|" in out
  assert "     |x| \\ge 0" in out
  # The indented plain-text equation becomes a literal block.
  literal = out.index("    |x| = sqrt(sum_i x_i^2)")
  assert out[literal - 2] == "::" or out[literal - 2].endswith("::")


def test_every_training_example_gets_an_executed_page():
  example_pages = _load("example_pages")
  root = DOCS_EXT.parents[1]
  scripts = [p for p in example_pages._scripts(root) if example_pages._runs(p)]
  assert [p.stem for p in scripts] == ["linen_train", "nnx_train", "optax_train"]
  # The page's code starts after the module docstring.
  optax_train = root / "examples" / "optax_train.py"
  first = optax_train.read_text().splitlines()[example_pages._code_start(optax_train) - 1]
  assert first.startswith("# %%")
  for script in scripts:
    cells = example_pages.cells(script)
    kinds = [kind for kind, _ in cells]
    assert kinds[0] == "code" and "markdown" in kinds
    # The cells are the script after its docstring, up to the mark of its `__main__` block (which
    # the results' cells replace): put back together, they leave nothing out.
    rebuilt = []
    for kind, text in cells:
      rebuilt.append("# %% [markdown]" if kind == "markdown" else "# %%")
      rebuilt += [(f"# {line}" if line else "#") if kind == "markdown" else line
                  for line in text.splitlines()]
    source = script.read_text()
    lines = source[:source.index('\nif __name__ == "__main__":')].splitlines()
    lines = lines[example_pages._code_start(script) - 1:]
    assert [line for line in rebuilt + ["# %%"] if line.strip()] == [
        line for line in lines if line.strip()]
    code = "\n".join(text for kind, text in cells if kind == "code")
    assert "__main__" not in code
    page = example_pages.notebook(script, root, "KEY")
    assert page.startswith("---\nfile_format: mystnb\n")
    assert ":sources_key: KEY" in page  # the cache's key, in the first cell's metadata
    assert page.count("```{code-cell}") == kinds.count("code") + 4
    assert page.count('toy.plot_table(table)') == 2 and "result = main()" in page


def test_the_notebooks_key_follows_the_sources(tmp_path):
  """A change to an example or to a library's source changes the key, so the cached outputs are
  not reused."""
  example_pages = _load("example_pages")
  for folder in ("examples", "mr2_jax", "reweight_jax", "mr2_reweight_core"):
    (tmp_path / folder).mkdir()
  (tmp_path / "examples" / "a.py").write_text("x = 1\n")
  (tmp_path / "mr2_jax" / "m.py").write_text("y = 1\n")
  key = example_pages._key(tmp_path)
  assert example_pages._key(tmp_path) == key
  (tmp_path / "mr2_jax" / "m.py").write_text("y = 2\n")
  assert example_pages._key(tmp_path) != key
  key = example_pages._key(tmp_path)
  (tmp_path / "examples" / "a.py").write_text("x = 2\n")
  assert example_pages._key(tmp_path) != key


def test_the_example_pages_are_written_and_stale_files_removed(tmp_path, monkeypatch):
  """A script becomes a notebook page, a module a page of its code; the index lists the scripts
  first; a removed script's page and the output files of an earlier version are deleted."""
  example_pages = _load("example_pages")
  monkeypatch.setenv("PYTHONPATH", "")
  monkeypatch.setenv("IPYTHONDIR", "")  # the build sets both for its kernels
  (tmp_path / "docs").mkdir()
  (tmp_path / "examples").mkdir()
  (tmp_path / "examples" / "run_me.py").write_text(
      '"""Runs."""\n\n# %%\nimport helper\n\n\n# %%\nif __name__ == "__main__":\n  print(1)\n')
  (tmp_path / "examples" / "helper.py").write_text('"""Helps."""\n\nX = 1\n')
  out = tmp_path / "docs" / "_generated" / "examples"
  out.mkdir(parents=True)
  for stale in ("run_me.out", "run_me.key", "removed.md"):
    (out / stale).write_text("old")
  app = types.SimpleNamespace(confdir=str(tmp_path / "docs"),
                              outdir=str(tmp_path / "docs" / "_build" / "html"))
  example_pages.write_pages(app, None)
  assert sorted(p.name for p in out.iterdir()) == ["helper.md", "index.md", "run_me.md"]
  assert (out / "run_me.md").read_text().startswith("---\nfile_format: mystnb\n")
  assert "```{literalinclude} ../../../examples/helper.py" in (out / "helper.md").read_text()
  index = (out / "index.md").read_text()
  assert index.index("run_me") < index.index("helper")
  kernel_config = tmp_path / "docs" / "_build" / ".ipython" / "profile_default"
  assert (kernel_config / "ipython_kernel_config.py").exists()


def test_compact_math_lists_and_marked_blocks_keep_their_shape():
  """The three forms the LaTeX docstrings use besides plain `.. math::`: a formula on the
  directive's own line continued below it (one formula, not two), a list item's continuation line
  (text, not code) and a block the docstring marks with `::` (left as the author's literal block)."""
  literal_blocks = _load("docstring_blocks").literal_blocks
  doc = [".. math:: w_c = \\frac{a}{b}",
         "   + |c|",
         "",
         "Steps:",
         "",
         "1. first step, whose text",
         "   goes on here;",
         "",
         "A table::",
         "",
         "    name   what",
         "    x      |y|",
         ""]
  out = literal_blocks(doc)
  directive = next(i for i, line in enumerate(out) if line.startswith(".. math::"))
  # One formula: the directive alone on its line, both lines of the formula in its body (docutils
  # reads text on the directive's line as a first, separate formula).
  assert out[directive] == ".. math::"
  body = [line.strip() for line in out[directive + 1:directive + 5] if line.strip()]
  assert body[:2] == ["w_c = \\frac{a}{b}", "+ |c|"]  # the bar unescaped
  assert sum(line.startswith(".. math::") for line in out) == 1
  assert "   goes on here;" in out and out[out.index("   goes on here;") - 1] != "::"
  assert "    x      |y|" in out  # the marked block is passed on as written, not marked twice
  assert "::" not in [line.strip() for line in out]


def test_a_one_seed_report_page_names_no_spread_over_seeds():
  """The 200-epoch study (one seed) renders its committed report with no "± n/a" cells and its
  plots' captions without error-bar or band wording; a report over seeds keeps them."""
  pytest.importorskip("sphinx")  # the extension's logger (the docs extra)
  study_pages = _load("study_pages")
  results = DOCS_EXT.parents[1] / "results"
  one_seed = results / "cifar10_lt_200" / "report.md"
  text = one_seed.read_text()
  assert "n/a" not in text and "one seed (seed 0)" in text.split("\n", 1)[0]
  plots = study_pages._plots_section(one_seed, text)
  assert "per_class_accuracy.png" in plots and "nc_over_training.png" in plots
  assert "std over seeds" not in plots and "one seed, so no error bars" in plots
  several = results / "cifar10_lt_short" / "report.md"
  plots = study_pages._plots_section(several, several.read_text())
  assert "error bars are ±1 sample std over seeds" in plots


def test_external_names_link_to_their_projects_without_a_network():
  external_url = _load("external_links").external_url
  assert external_url("jax.jit") == "https://docs.jax.dev/en/latest/_autosummary/jax.jit.html"
  # A class defined in a private module is documented under its public name.
  assert external_url("jax.jaxlib._jax.Array") == (
      "https://docs.jax.dev/en/latest/_autosummary/jax.Array.html")
  assert external_url("optax.softmax_cross_entropy").startswith("https://optax.readthedocs.io/")
  assert external_url("numpy.ndarray").endswith("/numpy.ndarray.html")
  assert external_url("mr2_jax.mr2_loss") is None and external_url("jax") is None
