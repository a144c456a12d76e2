"""The libraries' layout: mr2_jax → mr2_reweight_core ← reweight_jax (neither method package imports
the other, nor the harness), no module over 450 lines (the harness's limit,
tests/harness/test_layout.py); `reweight_jax`'s top level is the paper and the per-class metrics,
the comparison methods are `reweight_jax.baselines`; the spellings of before 0.2.0 (never
published) are gone, with no alias (the CHANGELOG's table of moves is the migration guide)."""

import ast
import importlib
import pathlib
import warnings

import pytest

import reweight_jax

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
MAX_LINES = 450
MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def imported_packages(package):
  found = set()
  for path in (ROOT / package).rglob("*.py"):
    name = path.relative_to(ROOT / package).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        found |= {(name, alias.name.split(".")[0]) for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module:
        found.add((name, node.module.split(".")[0]))
  return found


@pytest.mark.skipif(not MODULES, reason="the libraries are installed, not checked out, here")
@pytest.mark.parametrize("package, forbidden", [
    ("mr2_jax", {"reweight_jax", "experiments"}),
    ("reweight_jax", {"mr2_jax", "experiments"}),
    ("mr2_reweight_core", {"mr2_jax", "reweight_jax", "experiments"}),
])
def test_dependency_direction(package, forbidden):
  """mr2_jax → mr2_reweight_core ← reweight_jax; neither method package imports the other, in any of
  their modules (sub-packages included)."""
  offending = sorted((f, m) for f, m in imported_packages(package) if m in forbidden)
  assert not offending, offending


@pytest.mark.skipif(not MODULES, reason="the libraries are installed, not checked out, here")
@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_library_module_over_450_lines(path):
  count = len(path.read_text().splitlines())
  assert count <= MAX_LINES, f"{path.relative_to(ROOT)}: {count} lines"


# Old spelling → where the name lives now (CHANGELOG.md, 0.2.0): the old one must not resolve.
MOVED = {
    "reweight_jax.baselines.glmc.glmc_rebalanced_probabilities":
        "reweight_jax.baselines.rebalanced_sampling",
    "reweight_jax.baselines.glmc.glmc_rebalanced_indices": "reweight_jax.baselines.rebalanced_sampling",
    "reweight_jax.baselines.glmc.cutmix_box": "reweight_jax.baselines.image_mixing",
    "reweight_jax.baselines.glmc.mix_images": "reweight_jax.baselines.image_mixing",
    "reweight_jax.baselines.glmc.cutmix": "reweight_jax.baselines.image_mixing",
    "mr2_jax.supcon_loss": "reweight_jax.baselines",
    "mr2_jax.stack_views": "reweight_jax.baselines",
    "mr2_jax.SupConAux": "reweight_jax.baselines",
}
MOVED.update({f"reweight_jax.{name}": "reweight_jax.baselines"
              for name in reweight_jax.baselines.__all__})


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_gone_and_its_new_home_has_it(old):
  module, name = old.rsplit(".", 1)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no DeprecationWarning either: no alias at all
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
      getattr(importlib.import_module(module), name)
    assert callable(getattr(importlib.import_module(MOVED[old]), name)) or name.isupper()


# The paper at the top level (ICML 2026: the inverse weights, the macro factor, the loss, its state
# and priors, MiLeLR, the NC metrics) and the per-class metrics; nothing else.
PAPER = {
    "BatchClassLosses", "MixedReweightAux", "NCAccumulator", "NCMetrics", "PRIOR_KINDS",
    "ReweightAux", "ReweightState", "batch_class_losses", "class_prior", "cross_entropy_loss",
    "init_reweight_state", "inverse_reweighted_loss", "inverse_weights", "macro_factor",
    "mean_class_loss", "milelr_schedule", "mittag_leffler_neg", "mittag_leffler_order",
    "mixed_inverse_reweighted_loss", "nc_metrics", "traced_checks", "__version__", "baselines",
}


def test_reweight_jax_top_level_is_the_paper_and_the_per_class_metrics():
  from mr2_reweight_core import metrics
  assert set(reweight_jax.__all__) == PAPER | set(metrics.__all__)
  assert not set(reweight_jax.__all__) & set(reweight_jax.baselines.__all__)


def test_the_per_class_metrics_are_one_set_exported_by_both_libraries():
  import mr2_jax
  from mr2_reweight_core import metrics
  assert len(metrics.__all__) >= 10
  for name in metrics.__all__:
    assert name in mr2_jax.__all__ and name in reweight_jax.__all__, name
    assert getattr(mr2_jax, name) is getattr(reweight_jax, name) is getattr(metrics, name)


OLD_MODULES = ("reweight_jax.eql", "reweight_jax.etf_dr", "reweight_jax.fairdro",
               "reweight_jax.glmc", "reweight_jax.group_dro", "reweight_jax.image_mixing",
               "reweight_jax.jtt", "reweight_jax.lff", "reweight_jax.rebalanced_sampling",
               "reweight_jax.soft_labels", "reweight_jax.supcon", "mr2_jax.supcon")


@pytest.mark.parametrize("module", OLD_MODULES)
def test_an_old_module_path_is_gone(module):
  """No import hook and no shim module: `import reweight_jax.eql` fails like any missing module."""
  import sys
  assert not [finder for finder in sys.meta_path
              if type(finder).__module__.startswith(("reweight_jax", "mr2_jax"))]
  with pytest.raises(ModuleNotFoundError, match=module):
    importlib.import_module(module)


def test_the_old_long_tail_module_is_the_baselines_package():
  """`reweight_jax.baselines` was a module of the long-tail baselines; it is now the package of
  every comparison method, and its names are unchanged."""
  from reweight_jax.baselines import long_tail
  for name in ("focal_loss", "ldam_loss", "class_balanced_weights", "logit_adjusted_loss"):
    assert getattr(reweight_jax.baselines, name) is getattr(long_tail, name)
