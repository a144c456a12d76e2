"""Checks that no page of the built site carries a note on how the work was done.

    python docs/check_notes.py [docs/_build/html]

A reader's page says what was run, on which hardware, with which command, and what came of it. It
does not say which tracker issue asked for it, whether a machine was lent, which working session
did it, who passed a figure on, or where the files lay on the machine that made it. This reads the
visible text of every `.html` under the build folder (not its scripts and styles; link targets,
image sources, `alt` and `title` too) and reports, one line per finding with the page and the text
around the match:

* `issue number`: "issue 17", "(issue 39.3)", "Issue 49.7", "issues 7 and 16", "issue #12",
  "the issue-7 sections". A link to a GitHub issue (`…/issues/12`) and "issues" without a number
  are not findings; neither is a journal's "Vol. 3, Issue 2" (the one exemption: a citation's
  issue follows its volume).
* `working path`: `../shared` and `shared/data`, `shared/specs`: folders beside the checkout that a
  reader does not have.
* `session`: "this session", "across sessions", "a session of 2026-11". A "training session", a
  "shell session" or an `x.Session` class is not one.
* `machine availability`: "lent", "no device was available", "the GPU is not available". Naming
  the hardware a number was measured on is not a finding.
* `who quoted`: "quoted to us", "quoted by …", "as quoted in issues …".

Sphinx leaves the page of a document that a later build no longer has (a raw benchmark file taken
out of the site, say) in the build folder. When the folder has a `searchindex.js`, the pages
checked are those of its documents and the pages Sphinx writes besides them (`_modules/`, the
indexes, search); a page left from an earlier build is counted and skipped.

It exits with 1 if there is any finding, 0 otherwise. `tests/docs/test_check_notes.py` shows each
kind failing on a constructed page, and CI runs it on the site right after the build.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import pathlib
import re
import sys
from typing import NamedTuple

_MACHINE = r"(?:accelerators?|GPUs?|TPUs?|devices?|machines?|H100s?|H200s?)"

# (kind, pattern). Case-insensitive; the text is whitespace-collapsed first, so a match may span a
# line break of the source.
PATTERNS = (
    ("issue number", re.compile(r"\bissues?[\s-]+(?:#\s*)?\d+(?:\.\d+)?\b", re.IGNORECASE)),
    ("working path", re.compile(r"\.\./shared\b|\bshared/(?:data|specs)\b")),
    ("session", re.compile(
        r"(?<![.\w])(?<!training )(?<!shell )(?<!interactive )(?<!python )(?<!ipython )"
        r"(?<!terminal )(?<!notebook )sessions?\b", re.IGNORECASE)),
    ("machine availability", re.compile(
        r"\blent\b"
        rf"|\b(?:no|not an?|without an?)\s+{_MACHINE}\s+(?:was|were|is|are)\s+(?:available|free)\b"
        rf"|\b{_MACHINE}\s+(?:was|were|is|are)\s+(?:not\s+|un)available\b",
        re.IGNORECASE)),
    ("who quoted", re.compile(r"\bquoted\s+(?:to\s+us|by|in\s+(?:the\s+)?issues?)\b",
                              re.IGNORECASE)),
)

# A journal citation's issue ("Vol. 12, Issue 3", "volume 12, issue 3"): the text just before the
# match names a volume.
_VOLUME_BEFORE = re.compile(r"\bvol(?:ume|\.)?\s*\d+\s*[,(]?\s*$", re.IGNORECASE)

# Attributes whose values a reader sees (on hover, when an image fails) or follows.
_READ_ATTRIBUTES = ("href", "src", "alt", "title")


class Finding(NamedTuple):
  path: pathlib.Path
  kind: str
  context: str

  def __str__(self) -> str:
    return f"{self.path}: {self.kind}: …{self.context}…"


class _Text(html.parser.HTMLParser):
  """The page's text outside <script> and <style>, and the read attributes' values."""

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.parts: list[str] = []
    self._hidden = 0

  def handle_starttag(self, tag, attrs):
    if tag in ("script", "style"):
      self._hidden += 1
    self.parts += [value for name, value in attrs if name in _READ_ATTRIBUTES and value]

  def handle_endtag(self, tag):
    if tag in ("script", "style") and self._hidden:
      self._hidden -= 1

  def handle_data(self, data):
    if not self._hidden:
      self.parts.append(data)


def page_text(page_html: str) -> str:
  """What a reader of the page can read, whitespace collapsed."""
  parser = _Text()
  parser.feed(page_html)
  parser.close()
  return " ".join(" ".join(parser.parts).split())


def notes_in_text(text: str) -> list[tuple[str, str]]:
  """(kind, the match with 60 characters either side) of every note in `text`."""
  found = []
  for kind, pattern in PATTERNS:
    for match in pattern.finditer(text):
      if kind == "issue number" and _VOLUME_BEFORE.search(text[max(0, match.start() - 24):
                                                               match.start()]):
        continue
      found.append((kind, text[max(0, match.start() - 60):match.end() + 60]))
  return found


# Pages Sphinx writes that are no document's.
_BUILD_PAGES = ("genindex", "search", "py-modindex")


def site_pages(build: pathlib.Path) -> tuple[list[pathlib.Path], list[pathlib.Path]]:
  """(the build's pages, the pages left from earlier builds): every `.html` under `build`, split
  by the documents its `searchindex.js` names; all of them are the build's without one."""
  pages = sorted(build.rglob("*.html"))
  index = build / "searchindex.js"
  found = re.search(r'"docnames":\s*(\[[^\]]*\])', index.read_text()) if index.is_file() else None
  if found is None:
    return pages, []
  docnames = set(json.loads(found.group(1)))

  def current(page):
    name = page.relative_to(build).with_suffix("").as_posix()
    return name in docnames or name in _BUILD_PAGES or name.startswith("_modules/")
  return [p for p in pages if current(p)], [p for p in pages if not current(p)]


def find_notes(build: pathlib.Path) -> list[Finding]:
  """Every note on every page of the build under `build`, by page (path relative to `build`)."""
  return [Finding(page.relative_to(build), kind, context)
          for page in site_pages(build)[0]
          for kind, context in notes_in_text(page_text(page.read_text(errors="replace")))]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("build", nargs="?", default="docs/_build/html", type=pathlib.Path)
  args = parser.parse_args(argv)
  pages, left = site_pages(args.build)
  if not pages:
    print(f"{args.build}: no .html pages (build the site first)", file=sys.stderr)
    return 2
  findings = find_notes(args.build)
  for finding in findings:
    print(finding)
  skipped = f" ({len(left)} pages left from earlier builds skipped)" if left else ""
  print(f"{len(findings)} note(s) on how the work was done in {len(pages)} pages of "
        f"{args.build}{skipped}")
  return 1 if findings else 0


if __name__ == "__main__":
  sys.exit(main())
