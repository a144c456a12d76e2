"""One table and one plot across several comparison reports of the same methods (e.g. an
imbalance-factor sweep), from their comparison.json files (written by `experiments.report.run_tables`).

    python -m experiments.report.sweep_table --reports="IF 50=workdirs/if50/report" \
        --reports="IF 100=workdirs/if100/report" --out=workdirs/if_sweep

Per method and report: overall accuracy (mean ± sample std, ddof = 1, over seeds), the paired
per-seed Δ against the report's reference (seeds ahead / seeds paired), Few-shot accuracy, and ρ on
the training set at the end — as computed by `experiments.report.run_tables` (`experiments.report.seed_stats`) and
stored in comparison.json; a comparison.json without its `_std` marker predates the sample std and
is refused (rebuild it: `python -m experiments.studies.regenerate_reports`).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Sequence

import numpy as np
from absl import flags

from experiments.common import cli
from experiments.report import seed_stats


def load_reports(specs: Sequence[str]) -> dict[str, dict]:
  """{label: comparison.json} from 'label=report_dir' entries, in the given order."""
  reports = {}
  for spec in specs:
    label, _, folder = spec.partition("=")
    if not folder:
      raise SystemExit(f"error: --reports entry {spec!r} is not label=report_dir")
    path = pathlib.Path(folder) / "comparison.json"
    if not path.exists():
      raise SystemExit(f"error: {path}: no comparison.json (run experiments.compare first)")
    report = json.loads(path.read_text())
    if report.get("_std") != seed_stats.STD_NAME:
      raise SystemExit(f"error: {path}: its ± is not marked as the {seed_stats.STD_NAME} (written "
                       "before experiments.report.seed_stats); rebuild it with experiments.report.run_tables or "
                       "python -m experiments.studies.regenerate_reports")
    reports[label] = report
  return reports


def _methods(report: dict) -> list[str]:
  return [m for m in report if not m.startswith("_")]


def sweep_rows(reports: dict[str, dict]) -> dict[str, dict[str, dict]]:
  """{method: {label: cells}} for the methods present in every report; cells hold (mean, sample
  std) pairs in fractions, the paired Δ as `seed_stats.PairedDelta`'s JSON, ρ as (mean,
  sample std) and the number of seeds."""
  common = [m for m in _methods(next(iter(reports.values())))
            if all(m in report for report in reports.values())]
  rows = {}
  for method in common:
    rows[method] = {}
    for label, report in reports.items():
      row = report[method]
      rows[method][label] = {
          "overall": row["overall"],
          "delta": row.get("delta_vs_reference", {}).get("overall"),
          "few": row.get("many_medium_few", {}).get("few"),
          "rho": row.get("neural_collapse", {}).get("rho"),
          "seeds": len(row["seeds"]),
      }
  return rows


def markdown(rows: dict[str, dict[str, dict]]) -> str:
  labels = list(next(iter(rows.values())))
  spread = seed_stats.spread(cell["seeds"] for cells in rows.values() for cell in cells.values()
                            if "seeds" in cell)
  header = ["method"] + labels
  overall, few_rho = [], []
  for method, cells in rows.items():
    parts = []
    for label in labels:
      cell = cells[label]
      text = seed_stats.percent_cell(cell["overall"])
      if cell["delta"] is not None:
        text += f" ({seed_stats.delta_cell(cell['delta'])})"
      parts.append(text)
    overall.append([method] + parts)
    parts = []
    for label in labels:
      few, rho = cells[label]["few"], cells[label]["rho"]
      parts.append((seed_stats.percent_cell(few) if few else seed_stats.NOT_AVAILABLE) + " / " +
                   (f"ρ {rho[0]:.2f}" if rho else "ρ n/a"))
    few_rho.append([method] + parts)
  lines = [f"Overall accuracy (%, {spread}) and the paired per-seed Δ vs the reference (points, "
           f"{seed_stats.PAIRED}):", ""]
  lines += seed_stats.markdown_table(header, overall)
  lines += ["", f"Few-shot accuracy (%, {spread}) and ρ on the training set at the end (mean):", ""]
  lines += seed_stats.markdown_table(header, few_rho)
  return "\n".join(lines) + "\n"


def plot(rows: dict[str, dict[str, dict]], path: pathlib.Path) -> None:
  """Overall accuracy against the reports (x: their labels), one line per method, error bars ±1
  sample std (ddof = 1) over seeds."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4))
  for method, cells in rows.items():
    labels = list(cells)
    mean = np.array([cells[label]["overall"][0] for label in labels]) * 100
    std = seed_stats.error_bars([cells[label]["overall"][1] for label in labels])
    ax.errorbar(np.arange(len(labels)), mean, yerr=None if std is None else 100 * std, marker="o",
                capsize=2, label=method)
  ax.set_xticks(np.arange(len(labels)), labels)
  ax.set_ylabel("test accuracy (%)")
  ax.set_title(f"bars: ±1 {seed_stats.STD_NAME} over seeds", fontsize=9)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_multi_string("reports", None, "A column: label=report_dir (a folder with "
                            "comparison.json); repeat the flag for each, in column order",
                            required=True, flag_values=flag_values)
  flags.DEFINE_string("out", None, "Output folder (sweep.md, sweep.json, overall_accuracy.png).",
                      required=True, flag_values=flag_values)
  flags.DEFINE_bool("quiet", False, "Do not print the table.", flag_values=flag_values)


def sweep_command(args: flags.FlagValues) -> None:
  """Writes the table, its JSON and the plot of `--reports` to `--out`."""
  rows = sweep_rows(load_reports(args.reports))
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  text = markdown(rows)
  (out / "sweep.md").write_text(text)
  (out / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")
  plot(rows, out / "overall_accuracy.png")
  if not args.quiet:
    print(text)


def main(argv=None) -> int:
  """`python -m experiments.report.sweep_table`; `argv` (without the program name) from Python."""
  return cli.run_command(define_flags, sweep_command, argv)


if __name__ == "__main__":
  sys.exit(main())
