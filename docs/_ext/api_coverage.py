"""Fails the build when a public symbol of the libraries has no page.

Public: every name in a package's `__all__` (`mr2_jax`, `reweight_jax`, `reweight_jax.baselines`;
the per-class metrics both libraries export count once, as `mr2_reweight_core.metrics.<name>`); for
the shared core `mr2_reweight_core`, which has no `__all__` of its own, each module's `__all__` if it has one, else
the functions and classes it defines whose names do not start with `_`. Documented: an object
description in the Python domain under the name `<package>.<name>` (`<module>.<name>` for the core).
Each missing symbol is a warning, so `sphinx -W` fails; the count is printed either way.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil

from sphinx.util import logging

logger = logging.getLogger(__name__)

PACKAGES = ("mr2_jax", "reweight_jax", "reweight_jax.baselines")
CORE = "mr2_reweight_core"
# The per-class metrics: one set that both libraries export, documented once, on docs/api/metrics.rst
# (as `mr2_reweight_core.metrics.<name>`); the core page leaves this module to that page.
METRICS = "mr2_reweight_core.metrics"


def _module_public(module) -> list[str]:
  if hasattr(module, "__all__"):
    return list(module.__all__)
  return [name for name, value in vars(module).items()
          if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
          and getattr(value, "__module__", None) == module.__name__]


def public_symbols() -> list[str]:
  """Fully qualified names of every public symbol."""
  names = []
  metrics = importlib.import_module(METRICS)
  for package in PACKAGES:
    module = importlib.import_module(package)
    names += [f"{package}.{name}" for name in module.__all__
              if name not in metrics.__all__]  # their page is the metrics page
  core = importlib.import_module(CORE)
  if hasattr(core, "__all__"):
    names += [f"{CORE}.{name}" for name in core.__all__]
  for info in pkgutil.iter_modules(core.__path__):
    if info.name.startswith("_") or info.name == "version":
      continue
    module = importlib.import_module(f"{CORE}.{info.name}")
    names += [f"{module.__name__}.{name}" for name in _module_public(module)]
  return names


def write_core_page(app):
  """docs/_generated/core.rst: every module of the shared core with its members, so that a module
  or function added to the (private) core has a page without anyone listing it."""
  core = importlib.import_module(CORE)
  parts = [f"``{CORE}``: the shared per-class core", ""]
  parts[1] = "=" * len(parts[0])
  parts += ["", f".. automodule:: {CORE}", "   :no-members:", "",
            "Both libraries build every class statistic on this core. It is documented for readers "
            "of the code and for the exactness it guarantees, not as an API to import: its names "
            "may change between releases, and the public ones are re-exported by ``mr2_jax`` and "
            "``reweight_jax``.", ""]
  for info in sorted(pkgutil.iter_modules(core.__path__), key=lambda i: i.name):
    if info.name.startswith("_") or info.name == "version":
      continue
    name = f"{CORE}.{info.name}"
    if name == METRICS:
      parts += [f"``{name}``", "-" * (len(name) + 4), "",
                "The per-class metrics, exported by both libraries: :doc:`../api/metrics`.", ""]
      continue
    title = f"``{name}``"
    parts += [title, "-" * len(title), "", f".. automodule:: {name}", "   :members:", ""]
  text = "\n".join(parts)
  path = pathlib.Path(app.confdir) / "_generated" / "core.rst"
  path.parent.mkdir(parents=True, exist_ok=True)
  if not path.exists() or path.read_text() != text:
    path.write_text(text)


def _check(app, env):
  del app
  documented = set(env.domaindata["py"]["objects"])
  public = public_symbols()
  missing = [name for name in public if name not in documented]
  logger.info(f"API coverage: {len(public) - len(missing)}/{len(public)} public symbols documented")
  for name in missing:
    logger.warning(f"API coverage: public symbol {name} has no page (add it to docs/api/)",
                   type="api_coverage")


def setup(app):
  app.connect("builder-inited", write_core_page)
  app.connect("env-check-consistency", _check)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
