"""docs/check_notes.py: a page with a note on how the work was done fails the check, a reader's page
passes it, and so does the built site when there is one."""

import importlib.util
import pathlib

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
BUILD = DOCS / "_build" / "html"


@pytest.fixture(scope="module")
def check_notes():
  path = DOCS / "check_notes.py"
  if not path.exists():
    pytest.skip("a copy of tests/ without docs/")
  spec = importlib.util.spec_from_file_location("docs_check_notes", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _page(body: str, head: str = "") -> str:
  return f"<!DOCTYPE html><html><head>{head}</head><body><article>{body}</article></body></html>"


# What a reader's page may say, close to each kind of note.
CLEAN = _page(
    "<h1>Benchmarks</h1>"
    "<p>Measured on one NVIDIA H200 (2026-12-04) and on a 2-core AMD EPYC CPU.</p>"
    "<p>Known issues: a padding row raises eagerly; see "
    '<a href="https://github.com/jax-ml/jax/issues/12345">JAX issue tracker</a>.</p>'
    "<p>Zhu et al., Journal of Things, Vol. 12, Issue 3, 2026.</p>"
    "<p>A training session of 200 epochs; paste it into a shell session; "
    "<code>tf.compat.v1.Session</code>.</p>"
    "<p>The authors' figures are not re-measured here; excellent agreement.</p>"
    "<p>Pass <code>--config.data_dir=DATA</code>, a folder in the <code>cifar10_jpeg</code> "
    "layout.</p>",
    head="<script>var note = 'issue 17, ../shared/data, this session';</script>"
         "<style>/* issue 3 */</style>")

# One page per kind of note, each as the site carried it.
NOTES = {
    "issue number": _page("<h2>Seeds as a batch axis (issue 49.7)</h2>"),
    "working path": _page("<pre>--config.data_dir=../shared/data/cifar10_jpeg</pre>"),
    "session": _page("<p>That was not measured this session.</p>"),
    "machine availability": _page("<p>The step rate was not measured (no GPU was available "
                                  "for it).</p>"),
    "who quoted": _page("<p>The authors' figures, quoted to us twice.</p>"),
}


def _site(folder: pathlib.Path, pages: dict[str, str]) -> pathlib.Path:
  for name, text in pages.items():
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
  return folder


def test_a_readers_page_passes(check_notes, tmp_path, capsys):
  site = _site(tmp_path, {"index.html": CLEAN, "guides/harness.html": CLEAN})
  assert check_notes.find_notes(site) == []
  assert check_notes.main([str(site)]) == 0
  assert "0 note(s)" in capsys.readouterr().out


@pytest.mark.parametrize("kind", list(NOTES))
def test_each_kind_of_note_fails_the_check(check_notes, tmp_path, capsys, kind):
  site = _site(tmp_path, {"index.html": CLEAN, f"_generated/{kind.replace(' ', '_')}.html":
                          NOTES[kind]})
  findings = check_notes.find_notes(site)
  assert [(f.path.as_posix(), f.kind) for f in findings] == [
      (f"_generated/{kind.replace(' ', '_')}.html", kind)]
  assert check_notes.main([str(site)]) == 1
  out = capsys.readouterr().out
  assert f"_generated/{kind.replace(' ', '_')}.html: {kind}: " in out


@pytest.mark.parametrize("text", [
    "as quoted in issues 7 and 16", "Issue 14's study", "the issue-7 sections", "(issue 39.3)", "see issue #12",
    "a session of 2026-11", "resumed across sessions", "no device was lent this session",
    "the GPU is not available", "quoted by a session", "a copy of ../shared/data/mnist",
    "the specs in shared/specs"])
def test_the_notes_the_site_carried_are_found(check_notes, text):
  assert check_notes.notes_in_text(text)


def test_a_link_target_is_read_too(check_notes):
  text = check_notes.page_text(_page('<a href="../shared/data/README.md">the data</a>'))
  assert [kind for kind, _ in check_notes.notes_in_text(text)] == ["working path"]


def test_a_page_left_from_an_earlier_build_is_skipped(check_notes, tmp_path, capsys):
  """Sphinx keeps the page of a document the build no longer has; its searchindex.js names the
  documents that are."""
  site = _site(tmp_path, {"index.html": CLEAN, "_modules/mr2_jax/objective.html": CLEAN,
                          "genindex.html": CLEAN, "old/raw_run.html": NOTES["who quoted"]})
  (site / "searchindex.js").write_text('Search.setIndex({"alltitles":{},"docnames":["index"],'
                                       '"envversion":{}})')
  assert check_notes.site_pages(site) == (
      [site / "_modules/mr2_jax/objective.html", site / "genindex.html", site / "index.html"],
      [site / "old/raw_run.html"])
  assert check_notes.main([str(site)]) == 0
  assert "(1 pages left from earlier builds skipped)" in capsys.readouterr().out
  # A document of the build with a note still fails.
  (site / "searchindex.js").write_text('Search.setIndex({"docnames":["index","old/raw_run"]})')
  assert check_notes.main([str(site)]) == 1


def test_an_empty_folder_is_an_error(check_notes, tmp_path):
  assert check_notes.main([str(tmp_path)]) == 2


def test_the_built_site_carries_no_note(check_notes):
  if not BUILD.is_dir():
    pytest.skip("no built site (python -m sphinx -b html docs docs/_build/html)")
  findings = check_notes.find_notes(BUILD)
  assert not findings, ("notes on how the work was done (rebuild the site if it is older than "
                        "the sources):\n" + "\n".join(map(str, findings[:20])))
