"""One page per entry of the harness's loss registry, written from the registry at build time.

Everything on a page is read from the code, so the pages cannot drift from it:
`experiments.methods.registry.REGISTRY` (the entry, a `Method` declared in one module of
`experiments/methods/`: its config sub-trees, state, start, before entry, recipe),
`experiments.methods.registry.CONFIG_TREES` (defaults, ranges and choices), the shipped configs
(which select the entry), and the docstrings of the library functions the entry's step calls
(found in the code objects of its `loss`), whose summary, equation and argument descriptions are
quoted.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import types

from sphinx.util import logging

logger = logging.getLogger(__name__)

_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_SPEC = re.compile(r"\s*\([^()]*\bspec\b[^()]*\)")


def page_name(loss: str) -> str:
  return loss.replace("+", "_plus_")


def _title(text: str, mark: str = "=") -> str:
  return f"{text}\n{mark * len(text)}\n"


def _indent(text: str, by: str = "   ") -> str:
  return "\n".join(by + line if line.strip() else "" for line in text.splitlines())


METHODS_PACKAGE = "experiments.methods"


def _called_names(fn, seen=None) -> dict[str, None]:
  """Global and attribute names the function (its nested code, closures and the module's helpers
  it calls) refers to, in order of first reference."""
  seen = {} if seen is None else seen
  if not isinstance(fn, types.FunctionType) or id(fn) in seen.get("__ids__", set()):
    return seen
  seen.setdefault("__ids__", set()).add(id(fn))
  codes = [fn.__code__]
  while codes:
    code = codes.pop(0)
    for name in code.co_names:
      seen.setdefault(name, None)
      # The entry's helpers live beside it, in the modules of the methods package.
      helper = fn.__globals__.get(name)
      if (isinstance(helper, types.FunctionType)
          and helper.__module__.rpartition(".")[0] == METHODS_PACKAGE):
        _called_names(helper, seen)
    codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
  for cell in fn.__closure__ or ():
    try:
      _called_names(cell.cell_contents, seen)
    except ValueError:  # an empty cell
      pass
  return seen


def library_functions(entry) -> list[tuple[str, object]]:
  """(qualified name, object) of the public library functions the entry's step calls."""
  import mr2_jax
  import reweight_jax
  names = _called_names(entry.loss)
  found = []
  for name in names:
    if name == "__ids__":
      continue
    for package in (mr2_jax, reweight_jax):
      if name in package.__all__ and package.__name__ in names:
        obj = getattr(package, name)
        if callable(obj) and not inspect.isclass(obj):
          found.append((f"{package.__name__}.{name}", obj))
        break
  return found


def _docstring_parts(obj) -> tuple[str, str, dict[str, str]]:
  """(summary paragraph, first indented equation block, {argument: description})."""
  doc = inspect.getdoc(obj) or ""
  lines = doc.splitlines()
  summary = []
  for line in lines:
    if not line.strip():
      break
    summary.append(line.strip())
  equation, args = [], {}
  section = None
  current = None
  for line in lines[len(summary):]:
    if _SECTION.match(line):
      section = line.strip()[:-1]
      continue
    if section is None:
      if line.startswith("    ") and (not equation or equation[-1] is not None):
        equation.append(line[4:])
      elif equation and line.strip() and not line.startswith("    "):
        equation.append(None)  # the first block ended
    elif section in ("Args", "Arguments"):
      match = re.match(r"^  ([A-Za-z_][\w, ]*):\s*(.*)$", line)
      if match:
        current = [part.strip() for part in match.group(1).split(",")]
        for name in current:
          args[name] = match.group(2)
      elif current and line.startswith("    "):
        for name in current:
          args[name] += " " + line.strip()
      elif line.strip():
        current = None
  if None in equation:
    equation = equation[:equation.index(None)]
  while equation and not equation[-1].strip():
    equation.pop()
  return " ".join(summary), "\n".join(equation), args


def _field_comments(defaults_fn) -> dict[str, str]:
  """The comment on the line of each field in a `ConfigTree`'s defaults (``field=value,  # …``)."""
  comments = {}
  try:
    source = inspect.getsource(defaults_fn)
  except (OSError, TypeError):
    return comments
  for line in source.splitlines():
    for match in re.finditer(r"(\w+)=[^#]*#\s*(.+)$", line):
      comments[match.group(1)] = _SPEC.sub("", match.group(2)).strip()
  return comments


def _range_text(low, high) -> str:
  def value(x):
    return "∞" if x == float("inf") else f"{x:g}"
  return f"{'[' if low[1] else '('}{value(low[0])}, {value(high[0])}{']' if high[1] else ')'}"


