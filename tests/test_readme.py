"""The README's quick start runs as pasted: its Python block executes in a fresh namespace and ends
with the values it names (a finite loss, K class weights, the counters of one batch)."""

import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


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
  assert weights.shape == (namespace["num_classes"],) and np.all(np.isfinite(weights))
  np.testing.assert_array_equal(namespace["counters"].batch_counts, np.ones(10))
  assert bool(np.all(namespace["stats"].seen))
  assert capsys.readouterr().out.strip().startswith("[")  # the print of the weights
