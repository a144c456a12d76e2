"""The installed distribution: what `pip install mr2-jax` brings and puts into site-packages.

Runs in every test run (editable install) and, with MR2_JAX_LIBRARY_ONLY=1, in .ci/run's
library-only jobs over a plain `pip install .`, where it also checks that the libraries are the
installed copies and that the harness is absent.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re

import pytest

import mr2_jax
import mr2_reweight_core
import reweight_jax

DIST = "mr2-jax"
# What the libraries need at run time; everything else comes with an extra.
RUNTIME = {"jax", "numpy", "chex", "optax"}
# Packages of the harness (experiments/), of Flax and of the tests: never a plain requirement.
NOT_RUNTIME = {"flax", "orbax-checkpoint", "ml-collections", "tensorflow-datasets", "array-record",
               "grain", "scikit-learn", "pillow", "matplotlib", "tensorboardx", "tqdm", "absl-py",
               "safetensors", "torch", "torchvision", "timm", "pytest", "hypothesis", "scipy",
               "sphinx"}
LIBRARIES = {"mr2_jax", "reweight_jax", "mr2_reweight_core"}
# .ci/run's library-only jobs set it and run tests/lib alone (the library's tests, by folder).
LIBRARY_ONLY = os.environ.get("MR2_JAX_LIBRARY_ONLY", "") == "1"
ROOT = pathlib.Path(__file__).resolve().parents[2]  # the checkout, or the CI job's copy of tests/


def _dist() -> importlib.metadata.Distribution:
  """The installed distribution (pip's dist-info, which has an INSTALLER file), not a build's
  `*.egg-info` that an editable install leaves in the checkout."""
  installed = [d for d in importlib.metadata.distributions(name=DIST) if d.read_text("INSTALLER")]
  assert len(installed) == 1, f"{len(installed)} installed copies of {DIST}"
  return installed[0]


def _requirement_name(requirement: str) -> str:
  return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _plain_requirements() -> dict[str, str]:
  """Requirement name → its text, for the requirements without an `extra ==` marker."""
  requirements = _dist().requires or []
  return {_requirement_name(r): r for r in requirements if "extra ==" not in r}


def _editable() -> bool:
  text = _dist().read_text("direct_url.json")
  return bool(text) and json.loads(text).get("dir_info", {}).get("editable", False)


def test_runtime_requirements_are_the_libraries_needs_only():
  plain = _plain_requirements()
  assert set(plain) == RUNTIME, plain
  assert not set(plain) & NOT_RUNTIME


def test_runtime_requirements_have_lower_bounds_and_no_caps():
  for name, requirement in _plain_requirements().items():
    assert ">=" in requirement, f"{name}: no lower bound in {requirement!r}"
    assert not re.search(r"<|==|~=|!=", requirement), f"{name}: capped or pinned: {requirement!r}"


def test_extras_hold_the_harness_and_flax():
  extras = _dist().metadata.get_all("Provides-Extra")
  assert {"flax", "test", "experiments"} <= set(extras)
  requirements = _dist().requires
  experiments = {_requirement_name(r) for r in requirements if "extra == \"experiments\"" in r}
  assert {"flax", "orbax-checkpoint", "ml-collections", "grain", "matplotlib"} <= experiments


def test_one_version_everywhere():
  version = _dist().version
  assert mr2_jax.__version__ == reweight_jax.__version__ == version
  assert mr2_reweight_core.version.__version__ == version


def test_metadata_declares_license_and_typing():
  metadata = _dist().metadata
  assert metadata.get("License-Expression") == "Apache-2.0"
  assert "Typing :: Typed" in metadata.get_all("Classifier")
  assert metadata.get_all("Project-URL")
  for package in (mr2_jax, reweight_jax, mr2_reweight_core):
    assert os.path.isfile(os.path.join(os.path.dirname(package.__file__), "py.typed"))


def test_plain_install_holds_only_the_libraries():
  if _editable():
    pytest.skip("editable install: the plain install is checked by .ci/run's library-only job")
  files = _dist().files
  tops = {f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".pth"))
          and f.parts[0] != "__pycache__"}
  assert tops == LIBRARIES, tops
  for package in (mr2_jax, reweight_jax, mr2_reweight_core):
    assert "site-packages" in package.__file__, package.__file__


def test_library_only_run_has_no_harness():
  if not LIBRARY_ONLY:
    pytest.skip("MR2_JAX_LIBRARY_ONLY is not set")
  assert not _editable()
  assert importlib.util.find_spec("experiments") is None
  assert importlib.util.find_spec("flax") is None


def test_losses_import_without_flax():
  """`import mr2_jax, reweight_jax` imports no Flax; the heads name the extra when it is missing."""
  import subprocess
  import sys
  code = ("import sys, mr2_jax, reweight_jax; "
          "assert not [m for m in sys.modules if m.split('.')[0] == 'flax'], 'flax imported'")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
  if importlib.util.find_spec("flax") is None:
    with pytest.raises(ModuleNotFoundError, match=r"mr2-jax\[flax\]"):
      mr2_jax.CosineClassifier  # noqa: B018
