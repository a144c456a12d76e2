"""Adds `test_class_counts` to committed run summaries written before the trainer recorded it.

    python -m tools.record_test_counts [--results results] [--data_root ../shared/data] [--check]

A paired Δ of a class group is reported in whole test images as well as points
(`experiments.report.claims`), which needs each run's test images per class. Runs trained since
`experiments.train.evaluation.summarize` records them carry them; for the earlier committed runs
(`results/**/runs/<method>-seed<s>.json`) this reads the test split the run's config names
(`config.json`: the folder name of `data_dir`, looked up under `--data_root`; the accelerator's
slimmed copy as the folder it was made from, whose test.npz it copies unchanged), counts
its labels per class, and writes them into the summary, only after checking that every per-class
accuracy the run reported is a whole number of images of those counts (a run on a subsampled or
other split fails the check and is left alone, and listed). `--check` writes nothing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results"
DATA_ROOT = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
# The accelerator's slimmed copy keeps the full folder's test.npz byte for byte
# (`tools.accelerator_runs.slim_data`): its runs were tested on that folder's split.
COPIES = {"cifar10_slim": "cifar10_jpeg"}


def split_counts(data_root: pathlib.Path, config: dict) -> np.ndarray | None:
  """Test images per class of the npz split a config names (its data_dir's folder name under
  `data_root`); None when that folder is not there."""
  name = pathlib.Path(config.get("data_dir", "")).name
  path = data_root / COPIES.get(name, name) / "test.npz"
  if not path.exists():
    return None
  labels = np.load(path)["labels"]
  return np.bincount(labels, minlength=int(config.get("num_classes", labels.max() + 1)))


def whole_images(accuracy, counts, tolerance: float = 1e-4) -> bool:
  """Every per-class accuracy × its count is a whole number of images."""
  images = np.asarray(accuracy, np.float64) * counts
  return bool(np.all(np.abs(images - np.round(images)) < tolerance))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results", type=pathlib.Path, default=RESULTS)
  parser.add_argument("--data_root", type=pathlib.Path, default=DATA_ROOT)
  parser.add_argument("--check", action="store_true", help="write nothing")
  args = parser.parse_args(argv)
  written, left = 0, []
  for config_path in sorted(args.results.glob("**/runs/*.config.json")):
    summary_path = config_path.with_name(config_path.name.replace(".config.json", ".json"))
    summary = json.loads(summary_path.read_text())
    if "test_class_counts" in summary:
      continue
    config = json.loads(config_path.read_text())
    counts = split_counts(args.data_root, config)
    if (counts is None or len(counts) != len(summary["per_class_accuracy"])
        or not whole_images(summary["per_class_accuracy"], counts)):
      left.append(summary_path)
      continue
    summary["test_class_counts"] = counts.tolist()
    if not args.check:
      summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    written += 1
  print(f"{'would write' if args.check else 'wrote'} test_class_counts into {written} summaries; "
        f"left {len(left)} alone")
  for path in left:
    print(f"  left: {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