def _shipped_configs(root: pathlib.Path) -> dict[str, object]:
  configs = {}
  for path in sorted((root / "experiments" / "configs").glob("*.py")):
    if path.stem == "__init__":
      continue
    module = importlib.import_module(f"experiments.configs.{path.stem}")
    if not hasattr(module, "get_config") or inspect.signature(module.get_config).parameters:
      continue  # the check (schema.py), or a config that takes an argument
    configs[path.stem] = module.get_config()
  return configs


def _summary_line(module) -> str:
  doc = inspect.getdoc(module) or ""
  first = doc.split("\n\n")[0].replace("\n", " ")
  return _SPEC.sub("", first)


def declared_in(registry) -> dict[str, list[str]]:
  """Entry name → the files of `experiments/methods/` that declare it (a wrapped entry: the
  method's and the wrapper's)."""
  modules = registry.method_modules()
  path = {m: f"experiments/methods/{m.__name__.rpartition('.')[2]}.py" for m in modules}
  own = {method.name: path[m] for m in modules for method in getattr(m, "METHODS", ())}
  wrappers = [(m.WRAPPER, path[m]) for m in modules if hasattr(m, "WRAPPER")]
  files = {}
  for name, entry in registry.REGISTRY.items():
    if name in own:
      files[name] = [own[name]]
    else:
      wrapper, wrapper_file = next((w, f) for w, f in wrappers
                                   if name == w.name_around(entry.before))
      files[name] = [own[entry.before], wrapper_file]
  return files



def public_name(function) -> str:
  """The shortest public path of a library function: the first package on its module's path that
  exports it (`reweight_jax.init_reweight_state`, `reweight_jax.baselines.init_group_dro_q`)."""
  parts = function.__module__.split(".")
  for end in range(1, len(parts) + 1):
    package = ".".join(parts[:end])
    if getattr(importlib.import_module(package), function.__name__, None) is function:
      return f"{package}.{function.__name__}"
  return f"{function.__module__}.{function.__name__}"


