"""The libraries' layout: no module over 450 lines (the harness's limit, tests/test_harness_layout.py),
and names that moved between modules in 0.2.0 still read from their old module with a
DeprecationWarning until 0.3.0."""

import importlib
import pathlib
import warnings

import pytest

import reweight_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
MAX_LINES = 450
MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).glob("*.py"))


@pytest.mark.skipif(not MODULES, reason="the libraries are installed, not checked out, here")
@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_library_module_over_450_lines(path):
  count = len(path.read_text().splitlines())
  assert count <= MAX_LINES, f"{path.relative_to(ROOT)}: {count} lines"


MOVED = {  # name: (old module, new module)
    "glmc_rebalanced_probabilities": ("reweight_jax.glmc", "reweight_jax.rebalanced_sampling"),
    "glmc_rebalanced_indices": ("reweight_jax.glmc", "reweight_jax.rebalanced_sampling"),
    "cutmix_box": ("reweight_jax.glmc", "reweight_jax.image_mixing"),
    "mix_images": ("reweight_jax.glmc", "reweight_jax.image_mixing"),
    "cutmix": ("reweight_jax.glmc", "reweight_jax.image_mixing"),
}


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_reads_from_its_old_module_with_a_deprecation_warning(name):
  old, new = MOVED[name]
  with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{name}"):
    value = getattr(importlib.import_module(old), name)
  assert value is getattr(importlib.import_module(new), name) is getattr(reweight_jax, name)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the top-level name and the new module read without a warning
    getattr(reweight_jax, name)
    getattr(importlib.import_module(new), name)
  with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
    importlib.import_module(old).not_a_name  # noqa: B018
