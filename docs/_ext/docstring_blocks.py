"""Reads the libraries' docstrings, written for `help()` and the source, as reStructuredText.

Equations are LaTeX: a display equation is a `.. math::` directive whose indented body is the
formula (one equation, a `\\begin{aligned}` block, or several separated by blank lines), or
`.. math:: formula` on one line, continued on indented lines below (one formula here, where docutils
would make the first line a formula of its own); an inline one is a `:math:` role. MathJax renders
both. Before napoleon parses the Google sections,

* a `.. math::` directive and its indented body (or a code or doctest directive's, or a literal
  block the docstring marks with `::`) pass through as written, with the blank lines around them
  that reStructuredText needs where the docstring has none;
* every other block indented by 4 or more outside a section (a code sample, an aligned table of
  names, a formula not written as maths) becomes a literal block, so it keeps its alignment and is
  never read as a definition list or a block quote; the lines of a list item, aligned with its
  text, stay text however deep the list is indented;
* a `|` outside code, `:math:` and those directives is escaped: it is an absolute value or a
  divider, not a substitution reference.

A `:math:` role must not be broken across lines (the escaping is done line by line).
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
# `.. math:: formula` written on the directive's line (its argument).
_MATH_ARGUMENT = re.compile(r"^(\s*)\.\. math::[ \t]+(\S.*)$")
# A bullet or enumerated list item; its text starts at the match's end.
_LIST_ITEM = re.compile(r"^\s*(?:[*+-]|\d+[.)]|#[.)])\s+(?=\S)")


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
  item_text = None  # the column of the current list item's text, where its next lines continue
  i = 0
  while i < len(lines):
    line = lines[i]
    stripped = line.strip()
    if _SECTION.match(line):
      in_section = True
      out.append(line)
      i += 1
      continue
    if in_section and stripped and _indent(line) == 0:
      in_section = False
    directive = _VERBATIM.match(stripped)
    marked = (not in_section and not directive and stripped.endswith("::")
              and not stripped.startswith(".. "))
    if directive or marked:
      # `.. math::` and its indented body, as written (a `|` there is an absolute value, a `\\`
      # a line break): a directive needs a blank line after the paragraph it follows. The body of a
      # literal block the docstring marks itself (`...::`) is passed on as written too.
      indent = _indent(line)
      if directive and out and out[-1].strip():
        out.append("")
      end = i + 1
      while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
      body = lines[i + 1:end]
      argument = _MATH_ARGUMENT.match(line)
      if argument and body and body[0].strip() and not body[0].strip().startswith(":"):
        # `.. math:: first line` continued on the lines below: one formula, which docutils would
        # read as an argument (the first line) and a second formula (the rest).
        deeper = min(_indent(x) for x in body if x.strip())
        out.extend([argument.group(1) + ".. math::", "", " " * deeper + argument.group(2)])
      else:
        out.append(line if directive else _escape_bars(line))
        if body and body[0].strip() and not body[0].strip().startswith(":"):
          out.append("")  # a directive's content, or a literal block, starts after a blank line
      out.extend(body)
      i = end
      if i < len(lines) and lines[i].strip() and out[-1].strip():
        out.append("")  # and the text after it starts after one too
      continue
    if stripped.startswith(">>>"):
      in_doctest = True
    elif not stripped:
      in_doctest = False
    if in_doctest:
      out.append(line)
      i += 1
      continue
    item = _LIST_ITEM.match(line)
    if not in_section and (item or (item_text is not None and stripped
                                    and _indent(line) == item_text)):
      # A list item, or a line continuing its text: text, however deep the list is indented.
      if item:
        item_text = item.end()
      out.append(_escape_bars(line))
      i += 1
      continue
    item_text = None
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
