"""Checks that nothing on the built site is cut off in a window 1280 px wide.

    python docs/check_layout.py [docs/_build/html] [--width 1280] [--chromium PATH] [--wrapped]

Opens every page of the build in headless Chromium (Debian's `chromium-headless-shell` or
`chromium`; no Python package), driven over the DevTools protocol on a pipe, at the given viewport
width. On each page, once the fonts are loaded and MathJax has typeset, it reports

* the page scrolling sideways (the document wider than the window);
* in the article and the two sidebars: any element whose content is wider than its box (a code
  block, a table, an equation, an image, a contents entry that needs a horizontal scroll bar or is
  clipped), with its first characters;
* there too, any element that reaches past the window's right edge;
* a formula that MathJax could not typeset;
* anything the page asked for from the network (a font, a script, a style sheet from a CDN): the
  site must render offline.

It prints one line per finding and exits with 1 if there is any. Nothing is fetched: the pages are
read from the build folder (file:// URLs). Code wraps its long lines on purpose (docs/_static/
mr2.css), so a long line is not a finding; `--wrapped` lists the code blocks that wrap one.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

# Runs in the page: the findings as a list of strings.
MEASURE = r"""
(async () => {
  await document.fonts.ready;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    found.push(`page scrolls sideways: ${root.scrollWidth} px wide for ${root.clientWidth}`);
  }
  for (const error of document.querySelectorAll('mjx-merror')) {
    found.push(`MathJax could not typeset: ${error.getAttribute('data-mjx-error') || error.textContent}`);
  }
  const width = root.clientWidth;
  const label = el => {
    const text = (el.innerText || el.getAttribute('alt') || el.getAttribute('src') || '')
      .trim().split('\n').find(l => l.trim()) || '';
    return `<${el.tagName.toLowerCase()}${el.className ? '.' + String(el.className).split(' ')[0] : ''}> `
      + JSON.stringify(text.slice(0, 70));
  };
  const reported = new Set();
  const parts = document.querySelectorAll('article, .bd-sidebar-primary, .bd-sidebar-secondary');
  for (const el of [...parts].flatMap(part => [part, ...part.querySelectorAll('*')])) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if ([...reported].some(r => r.contains(el))) continue;
    const style = getComputedStyle(el);
    const clips = ['auto', 'scroll', 'hidden', 'clip'].includes(style.overflowX);
    if (clips && el.scrollWidth > el.clientWidth + 1) {
      found.push(`cut off (${el.scrollWidth} px of content in ${el.clientWidth}): ${label(el)}`);
      reported.add(el);
    } else if (box.right > width + 1) {
      found.push(`past the window's edge (right at ${Math.round(box.right)} px): ${label(el)}`);
      reported.add(el);
    }
  }
  return found;
})()
"""

# Runs in the page after MEASURE: the code blocks that wrap a line (not a finding: the site's CSS
# wraps long lines on purpose, so that none is cut off), as "<lines> lines shown in <rows> rows".
WRAPPED = r"""
(() => [...document.querySelectorAll('article pre')].flatMap(pre => {
  const style = getComputedStyle(pre);
  const rows = Math.round((pre.clientHeight - parseFloat(style.paddingTop)
                           - parseFloat(style.paddingBottom)) / parseFloat(style.lineHeight));
  const lines = pre.innerText.replace(/\n$/, '').split('\n').length;
  return rows > lines ? [`${lines} lines shown in ${rows} rows: ` +
                         JSON.stringify(pre.innerText.trim().split('\n')[0].slice(0, 60))] : [];
}))()
"""


class DevTools:
  """The DevTools protocol over --remote-debugging-pipe (file descriptors 3 and 4)."""

  def __init__(self, chromium: str, width: int, height: int):
    self._to_browser_r, self._to_browser_w = os.pipe()
    self._from_browser_r, self._from_browser_w = os.pipe()
    self._profile = tempfile.mkdtemp(prefix="check_layout_")
    args = [chromium, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--allow-file-access-from-files", f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}", "about:blank"]

    def fds():
      os.dup2(self._to_browser_r, 3)
      os.dup2(self._from_browser_w, 4)

    self._process = subprocess.Popen(args, preexec_fn=fds, pass_fds=(3, 4),  # noqa: PLW1509
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(self._to_browser_r)
    os.close(self._from_browser_w)
    self._reader = os.fdopen(self._from_browser_r, "rb")
    self._next_id = 0
    self._buffer = b""
    self.requests: list[str] = []  # every URL the page asked for, in order
    target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"]
    self.call("Emulation.setDeviceMetricsOverride",
              {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
              session=True)
    self.call("Network.enable", session=True)

  def _message(self) -> dict:
    while b"\0" not in self._buffer:
      chunk = os.read(self._reader.fileno(), 1 << 16)
      if not chunk:
        raise RuntimeError("Chromium closed the DevTools pipe")
      self._buffer += chunk
    message, self._buffer = self._buffer.split(b"\0", 1)
    return json.loads(message)

  def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
    self._next_id += 1
    message = {"id": self._next_id, "method": method, "params": params or {}}
    if session:
      message["sessionId"] = self._session
    os.write(self._to_browser_w, json.dumps(message).encode() + b"\0")
    while True:
      reply = self._message()
      if reply.get("method") == "Network.requestWillBeSent":
        self.requests.append(reply["params"]["request"]["url"])
      if reply.get("id") == self._next_id:
        if "error" in reply:
          raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

  def evaluate(self, expression: str):
    result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                            "returnByValue": True}, session=True)
    if "exceptionDetails" in result:
      raise RuntimeError(result["exceptionDetails"].get("text", "exception in the page"))
    return result["result"].get("value")

  def open(self, url: str, timeout_s: float = 30.0) -> None:
    self.call("Page.navigate", {"url": url}, session=True)
    deadline = time.monotonic() + timeout_s
    while self.evaluate(f"document.readyState === 'complete' && location.href === {url!r}") is not True:
      if time.monotonic() > deadline:
        raise RuntimeError(f"{url} did not load in {timeout_s} s")
      time.sleep(0.05)

  def close(self) -> None:
    self._process.terminate()
    self._process.wait(timeout=10)
    os.close(self._to_browser_w)
    self._reader.close()
    shutil.rmtree(self._profile, ignore_errors=True)


def find_chromium() -> str | None:
  for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
    if path := shutil.which(name):
      return path
  return None


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("build", nargs="?", default="docs/_build/html", type=pathlib.Path)
  parser.add_argument("--width", type=int, default=1280)
  parser.add_argument("--height", type=int, default=900)
  parser.add_argument("--chromium", default=find_chromium())
  parser.add_argument("--wrapped", action="store_true",
                      help="also list the code blocks that wrap a line (not counted as findings)")
  args = parser.parse_args()
  if args.chromium is None:
    sys.exit("no Chromium found: apt-get install chromium-headless-shell (or pass --chromium)")
  pages = sorted(p for p in args.build.resolve().rglob("*.html")
                 if not {"_static", "_sources", "_modules"} & set(p.relative_to(args.build.resolve()).parts)
                 and p.name not in ("genindex.html", "search.html", "py-modindex.html"))
  browser = DevTools(args.chromium, args.width, args.height)
  findings = 0
  try:
    for page in pages:
      url = page.as_uri()
      browser.requests.clear()
      browser.open(url)
      found = browser.evaluate(MEASURE)
      found += [f"fetched from the network: {request}" for request in browser.requests
                if not request.startswith(("file:", "data:", "blob:", "about:"))]
      for finding in found:
        print(f"{page.relative_to(args.build.resolve())}: {finding}")
        findings += 1
      if args.wrapped:
        for block in browser.evaluate(WRAPPED):
          print(f"{page.relative_to(args.build.resolve())}: (wraps) {block}")
  finally:
    browser.close()
  print(f"{len(pages)} pages at {args.width} px: {findings} findings")
  return 1 if findings else 0


if __name__ == "__main__":
  sys.exit(main())
