"""Reads the libraries' plain-text docstrings as reStructuredText.

The docstrings are written for `help()` and the source: equations are lines indented under the
sentence that introduces them, and `|x|` is an absolute value. Before napoleon parses the Google
sections, every such indented block outside a section becomes a literal block (so it keeps its
alignment, and a formula is never read as a definition list or a block quote), and a `|` outside
code is escaped (it is not a substitution reference). Written maths is left alone: a `:math:` role
is a code span here, and a `.. math::` directive keeps its body as written, rendered by MathJax.
"""

from __future__ import annotations

import re

_SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Example|Examples|Keyword Args|Keyword Arguments|Methods|Note|"
    r"Notes|Other Parameters|Parameters|Raises|References|Return|Returns|See Also|Warning|"
    r"Warnings|Warns|Yield|Yields):\s*$")
_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")
# A directive whose body is maths or code, not text: its lines are passed on untouched.
_VERBATIM = re.compile(r"^\.\. (math|code|code-block|sourcecode|testcode|testoutput|doctest)::")


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip(" "))


def _escape_bars(line: str) -> str:
  parts = _CODE_SPAN.split(line)
  return "".join(part if i % 2 else part.replace("|", r"\|") for i, part in enumerate(parts))


def literal_blocks(lines: list[str]) -> list[str]:
  """`lines` with the indented blocks of the free text as literal blocks (see the module)."""
  out: list[str] = []
  in_section = False
  in_doctest = False
  i = 0
  while i < len(lines):
    line = lines[i]
    stripped = line.strip()
    if _VERBATIM.match(stripped):
      # `.. math::` and its indented body (a `|` there is an absolute value, not a substitution).
      indent = _indent(line)
      out.append(line)
      i += 1
      while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        out.append(lines[i])
        i += 1
      continue
    if _SECTION.match(line):
      in_section = True
      out.append(line)
      i += 1
      continue
    if in_section and stripped and _indent(line) == 0:
      in_section = False
    if stripped.startswith(">>>"):
      in_doctest = True
    elif not stripped:
      in_doctest = False
    if in_doctest:
      out.append(line)
      i += 1
      continue
    if in_section or not stripped or _indent(line) < 4:
      out.append(_escape_bars(line))
      i += 1
      continue
    # A block: this line and the following ones indented ≥ 4, blank lines inside it included.
    end = i
    while end < len(lines):
      if lines[end].strip() and _indent(lines[end]) >= 4:
        end += 1
      elif not lines[end].strip():
        following = next((x for x in lines[end:] if x.strip()), "")
        if following and _indent(following) >= 4:
          end += 1
        else:
          break
      else:
        break
    block = lines[i:end]
    previous = out[-1] if out else ""
    if previous.rstrip().endswith("::"):
      pass
    elif previous.strip() and previous.rstrip().endswith(":"):
      out[-1] = previous.rstrip() + ":"
    else:
      out.append("")
      out.append("::")
    out.append("")
    out.extend(block)
    out.append("")
    i = end
  return out


def _process(app, what, name, obj, options, lines):
  del app, what, name, obj, options
  lines[:] = literal_blocks(lines)


def _skip_field_aliases(app, what, name, obj, skip, options):
  """NamedTuple fields are documented by the class's `Attributes` section, not a second time as
  properties ("Alias for field number 0")."""
  del app, what, name, options
  if (obj.__doc__ or "").startswith("Alias for field number"):
    return True
  return skip


def setup(app):
  app.connect("autodoc-skip-member", _skip_field_aliases)
  # Before napoleon (priority 500), which turns the sections into field lists.
  app.connect("autodoc-process-docstring", _process, priority=400)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
