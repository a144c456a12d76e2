"""Where the names and modules that left `reweight_jax`'s top level in 0.2.0 went, and the aliases
that keep the old spellings working, with a `DeprecationWarning`, until 0.3.0.

The comparison methods moved to `reweight_jax.baselines`: `reweight_jax.focal_loss` is now
`reweight_jax.baselines.focal_loss`, the module `reweight_jax.eql` is `reweight_jax.baselines.eql`,
and `reweight_jax.baselines` (a module of the long-tail baselines until then) is a package whose
long-tail module is `reweight_jax.baselines.long_tail`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

# Modules that moved (old path → new path).
MOVED_MODULES = {
    f"reweight_jax.{name}": f"reweight_jax.baselines.{name}"
    for name in ("eql", "etf_dr", "fairdro", "glmc", "group_dro", "image_mixing", "jtt", "lff",
                 "rebalanced_sampling", "soft_labels", "supcon")
}


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
  warnings.warn(f"{old} moved to {new} (a comparison method: reweight_jax.baselines); the old "
                "path goes in 0.3.0", DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.Loader):
  """Loads an old module path as the module object at its new path (one object, two names)."""

  def __init__(self, new: str):
    self.new = new

  def create_module(self, spec) -> ModuleType:
    return importlib.import_module(self.new)

  def exec_module(self, module: ModuleType) -> None:
    del module  # the new module is already executed


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
  """`import reweight_jax.eql` (and `from reweight_jax.eql import ...`): the moved module, warned."""

  def find_spec(self, fullname, path, target=None):
    del path, target
    new = MOVED_MODULES.get(fullname)
    if new is None:
      return None
    warn_moved(fullname, new, stacklevel=4)
    return importlib.util.spec_from_loader(fullname, _Alias(new))


def install_finder() -> None:
  if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())
