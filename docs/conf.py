"""Sphinx configuration of the mr2-jax site (built offline: no intersphinx, no network).

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Three small extensions in docs/_ext run at build time: `api_coverage` fails the build when a
public symbol has no page, `loss_registry` writes one page per entry of the harness's loss registry
(from `experiments.losses.registry` itself), `study_pages` copies the results and benchmark reports with
their plots. What they write goes to docs/_generated and docs/api/_autosummary (git-ignored).
"""

from __future__ import annotations

import os
import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
# The libraries and the harness import from the checkout (the harness is never installed).
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
# Importing the harness must not grab an accelerator or warn about its absence.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from mr2_reweight_core.version import __version__  # noqa: E402

project = "mr2-jax"
author = "The mr2-jax authors"
copyright = "2026, The mr2-jax authors"  # pylint: disable=redefined-builtin
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
    "docstring_blocks",
    "api_coverage",
    "loss_registry",
    "study_pages",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/runs/**"]
templates_path = ["_templates"]
# `name` in a docstring links to the object when it is documented, and is code otherwise.
default_role = "py:obj"

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"member-order": "bysource"}
# The docstrings give every argument's shape and dtype; the annotations (`ArrayLike`, a long union
# once expanded) would repeat them less precisely.
autodoc_typehints = "none"
autodoc_preserve_defaults = True
# The build imports the Flax heads and the harness (the loss-registry pages, the diagnose example):
# install the `experiments` extra with the `docs` one.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

myst_heading_anchors = 3
# The copied study reports (docs/_generated) start their sections at H3 under the page title.
suppress_warnings = ["myst.header"]
myst_enable_extensions = ["colon_fence"]

html_theme = "alabaster"
html_title = f"mr2-jax {release}"
html_static_path: list[str] = []
html_theme_options = {
    "description": "MR2 (ICLR 2026) and inverse-view loss reweighting (ICML 2026) in JAX",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "260px",
}

# Where links to the repository's files point (the results and benchmark pages link raw files).
repository_url = "https://github.com/mr2-jax/mr2-jax/blob/main"
