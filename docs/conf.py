"""Sphinx configuration of the mr2-jax site (built offline: no intersphinx, no network).

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The page needs no network either: the theme (sphinx-book-theme) ships its fonts and scripts, and
MathJax is bundled (sphinx-mathjax-offline copies it into `_static/mathjax`).

Small extensions in docs/_ext run at build time: `api_coverage` fails the build when a public
symbol has no page, `example_pages` writes each script in examples/ as a notebook that myst-nb
executes (code, output and figures interleaved),
`external_links` links JAX / optax / Flax / chex / NumPy names to their projects' pages without
fetching anything, `loss_registry` writes one page per entry of the harness's loss registry (from
`experiments.methods.registry` itself), `study_pages` copies the results and benchmark reports with
their plots. What they write goes to docs/_generated and docs/api/_autosummary (git-ignored).

The API reference, the guides and the examples need the `docs` extra only. The harness's pages
(the loss registry, the shipped configs, the results and benchmarks, the diagnose example) need the
`experiments` extra too, and are left out, with the links to them, when the harness does not
import (`HARNESS_PAGES`).
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

import harness_pages  # noqa: E402
from mr2_reweight_core.version import __version__  # noqa: E402

project = "mr2-jax"
author = "The mr2-jax authors"
copyright = "2026, The mr2-jax authors"  # pylint: disable=redefined-builtin
version = release = __version__

# None when the harness imports; else the module of the `experiments` extra that is missing
# (read by docs/_ext/harness_pages.py).
harness_missing = harness_pages.harness_missing()
HARNESS_PAGES = harness_missing is None

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # the package's name: MathJax 3 copied into _static, no CDN
    "sphinx_copybutton",
    "sphinx_design",
    "myst_nb",  # MyST Markdown (it sets myst_parser up) and the executed example notebooks
    "docstring_blocks",
    "api_coverage",
    "example_pages",
    "harness_pages",
    "external_links",
]
if HARNESS_PAGES:
  extensions += ["loss_registry", "study_pages"]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**/runs/**"]
if not HARNESS_PAGES:
  # Pages written by the harness's extensions (stale ones from an earlier build included), and
  # the guide whose example report the harness writes.
  exclude_patterns += ["_generated/losses", "_generated/configs.rst", "_generated/results",
                       "_generated/benchmarks", "_generated/diagnose", "guides/diagnose.md"]
templates_path = ["_templates"]
# `name` in a docstring links to the object when it is documented, and is code otherwise.
default_role = "py:obj"

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"member-order": "bysource"}
# The docstrings give every argument's shape and dtype; the annotations (`ArrayLike`, a long union
# once expanded) would repeat them less precisely.
# Types in the signatures (not repeated in the parameter lists); JAX / optax / Flax / chex / NumPy
# names link to their projects' pages (`external_links`, offline).
autodoc_typehints = "signature"
autodoc_type_aliases = {"ArrayLike": "jax.typing.ArrayLike"}  # not its expanded Union
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

myst_heading_anchors = 3
# The copied study reports (docs/_generated) start their sections at H3 under the page title.
suppress_warnings = ["myst.header"]
# $...$ and $$...$$ are maths (rendered by the bundled MathJax, as are `:math:` and `.. math::` in
# docstrings); amsmath takes \begin{aligned} and the like as a block of its own.
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath"]

# The example notebooks (docs/_ext/example_pages.py): run when the page is read, their outputs kept
# in <outdir>/../.jupyter_cache and reused while the notebook and the key of the sources it runs
# are unchanged; a fresh build (CI's) runs each once, 12–25 s on a CPU. A cell that raises is a
# warning, so `-W` fails the build, with its traceback in the log.
nb_execution_mode = "cache"
nb_execution_timeout = 600  # seconds per cell: `main()` trains five runs
nb_execution_show_tb = True
nb_merge_streams = True  # one block per cell for what it printed

# MathJax from the build's own _static (sphinx-mathjax-offline puts it there): nothing is fetched
# when a page is viewed.
mathjax_path = "mathjax/tex-chtml.js"

# Copy the code of a doctest or a shell session without its prompts and output.
copybutton_exclude = ".linenos, .gp, .go"

html_theme = "sphinx_book_theme"
html_title = f"mr2-jax {release}"
html_static_path = ["_static"]
html_css_files = ["mr2.css"]
html_theme_options = {
    # Links only (nothing is loaded from them when a page is viewed).
    "repository_url": "https://github.com/mr2-jax/mr2-jax",
    "repository_branch": "main",
    "path_to_docs": "docs",
    "use_repository_button": True,
    # Off: a generated page (API, examples, reports) has no source file in the repository.
    "use_source_button": False,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    # The navigation shows the current page's branch only: the whole tree on each of ~200 pages
    # took most of the build (30 s of 55 s on 2 cores).
    "collapse_navbar": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "logo": {"text": f"mr2-jax {release}"},
}
html_show_sourcelink = False

# Where links to the repository's files point (the results and benchmark pages link raw files).
repository_url = "https://github.com/mr2-jax/mr2-jax/blob/main"
