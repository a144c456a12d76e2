"""One hyperparameter's effect, from the members of a sweep (`experiments.compare --sweep`): a table
and a figure of the metrics against the swept values, with 95 % intervals over seeds, and the paired
Δ of each value against the method's default value and against the reference method (ERM), each
with its verdict in the project's form (`experiments.report.claims.verdict`).

    python -m experiments.report.setting_curves --workdir=workdirs/settings/probe_lt \
        --method=inverse_reweight --field=reweight.alpha --default=0 --out=results/settings/probe_lt

A member is a run folder `<workdir>/<method>-<field><value>/seed<s>` whose summary.json records its
values under `sweep` (`experiments.train.seed_axis`), or, for a field no sweep can trace (a start
epoch: separate runs, `compare --methods=name=loss:field=value`), each run folder named in
`--runs=<name>,...`, its value read from its config.json; the reference's runs are
`<workdir>/<reference>/seed<s>`. Easy / Medium / Hard come from the reference's mean per-class
accuracy (as in every report); Many / Medium / Few-shot from the training counts; ρ is the run's
`train_rho` (the training-set ρ at the end) where recorded.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Sequence

import numpy as np
from absl import flags

from experiments.common import cli
from experiments.report import claims
from experiments.report import run_tables
from experiments.report import seed_stats
from mr2_reweight_core import metrics as perclass_metrics

# The metrics drawn and tabled, in this order, where the runs have them.
METRICS = ("overall", "worst_class", "easy", "hard", "many_shot", "medium_shot", "few_shot", "rho")


def members(workdir: pathlib.Path, method: str, field: str) -> dict[float, list[dict]]:
  """{value: the member's summaries, seed order} of `method`'s members that swept `field`."""
  found: dict[float, list[dict]] = {}
  for path in sorted(workdir.glob(f"{method.replace('+', '_')}-*/seed*/summary.json")):
    summary = json.loads(path.read_text())
    value = summary.get("sweep", {}).get(field)
    if value is not None:
      found.setdefault(float(value), []).append(summary)
  if not found:
    raise FileNotFoundError(f"{workdir}: no member of {method!r} that swept {field} (summary.json's "
                            "`sweep`)")
  return {value: sorted(runs, key=lambda s: s["seed"]) for value, runs in sorted(found.items())}


def named_runs(workdir: pathlib.Path, names: Sequence[str], field: str
               ) -> dict[float, list[dict]]:
  """{value: the runs' summaries, seed order} of the run folders `names` (`<workdir>/<name>/seed<s>`),
  each value `field` of the run's config.json (every seed of a name must agree)."""
  found: dict[float, list[dict]] = {}
  tree, leaf = field.split(".")
  for name in names:
    values, runs = set(), []
    for folder in sorted((workdir / name.replace("+", "_")).glob("seed*")):
      if not (folder / "summary.json").is_file():
        continue
      values.add(json.loads((folder / "config.json").read_text())[tree][leaf])
      runs.append(json.loads((folder / "summary.json").read_text()))
    if not runs:
      raise FileNotFoundError(f"{workdir / name}: no finished run (seed*/summary.json)")
    if len(values) != 1:
      raise ValueError(f"{workdir / name}: its seeds' configs set {field} to {sorted(values)}")
    value = float(values.pop())
    if value in found:
      raise ValueError(f"{workdir}: two runs named in --runs set {field} = {value:g}")
    found[value] = sorted(runs, key=lambda s: s["seed"])
  return dict(sorted(found.items()))


def curves(by_value: dict[float, list[dict]], reference: list[dict], default: float) -> dict:
  """Per value: each metric's mean, 95 % t-interval of the mean and seeds, and its paired Δ
  against the default value's member and against the reference (JSON of `PairedDelta`)."""
  if default not in by_value:
    raise KeyError(f"default {default:g} is not among the swept values {sorted(by_value)}")
  groups = perclass_metrics.difficulty_tertiles(
      np.mean([s["per_class_accuracy"] for s in reference], axis=0))
  out = {"groups": groups.tolist(), "values": {},
         "test_class_counts": reference[0].get("test_class_counts"),
         "train_class_counts": reference[0].get("train_class_counts")}
  for value, summaries in by_value.items():
    per_seed = {s["seed"]: run_tables.metrics_of(s, groups) for s in summaries}
    names = [m for m in METRICS if all(m in metrics for metrics in per_seed.values())]
    row = {}
    for name in names:
      mean, std = seed_stats.mean_std([metrics[name] for metrics in per_seed.values()])
      row[name] = {"mean": mean, "interval": seed_stats.t_interval(mean, std, len(per_seed)),
                   "seeds": len(per_seed)}
    against = {"default": run_tables.paired_deltas(summaries, by_value[default], groups),
               "reference": run_tables.paired_deltas(summaries, reference, groups)}
    for name in names:
      row[name]["delta"] = {k: v.get(name) for k, v in against.items()}
    out["values"][value] = row
  return out


def _verdict(delta: dict | None, metric: str, table: dict) -> str:
  """`claims.verdict` of a paired Δ, with what one test image weighs in the metric (where the
  runs recorded their test images per class): seeds whose Δs differ by at most one image are read
  by the sign test, not the t-interval."""
  if delta is None:
    return ""
  scale, digits = run_tables.DELTA_FORMAT.get(metric, (100.0, 1))
  sides = claims.FORMATS.get(metric, claims.ACCURACY)[3]
  step = 0.0
  if metric not in claims.FORMATS and table.get("test_class_counts") is not None:
    counts = {"_test_class_counts": table["test_class_counts"], "_groups": table["groups"]}
    classes = claims.group_classes(metric, counts, table.get("train_class_counts") or [])
    step = claims.resolution(counts, metric, classes)
  return claims.verdict(seed_stats.PairedDelta.from_json(delta), resolution=step, scale=scale,
                        digits=digits, sides=sides)


def markdown(table: dict, field: str, default: float, reference: str) -> str:
  """The table (mean [95 % interval] per value and metric) and, per value, the verdict lines of
  its paired Δ against the default value and the reference."""
  values = list(table["values"])
  names = [m for m in METRICS if m in table["values"][values[0]]]
  seeds = {cell["seeds"] for row in table["values"].values() for cell in row.values()}
  lines = [f"{field}: test accuracy (%; ρ as it is), mean [its 95 % t-interval] over "
           f"{'–'.join(map(str, sorted(seeds)))} seeds, per value; the default is {default:g}.", ""]
  header = [field] + [claims.LABELS.get(m, m) for m in names]
  rows = []
  for value in values:
    cells = []
    for name in names:
      cell = table["values"][value][name]
      scale, digits = run_tables.DELTA_FORMAT.get(name, (100.0, 1))
      low, high = cell["interval"]
      interval = "" if np.isnan(low) else f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"
      cells.append(f"{scale * cell['mean']:.{digits}f}{interval}")
    rows.append([f"{value:g}" + (" (default)" if value == default else "")] + cells)
  lines += seed_stats.markdown_table(header, rows)
  for against, label in (("default", f"{field} = {default:g}"), ("reference", reference)):
    lines += ["", f"Paired Δ against {label} (same seeds), verdict from the 95 % interval:", ""]
    for value in values:
      if against == "default" and value == default:
        continue
      parts = [f"{claims.LABELS.get(m, m)}: "
               f"{_verdict(table['values'][value][m]['delta'][against], m, table)}"
               for m in names if table["values"][value][m]["delta"][against] is not None]
      lines.append(f"- **{value:g}**: " + "; ".join(parts))
  return "\n".join(lines) + "\n"


def plot(table: dict, field: str, default: float, path: pathlib.Path) -> None:
  """Two panels against the values (evenly spaced, labelled): the accuracies, and ρ; each point the
  mean over seeds, its bar the 95 % t-interval of the mean."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  values = list(table["values"])
  names = [m for m in METRICS if m in table["values"][values[0]]]
  panels = [[m for m in names if m != "rho"]] + ([["rho"]] if "rho" in names else [])
  fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
  x = np.arange(len(values))
  for ax, metrics in zip(axes[0], panels):
    for name in metrics:
      scale = run_tables.DELTA_FORMAT.get(name, (100.0, 1))[0]
      cells = [table["values"][v][name] for v in values]
      mean = np.array([c["mean"] for c in cells]) * scale
      low = np.array([c["interval"][0] for c in cells]) * scale
      high = np.array([c["interval"][1] for c in cells]) * scale
      bars = None if np.isnan(low).all() else np.vstack([mean - low, high - mean])
      ax.errorbar(x, mean, yerr=bars, marker="o", capsize=3, label=claims.LABELS.get(name, name))
    ax.set_xticks(x, [f"{v:g}" + ("\n(default)" if v == default else "") for v in values])
    ax.set_xlabel(field)
    ax.set_ylabel("ρ (training set)" if metrics == ["rho"] else "test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  seeds = sorted({c["seeds"] for row in table["values"].values() for c in row.values()})
  fig.suptitle(f"{field}: mean over {'–'.join(map(str, seeds))} seeds, bars the 95 % t-interval",
               fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_string("workdir", None, "The compare --sweep workdir.", required=True,
                      flag_values=flag_values)
  flags.DEFINE_string("method", None, "The swept method.", required=True, flag_values=flag_values)
  flags.DEFINE_string("field", None, "The swept field, <tree>.<field>.", required=True,
                      flag_values=flag_values)
  flags.DEFINE_float("default", None, "The method's default value of the field (a swept value).",
                     required=True, flag_values=flag_values)
  flags.DEFINE_string("reference", "ce", "The reference method's folder.", flag_values=flag_values)
  flags.DEFINE_list("runs", None, "Run folders of separate runs that differ in --field (read from "
                    "their config.json), in place of a sweep's members of --method.",
                    flag_values=flag_values)
  flags.DEFINE_string("out", None, "Output folder (<name>/curves.md, .json, .png).",
                      required=True,
                      flag_values=flag_values)
  flags.DEFINE_string("name", None, "The figure's folder in --out (default <tree>_<field>, e.g. "
                      "reweight_alpha; a variant's sweep needs its own, e.g. mr2_l2_lam).",
                      flag_values=flag_values)


def report(workdir: pathlib.Path, method: str, field: str, default: float, reference: str,
           out: pathlib.Path, name: str | None = None, runs: Sequence[str] | None = None) -> str:
  """Writes curves.md, .json and .png to `out`/`name` (default <tree>_<field>); returns the
  Markdown. With `runs`, the values are those run folders' (`named_runs`), not a sweep's."""
  by_value = named_runs(workdir, runs, field) if runs else members(workdir, method, field)
  reference_runs = run_tables.load_summaries(sorted((workdir / reference).glob("seed*")))
  table = curves(by_value, reference_runs, default)
  out = out / (name or field.replace(".", "_"))
  out.mkdir(parents=True, exist_ok=True)
  text = markdown(table, field, default, reference)
  (out / "curves.md").write_text(text)
  (out / "curves.json").write_text(json.dumps(table, indent=2) + "\n")
  plot(table, field, default, out / "curves.png")
  return text


def setting_curves_command(args: flags.FlagValues) -> None:
  print(report(pathlib.Path(args.workdir), args.method, args.field, args.default, args.reference,
               pathlib.Path(args.out), args.name, args.runs))


def main(argv: Sequence[str] | None = None) -> int:
  return cli.run_command(define_flags, setting_curves_command, argv)


if __name__ == "__main__":
  sys.exit(main())
