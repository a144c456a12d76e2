"""The libraries' layout: no module over 450 lines (the harness's limit, tests/harness/test_layout.py);
`reweight_jax`'s top level is the paper and the per-class metrics, the comparison methods are
`reweight_jax.baselines`; names and modules that moved in 0.2.0 still read from their old place with
a DeprecationWarning until 0.3.0."""

import importlib
import pathlib
import warnings

import pytest

import reweight_jax

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("mr2_jax", "reweight_jax", "mr2_reweight_core")
MAX_LINES = 450
MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.skipif(not MODULES, reason="the libraries are installed, not checked out, here")
@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_library_module_over_450_lines(path):
  count = len(path.read_text().splitlines())
  assert count <= MAX_LINES, f"{path.relative_to(ROOT)}: {count} lines"


MOVED = {  # name: (old module, new module)
    "glmc_rebalanced_probabilities": ("reweight_jax.baselines.glmc",
                                      "reweight_jax.baselines.rebalanced_sampling"),
    "glmc_rebalanced_indices": ("reweight_jax.baselines.glmc",
                                "reweight_jax.baselines.rebalanced_sampling"),
    "cutmix_box": ("reweight_jax.baselines.glmc", "reweight_jax.baselines.image_mixing"),
    "mix_images": ("reweight_jax.baselines.glmc", "reweight_jax.baselines.image_mixing"),
    "cutmix": ("reweight_jax.baselines.glmc", "reweight_jax.baselines.image_mixing"),
}


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_reads_from_its_old_module_with_a_deprecation_warning(name):
  old, new = MOVED[name]
  with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{name}"):
    value = getattr(importlib.import_module(old), name)
  assert value is getattr(importlib.import_module(new), name) is getattr(reweight_jax.baselines, name)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the package's name and the new module read without a warning
    getattr(reweight_jax.baselines, name)
    getattr(importlib.import_module(new), name)
  with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
    importlib.import_module(old).not_a_name  # noqa: B018


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


@pytest.mark.parametrize("name", sorted(reweight_jax.baselines.__all__))
def test_a_comparison_method_reads_from_the_top_level_with_a_deprecation_warning(name):
  with pytest.warns(DeprecationWarning,
                    match=f"reweight_jax.{name} moved to reweight_jax.baselines.{name}"):
    value = getattr(reweight_jax, name)
  assert value is getattr(reweight_jax.baselines, name)
  with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
    reweight_jax.not_a_name  # noqa: B018


MOVED_MODULES = ("eql", "etf_dr", "fairdro", "glmc", "group_dro", "image_mixing", "jtt", "lff",
                 "rebalanced_sampling", "soft_labels", "supcon")


@pytest.mark.parametrize("module", MOVED_MODULES)
def test_a_moved_module_imports_from_its_old_path_as_the_same_module_with_a_warning(module):
  import sys
  sys.modules.pop(f"reweight_jax.{module}", None)
  with pytest.warns(DeprecationWarning,
                    match=f"reweight_jax.{module} moved to reweight_jax.baselines.{module}"):
    old = importlib.import_module(f"reweight_jax.{module}")
  assert old is importlib.import_module(f"reweight_jax.baselines.{module}")
  assert callable(getattr(old, next(n for n in dir(old) if n in reweight_jax.baselines.__all__)))


def test_the_old_long_tail_module_is_the_baselines_package():
  """`reweight_jax.baselines` was a module of the long-tail baselines; it is now the package of
  every comparison method, and its names are unchanged."""
  from reweight_jax.baselines import long_tail
  for name in ("focal_loss", "ldam_loss", "class_balanced_weights", "logit_adjusted_loss"):
    assert getattr(reweight_jax.baselines, name) is getattr(long_tail, name)
