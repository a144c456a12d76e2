"""The README's quick start runs as pasted: its Python block executes in a fresh namespace and ends
with the values it names (a finite loss, K class weights, the counters of one batch)."""

import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks(text: str) -> list[str]:
  return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.skipif(not README.exists(), reason="a copy of tests/ without the README (library job)")
def test_the_quick_start_runs_as_pasted(capsys):
  blocks = _python_blocks(README.read_text())
  assert blocks, "README.md has no Python block"
  namespace: dict = {}
  exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
  assert np.isfinite(float(namespace["loss"]))
  weights = np.asarray(namespace["aux"].class_weights)
  assert weights.shape == (10,) and np.all(np.isfinite(weights))
  code = [line for line in blocks[0].splitlines()
          if line.strip() and not line.startswith(("import ", "    "))]  # continuation lines: one
  assert len(code) <= 10, code  # "the libraries in ten lines", imports aside
  np.testing.assert_array_equal(namespace["counters"].batch_counts, np.ones(10))
  assert bool(np.all(namespace["stats"].seen))
  assert capsys.readouterr().out.strip().startswith("[")  # the print of the weights


DOCS_INDEX = README.parent / "docs" / "index.md"


@pytest.mark.skipif(not DOCS_INDEX.exists(), reason="a copy of tests/ without the docs (library job)")
def test_the_landing_page_shows_the_same_quick_start():
  """docs/index.md includes the README's block between its two marker comments (myst's include
  fails the build when a marker is missing), and that block is the one the test above runs."""
  readme, index = README.read_text(), DOCS_INDEX.read_text()
  markers = re.search(r'```\{include\} \.\./README\.md\n:start-after: "(.*?)"\n:end-before: "(.*?)"\n',
                      index)
  assert markers, "docs/index.md does not include the README's quick start"
  start, end = markers.groups()
  assert readme.count(start) == 1 and readme.count(end) == 1
  included = readme.split(start, 1)[1].split(end, 1)[0]
  assert _python_blocks(included) == _python_blocks(readme)[:1]


@pytest.mark.skipif(not README.exists(), reason="a copy of tests/ without the README (library job)")
def test_the_readme_stays_short():
  """The README points to the site (the layout, the guides) and stays at most 150 lines."""
  assert len(README.read_text().splitlines()) <= 150