def entry_page(name, entry, registry, defaults, configs, files) -> str:
  out = [_title(f"``{name}``")]
  wrapped = len(files) > 1
  out.append(f"Train with ``--config.loss={name}`` (the entry ``experiments.methods.registry.REGISTRY"
             f"[{name!r}]``, declared in ``{files[0]}``"
             + (f", wrapped by ``{files[1]}``" if wrapped else "")
             + "). Generated from the registry at build time.\n")
  own = inspect.getdoc(entry.loss)
  functions = library_functions(entry)
  out.append(_title("What a step computes", "-"))
  if own:
    out.append(_SPEC.sub("", own) + "\n")
  if functions:
    out.append("The step calls these library functions (their pages have the shapes, gradient "
               "semantics and examples):\n")
    for qualified, obj in functions:
      summary, equation, _ = _docstring_parts(obj)
      out.append(f"* :func:`{qualified}` — {_SPEC.sub('', summary)}")
      if equation:
        out.append("\n  ::\n\n" + _indent(equation, "    ") + "\n")
    out.append("")
  out.append("Every entry returns this device's share of the global-batch loss: ``lax.pmean`` of "
             "the shares, and of their gradients, is the value on the concatenated batch.\n")

  out.append(_title("Configuration", "-"))
  if entry.reads:
    arg_docs = {}
    for _, obj in functions:
      for arg, text in _docstring_parts(obj)[2].items():
        arg_docs.setdefault(arg, text)
    for key in entry.reads:
      tree = registry.CONFIG_TREES[key]
      ranges = {field: _range_text(low, high) for field, low, high in tree.ranges}
      choices = {field: " / ".join(f"``{c!r}``" for c in values) for field, values in tree.choices}
      out.append(f"Sub-tree ``config.{key}`` (defaults, ranges and choices declared with the "
                 "method, checked before a run writes anything; a config sets the fields it "
                 "changes, and a run's config.json holds the sub-trees of the methods it trains):"
                 "\n")
      out.append(".. list-table::\n   :header-rows: 1\n   :widths: 22 14 20 44\n")
      out.append("   * - field\n     - default\n     - allowed\n     - library argument")
      comments = _field_comments(tree.defaults)
      for field in tree.defaults():
        value = defaults[key][field]
        allowed = ranges.get(field) or choices.get(field) or (
            "``True`` / ``False``" if isinstance(value, bool) else "")
        shown = "unset (``None``)" if value is None else f"``{value!r}``"
        doc = (arg_docs.get(field) or comments.get(field, "")).replace("|", r"\|")
        if re.match(r"^(\w{1,4}|#)[.)](\s|$)", doc):  # not an enumerated list in the cell
          doc = "\\" + doc
        out.append(f"   * - ``{key}.{field}``\n     - {shown}\n     - {allowed}\n     - {doc}")
      out.append("")
  else:
    out.append("No hyper-parameters of its own.\n")
  if entry.check is not None:
    out.append(f"Extra check before the run (``{entry.check.__name__}``; it raises a "
               "one-line ``ConfigError`` naming the field):\n")
    out.append(".. code-block:: python\n\n" + _indent(inspect.getsource(entry.check)) + "\n")

  out.append(_title("Start", "-"))
  if entry.start is None:
    out.append("Active from the first step.\n")
  else:
    key, field = entry.start.split(".")
    out.append(
        f"Deferred: until the epoch in ``config.{entry.start}`` (default "
        f"``{defaults[key][field]!r}``; 0 starts it with the first step) the step trains as the ``{entry.before}`` entry — only "
        f"that entry's state updates, this entry's state stays as initialised — and from it on as "
        f"``{name}``. The two are one ``lax.cond``: a step computes one of them, never both. "
        f"``--config.init_from=<workdir of the {entry.before} run>:<epoch>`` starts the run from "
        f"that run's checkpoint at the end of ``epoch``, bit for bit the epochs it would train "
        f"itself, and ``experiments.compare`` does so by itself for a method compared with its "
        f"reference.\n")
  out.append(_title("State", "-"))
  inits = {**entry.state}
  if entry.start is not None:
    inits.update(registry.get(entry.before).state)
  fields = list(inits) + [f for f in entry.example_state if f not in inits]
  if not fields:
    out.append("No loss state: the entry is a function of the batch (and the training-set class "
               "counts).\n")
  else:
    out.append("Carried in the train state (checkpointed, reduced across devices like the "
               "parameters):\n")
    for field in fields:
      if field in inits:
        init = inits[field]
        out.append(f"* ``{field}``: :func:`{public_name(init)}` "
                   f"(K classes) — {_docstring_parts(init)[0]}")
      else:
        out.append(f"* ``{field}``: per-example state of the N training examples, made from the "
                   "training labels.")
    out.append("")
  hooks = []
  recipe = entry.recipe
  if recipe.model is not None:
    hooks.append(f"model wrapper ``{recipe.model.__name__}``: "
                 + _docstring_parts(recipe.model)[0] + " The loss reads its outputs from "
                 "``StepInfo.recipe.outputs``; the base model's parameters stay in place")
  if recipe.views != 1:
    hooks.append(f"{recipe.views} augmented views per example, view-major, labels repeated")
  if recipe.indices:
    hooks.append("the rows' training-set positions (``StepInfo.recipe.indices``)")
  if recipe.sampler is not None:
    sampler = recipe.sampler
    hooks.append(f"per-epoch sampler ``{sampler.__module__}.{sampler.__name__}``: "
                 + (inspect.getdoc(sampler) or "the dataset positions an epoch draws"))
  if recipe.epoch_end is not None:
    hooks.append(f"epoch-end pass ``{recipe.epoch_end.__name__}`` over the training set (eval "
                 "mode, no augmentation): " + (inspect.getdoc(recipe.epoch_end) or ""))
  if registry.takes_mixup(name):
    hooks.append("takes mixup batches (``config.mixup_alpha`` > 0): one λ and one permutation of "
                 "the global batch per step, the loss against both labels "
                 "(``StepInfo.recipe.mix``)")
  if recipe.pair is not None:
    hooks.append(f"paired batches ``{recipe.pair.__name__}``: each row's partner, the step's λ and "
                 f"CutMix box, drawn on the host, mixed on the device by ``{recipe.mix.__name__}`` "
                 "(``StepInfo.recipe.mix``)")
  if entry.per_example is not None:
    for wrapper in registry.WRAPPERS.values():
      wrapped = wrapper.name_around(name)
      hooks.append(f"a per-example loss (``{entry.per_example.__name__}``), which "
                   f"``{wrapper.name}`` wraps: :doc:`{wrapped} <{page_name(wrapped)}>`")
  if hooks:
    out.append(_title("What the trainer provides (its recipe, declared with the method)", "-"))
    out += [f"* {' '.join(h.split())}" for h in hooks]
    out.append("")
  using = [stem for stem, config in configs.items() if config.loss == name]
  if using:
    out.append(_title("Shipped configs that train it", "-"))
    for stem in using:
      module = importlib.import_module(f"experiments.configs.{stem}")
      out.append(f"* ``experiments/configs/{stem}.py`` — {_summary_line(module)}")
    out.append("")
  return "\n".join(out)


