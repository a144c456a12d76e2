"""The harness's pages are in the site only when the harness imports.

The API reference, the guides and the examples need the `docs` extra alone. The pages that the
harness writes or that show its output (the loss registry, the shipped configs, the results and
benchmark reports, the diagnose example and its guide) need the `experiments` extra as well. Without
it, conf.py leaves the extensions that write them out and excludes the pages; this extension then
drops the landing page's section between the lines `% harness pages: start` and
`% harness pages: end`, and turns a cross-reference to one of those pages into plain text, so that
the library-only build passes with warnings as errors.
"""

from __future__ import annotations

import importlib
import posixpath

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

# What the harness's pages import: the loss registry and its configs and recipes (loss_registry),
# the diagnosis behind the diagnose example (study_pages).
HARNESS_MODULES = ("experiments.methods.registry", "experiments.configs.default",
                   "experiments.train.recipes", "experiments.diagnose")
# The checkout's own packages: a missing module among them is a bug, never a missing extra.
_OWN = ("experiments", "mr2_jax", "reweight_jax", "mr2_reweight_core")

# Documents that exist only with the harness, and how a link to one reads without it.
HARNESS_DOCS = {
    "_generated/losses": "the loss registry's pages",
    "_generated/configs": "the shipped configs' page",
    "_generated/results": "the results pages",
    "_generated/benchmarks": "the benchmark pages",
    "_generated/diagnose": "the diagnose example",
    "guides/diagnose": "the diagnose guide",
}
START, END = "% harness pages: start", "% harness pages: end"


def harness_missing() -> str | None:
  """None when the harness imports; else the name of the third-party module it lacks.

  A copy of the docs without experiments/ has no harness either. Any other import error (a bug in
  the checkout) is raised, so that a broken harness fails the build instead of silently leaving
  its pages out.
  """
  for name in HARNESS_MODULES:
    try:
      importlib.import_module(name)
    except ModuleNotFoundError as error:
      if error.name == "experiments":
        return error.name
      if error.name is None or error.name.split(".")[0] in _OWN:
        raise
      return error.name
  return None


def _harness_doc(docname: str) -> str | None:
  return next((text for prefix, text in HARNESS_DOCS.items()
               if docname == prefix or docname.startswith(prefix + "/")), None)


def _drop_section(app, docname, source):
  if app.config.harness_missing is None or docname != app.config.root_doc:
    return
  text = source[0]
  if START not in text or END not in text:
    logger.warning(f"{docname}: no '{START}' / '{END}' lines around the harness's section",
                   type="harness_pages")
    return
  before, rest = text.split(START, 1)
  after = rest.split(END, 1)[1]
  note = ("This build has no harness pages: the `experiments` extra is not installed "
          f"(`{app.config.harness_missing}` is missing). Install it with the `docs` extra to add "
          "the loss registry, the shipped configs, the results and the benchmarks.\n")
  source[0] = before + note + after


def _unlinked(app, env, node, contnode):
  """A link to a harness page, in a build without them: its text, without the link."""
  del env
  if app.config.harness_missing is None or node.get("reftype") not in ("doc", "myst"):
    return None
  target = node.get("reftarget", "")
  if not target.startswith("/"):
    target = posixpath.normpath(posixpath.join(posixpath.dirname(node["refdoc"]), target))
  text = _harness_doc(target.lstrip("/").removesuffix(".md").removesuffix(".rst"))
  if text is None:
    return None
  if node.get("refexplicit"):
    return contnode
  return nodes.emphasis(text=f"{text} (in a build with the harness)")


def _report(app, config):
  del app
  if config.harness_missing is not None:
    logger.info(f"harness pages: left out ({config.harness_missing} is not installed)")


def setup(app):
  app.add_config_value("harness_missing", None, "env", types=(str, type(None)))
  app.connect("config-inited", _report)
  app.connect("source-read", _drop_section)
  app.connect("missing-reference", _unlinked)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
