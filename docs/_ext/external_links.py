"""Links from JAX, optax, Flax, chex and NumPy names in the API pages (signatures' types, `jax.jit`
in prose) to those projects' documentation, without intersphinx: the site builds offline, so no
inventory is fetched. A reference Sphinx cannot resolve inside this project and whose target
starts with one of `PROJECTS` becomes a plain link to that project's page for the name (JAX and
NumPy have one page per public name) or to its search page for the name (optax, Flax, chex).
Nothing is loaded from those sites when a page is built or viewed.
"""

from __future__ import annotations

# Top-level package → URL of the page for a full dotted name.
PROJECTS = {
    "jax": "https://docs.jax.dev/en/latest/_autosummary/{name}.html",
    "numpy": "https://numpy.org/doc/stable/reference/generated/{name}.html",
    "optax": "https://optax.readthedocs.io/en/latest/search.html?q={name}",
    "flax": "https://flax.readthedocs.io/en/latest/search.html?q={name}",
    "chex": "https://chex.readthedocs.io/en/latest/search.html?q={name}",
}


def external_url(target: str) -> str | None:
  """The documentation URL of a dotted name of one of `PROJECTS`, or None. A name reached through
  a private module (`jax.jaxlib._jax.Array`, where the class is defined) is documented under its
  public one (`jax.Array`)."""
  parts = target.split(".")
  pattern = PROJECTS.get(parts[0])
  if pattern is None or len(parts) == 1:
    return None
  if any(part.startswith("_") for part in parts[1:-1]):
    target = f"{parts[0]}.{parts[-1]}"
  return pattern.format(name=target)


def resolve(app, env, node, contnode):
  """`missing-reference`: a Python reference to an external project's name, as a plain link."""
  del app, env
  if node.get("refdomain") != "py":
    return None
  url = external_url(node.get("reftarget", ""))
  if url is None:
    return None
  from docutils import nodes  # pylint: disable=g-import-not-at-top  (the build's; external_url needs none)
  reference = nodes.reference("", "", internal=False, refuri=url,
                              reftitle=f"{node['reftarget']} (external documentation)")
  reference += contnode
  return reference


def setup(app):
  app.connect("missing-reference", resolve)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
