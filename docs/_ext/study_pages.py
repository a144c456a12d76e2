"""Copies the results and benchmark reports into the site at build time, with their plots.

The studies' Markdown reports (`experiments/studies/results/**/*.md`, `experiments/benchmarks/RESULTS.md`)
stay where the runs write them; each build copies them to docs/_generated/ (their PNG plots beside
them) and adds a toctree over them, so the site shows what the repository holds and never a copy
that drifts. A link to a file the site does not copy (per-run JSON, configs, scripts) becomes a link
to that file in the repository (`repository_url` in conf.py); a link to a study's folder goes to its
README or report.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil

from sphinx.util import logging

logger = logging.getLogger(__name__)

# (source folder, destination under _generated, title of its index page).
SOURCES = (("experiments/studies/results", "results", "Results on real data"),
           ("experiments/benchmarks", "benchmarks", "Benchmarks"))
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def _skip(path: pathlib.Path, source: pathlib.Path) -> bool:
  return "runs" in path.relative_to(source).parts


def _rewrite(text: str, page: pathlib.Path, source: pathlib.Path, root: pathlib.Path,
             copied: set[pathlib.Path], url: str) -> str:
  def replace(match):
    target = match.group(2)
    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
      return match.group(0)
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve()
    if resolved.is_dir():
      for name in ("README.md", "report.md"):
        if resolved / name in copied:
          relative = os.path.relpath(resolved / name, page.parent.resolve())
          return f"{match.group(1)}{pathlib.PurePath(relative).as_posix()}{match.group(3)}"
    if resolved in copied:
      return match.group(0)
    try:
      in_repo = resolved.relative_to(root)
    except ValueError:  # outside the checkout (../shared): left as text
      return match.group(2).join(("`", "`"))
    kind = "tree" if resolved.is_dir() or path_part.endswith("/") else "blob"
    link = f"{url.rsplit('/blob/', 1)[0]}/{kind}/main/{in_repo.as_posix()}"
    return f"{match.group(1)}{link}{'#' + anchor if anchor else ''}{match.group(3)}"
  return _LINK.sub(replace, text)


def copy_pages(app):
  docs = pathlib.Path(app.confdir)
  root = docs.parent
  url = app.config.repository_url
  for source_name, destination_name, title in SOURCES:
    source = root / source_name
    destination = docs / "_generated" / destination_name
    pages = sorted(p for p in source.rglob("*.md") if not _skip(p, source))
    images = sorted(p for p in source.rglob("*.png") if not _skip(p, source))
    copied = {p.resolve() for p in pages + images}
    for image in images:
      target = destination / image.relative_to(source)
      target.parent.mkdir(parents=True, exist_ok=True)
      if not target.exists() or target.stat().st_mtime < image.stat().st_mtime:
        shutil.copy2(image, target)
    names = []
    for page in pages:
      target = destination / page.relative_to(source)
      target.parent.mkdir(parents=True, exist_ok=True)
      text = _rewrite(page.read_text(), page, source, root, copied, url)
      if not re.search(r"^# ", text, re.MULTILINE):
        # A report written without a title (report.md, sweep.md): its path is its title.
        text = f"# {source_name}/{page.relative_to(source).as_posix()}\n\n{text}"
      if not target.exists() or target.read_text() != text:
        target.write_text(text)
      names.append(page.relative_to(source).with_suffix("").as_posix())
    main = [n for n in names if n in ("README", "RESULTS")]
    rest = [n for n in names if n not in main]
    index = (f"# {title}\n\nCopied from `{source_name}/` at build time.\n\n"
             "```{toctree}\n:maxdepth: 1\n\n" + "\n".join(main + rest) + "\n```\n")
    index_path = destination / "index.md"
    if not index_path.exists() or index_path.read_text() != index:
      index_path.write_text(index)
    logger.info(f"study pages: {len(pages)} pages and {len(images)} plots from {source_name}")


def diagnose_example(app):
  """docs/_generated/diagnose: `experiments.diagnose` run on a small synthetic feature file (six
  classes whose within-class spread grows with the class index), so the guide shows the real
  report and plots. Rerun only when a diagnosis module is newer than the report."""
  docs = pathlib.Path(app.confdir)
  root = docs.parent
  out = docs / "_generated" / "diagnose"
  report = out / "report.md"
  sources = [root / "experiments" / "diagnose.py", *(root / "experiments" / "report").glob("diagnosis*.py")]
  if report.exists() and report.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
    return
  import subprocess
  import sys

  import numpy as np
  out.mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(0)
  num_classes, dim, per_class = 6, 8, 60
  means = 3.0 * rng.normal(size=(num_classes, dim))
  spread = np.linspace(0.5, 2.5, num_classes)
  labels = np.repeat(np.arange(num_classes), per_class)
  features = means[labels] + spread[labels, None] * rng.normal(size=(labels.size, dim))
  classifier = means / np.linalg.norm(means, axis=1, keepdims=True)
  features_file = out / "synthetic_features.npz"
  np.savez(features_file, features=features.astype(np.float32), labels=labels,
           classifier=classifier.astype(np.float32))
  env = dict(os.environ, MPLBACKEND="Agg", JAX_PLATFORMS="cpu")
  run = subprocess.run([sys.executable, "-m", "experiments.diagnose", "--features",
                        str(features_file), "--out", str(out)], cwd=root, env=env,
                       capture_output=True, text=True, check=False)
  if run.returncode != 0:
    logger.warning(f"experiments.diagnose failed on the synthetic features:\n{run.stderr[-2000:]}")
    return
  # The harness's wording cites its working notes; the page cites the paper.
  report.write_text(re.sub(r"\s*\(MR2 spec, [^)]*\)", " (Zhu et al., ICLR 2026, arXiv 2602.00205)",
                           report.read_text()))
  logger.info("diagnose: example report written")


def setup(app):
  app.connect("builder-inited", diagnose_example)
  app.add_config_value("repository_url", "", "env")
  app.connect("builder-inited", copy_pages)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