def write_pages(app):
  root = pathlib.Path(app.confdir).parent
  registry = importlib.import_module("experiments.methods.registry")
  defaults = {key: registry.method_tree(key).to_dict() for key in registry.CONFIG_TREES}
  configs = _shipped_configs(root)
  out_dir = pathlib.Path(app.confdir) / "_generated" / "losses"
  out_dir.mkdir(parents=True, exist_ok=True)
  index = [_title("The loss registry"),
           "Every training objective of the harness is one entry of ``experiments.methods."
           "registry.REGISTRY``, chosen with ``--config.loss=<name>``, and every entry is a method declared "
           "in one module of ``experiments/methods/`` (``<method>+inverse_reweight``: the inverse "
           "reweighting, ``experiments/methods/inverse_reweight.py``, around a method with a "
           "per-example loss). Each entry has one signature once built from a config, "
           "``loss_fn(logits, features, labels, loss_state, step_info) → (loss, new_loss_state, "
           "metrics)``, its own config sub-trees, explicit start semantics and the state it "
           "carries. These pages are generated from the registry at build time.\n",
           ".. list-table::\n   :header-rows: 1\n   :widths: 22 22 18 14 10 14\n",
           "   * - entry\n     - declared in\n     - config sub-trees\n     - start\n"
           "     - before\n     - state"]
  pages = []
  files = declared_in(registry)
  for name, entry in registry.REGISTRY.items():
    page = page_name(name)
    text = entry_page(name, entry, registry, defaults, configs, files[name])
    path = out_dir / f"{page}.rst"
    if not path.exists() or path.read_text() != text:
      path.write_text(text)
    pages.append(page)
    index.append(f"   * - :doc:`{name} <{page}>`\n     - "
                 f"{' + '.join(f'``{f.rpartition(chr(47))[2]}``' for f in files[name])}\n     - "
                 f"{', '.join(entry.reads) or '–'}\n     - "
                 f"{'``' + entry.start + '``' if entry.start else 'first step'}\n     - "
                 f"{entry.before if entry.start else '–'}\n     - "
                 f"{', '.join([*entry.state, *entry.example_state]) or '–'}")
  index.append("\n.. toctree::\n   :hidden:\n\n" + "\n".join(f"   {p}" for p in pages) + "\n")
  text = "\n".join(index)
  path = out_dir / "index.rst"
  if not path.exists() or path.read_text() != text:
    path.write_text(text)
  for stale in out_dir.glob("*.rst"):
    if stale.stem not in pages and stale.stem != "index":
      stale.unlink()
  logger.info(f"loss registry: {len(pages)} entry pages")
  write_configs_page(app, configs)


def write_configs_page(app, configs):
  """docs/_generated/configs.rst: every shipped config with what it sets, from the configs."""
  lines = [_title("Shipped configs"),
           "Every file in ``experiments/configs/`` but the check (``schema.py``) returns an "
           "``ml_collections.ConfigDict`` from ``get_config()``: ``default.get_config()`` (the "
           "shared fields, each with its default and documentation), its family's data block or "
           "the config it varies, and the fields it sets, with those of the sub-trees of the "
           "methods its runs train; override any field with ``--config.<field>=...`` (a method's "
           "too, ``--config.mr2.lam=0``). A config on ``cifar10_jpeg`` or ``mnist`` reads ``--config.data_dir=DATA``, a folder holding ``train.npz`` and "
           "``test.npz`` laid out as the :doc:`harness guide </guides/harness>` describes "
           "(\"Data\"). Generated from the configs at build time.\n",
           ".. list-table::\n   :header-rows: 1\n   :widths: 18 12 12 10 6 42\n",
           "   * - config\n     - dataset\n     - model / head\n     - loss\n     - epochs\n"
           "     - what it is"]
  for stem, config in configs.items():
    module = importlib.import_module(f"experiments.configs.{stem}")
    lines.append(f"   * - ``{stem}.py``\n     - ``{config.dataset}``\n     - {config.model} / "
                 f"{config.head}\n     - :doc:`{config.loss} <losses/{page_name(config.loss)}>`"
                 f"\n     - {config.num_epochs}\n     - {_summary_line(module)}")
  text = "\n".join(lines) + "\n"
  path = pathlib.Path(app.confdir) / "_generated" / "configs.rst"
  if not path.exists() or path.read_text() != text:
    path.write_text(text)


def setup(app):
  app.connect("builder-inited", write_pages)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
