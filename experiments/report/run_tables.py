"""Per-class comparison of finished runs: tables (Markdown), a JSON summary and PNG plots.

    python -m experiments.report.run_tables --runs=ce=workdirs/ce --runs=mr2=workdirs/mr2 \
        --reference=ce --out=workdirs/report

Each run is a workdir written by `experiments.train.loop` (summary.json, class_history.jsonl).
Several workdirs per method (seeds) are given as `--runs=name=dir1,dir2,dir3` and reported as
mean ± sample std (ddof = 1) over seeds, with the paired per-seed Δ against the reference
(`experiments.report.seed_stats`). Easy / Medium / Hard groups are fixed from the reference
method's per-class accuracy (seed mean).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Sequence

import numpy as np
from absl import flags

from mr2_reweight_core import metrics as perclass_metrics
from experiments.common import cli
from experiments.data import long_tail
from experiments.report import best_epoch
from experiments.report import claims
from experiments.report import nc_centring
from experiments.report import plots
from experiments.report import seed_stats

def read_jsonl(path: pathlib.Path) -> list[dict]:
  """The records of a JSON-lines log (metrics.jsonl, class_history.jsonl); [] when it is absent."""
  path = pathlib.Path(path)
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_summaries(workdirs: Sequence[str | pathlib.Path]) -> list[dict]:
  summaries = []
  for workdir in workdirs:
    path = pathlib.Path(workdir) / "summary.json"
    if not path.exists():
      raise FileNotFoundError(f"{path}: no summary.json (has the run finished?)")
    summaries.append(json.loads(path.read_text()))
  return summaries


def method_table(methods: dict[str, list[dict]], reference: str | None,
                 paired_against: str | None = None) -> dict[str, dict]:
  """Per method: mean ± sample std (ddof = 1) over seeds (`seed_stats.mean_std`) of overall,
  worst-class, std-of-classes (one run's spread across classes), groups, per class.

  Easy / Medium / Hard come from `reference` (ERM); the paired per-seed Δ is taken against
  `paired_against` (default: the reference), e.g. a uniform-margin ablation against γ at the same c̄.
  """
  if paired_against is not None and paired_against not in methods:
    raise KeyError(f"paired_against: no method {paired_against!r} among {sorted(methods)}")
  groups = None
  if reference is not None:
    reference_accuracy = np.mean([s["per_class_accuracy"] for s in methods[reference]], axis=0)
    groups = perclass_metrics.difficulty_tertiles(reference_accuracy)
  mean_std = seed_stats.mean_std  # the one definition of the spread over seeds
  table = {}
  for name, summaries in methods.items():
    per_class = np.array([s["per_class_accuracy"] for s in summaries], np.float64)
    per_class_mean, per_class_std = seed_stats.mean_std_arrays(per_class)
    row = {
        "seeds": [s.get("seed") for s in summaries],
        "overall": mean_std([s["overall_accuracy"] for s in summaries]),
        "worst_class": mean_std([s["worst_class_accuracy"] for s in summaries]),
        "class_std": mean_std([s["class_accuracy_std"] for s in summaries]),
        "per_class_mean": per_class_mean.tolist(),
        "per_class_std": per_class_std.tolist(),
    }
    if "many_medium_few" in summaries[0]:
      row["many_medium_few"] = {
          split: mean_std([s["many_medium_few"][split] for s in summaries])
          for split in summaries[0]["many_medium_few"] if summaries[0]["many_medium_few"][split]
          is not None}
    if groups is not None:
      per_seed = np.array([perclass_metrics.group_accuracy(acc, groups) for acc in per_class])
      row["easy_medium_hard"] = {g: mean_std(per_seed[:, i])
                                 for i, g in enumerate(perclass_metrics.GROUP_NAMES)}
    if all("neural_collapse" in s for s in summaries):
      row["neural_collapse"] = {k: mean_std([s["neural_collapse"][k] for s in summaries])
                                for k in summaries[0]["neural_collapse"]}
    # The class-balanced centring over the seeds whose runs recorded it (runs before it was
    # recorded have the sample centring alone); `nc_centring` says which seeds.
    if balanced := [s for s in summaries if "neural_collapse_balanced" in s]:
      row["neural_collapse_balanced"] = {
          k: mean_std([s["neural_collapse_balanced"][k] for s in balanced])
          for k in balanced[0]["neural_collapse_balanced"]}
      row["neural_collapse_balanced_seeds"] = [s.get("seed") for s in balanced]
    table[name] = row
  if groups is not None:
    table["_groups"] = groups.tolist()
    table["_groups_from"] = reference
  first = next(iter(methods.values()))[0]
  if "test_class_counts" in first:
    table["_test_class_counts"] = first["test_class_counts"]
  table["_std"] = seed_stats.STD_NAME  # what the ± of this file means (sweep_table checks it)
  baseline = paired_against or reference
  if baseline is not None:
    for name, summaries in methods.items():
      if name != baseline:
        table[name]["delta_vs_reference"] = paired_deltas(summaries, methods[baseline], groups)
        images = paired_image_deltas(summaries, methods[baseline], groups)
        if images is not None:
          table[name]["delta_images_vs_reference"] = images
    table["_paired_against"] = baseline
  return table


def metrics_of(summary: dict, groups) -> dict[str, float]:
  """{metric: value} of one run's summary.json: overall, worst class, the difficulty groups (with
  `groups`, ERM's), Many/Medium/Few shot where recorded, and ρ on the training set."""
  accuracy = np.asarray(summary["per_class_accuracy"], np.float64)
  metrics = {"overall": summary["overall_accuracy"], "worst_class": summary["worst_class_accuracy"]}
  if groups is not None:
    metrics.update(zip(perclass_metrics.GROUP_NAMES,
                       perclass_metrics.group_accuracy(accuracy, groups).tolist()))
  for split, value in summary.get("many_medium_few", {}).items():
    if value is not None:
      metrics[f"{split}_shot"] = value  # 'medium_shot' apart from the Medium difficulty group
  if summary.get("train_rho") is not None:
    metrics["rho"] = summary["train_rho"]  # the reweighting's claim: ρ on the training set falls
  return metrics


# How a paired Δ of a metric is shown: (scale, decimals); accuracies as points, ρ as it is.
DELTA_FORMAT = {"rho": (1.0, 3)}


def _images_of(summary: dict, groups) -> dict[str, float] | None:
  """Correctly classified test images of each class group, Σ_{k ∈ g} acc_k · n_k with n_k the test
  images of class k (summary.json's `test_class_counts`); None for a run that did not record them.
  The keys are `metrics_of`'s group metrics (and "overall"): their paired Δ in whole images."""
  if "test_class_counts" not in summary:
    return None
  correct = (np.asarray(summary["per_class_accuracy"], np.float64)
             * np.asarray(summary["test_class_counts"], np.float64))
  images = {"overall": float(np.nansum(correct))}
  if groups is not None:
    for g, name in enumerate(perclass_metrics.GROUP_NAMES):
      images[name] = float(np.nansum(correct[np.asarray(groups) == g]))
  if "many_medium_few" in summary:
    shots = long_tail.many_medium_few(np.asarray(summary["train_class_counts"]))
    for s, split in enumerate(long_tail.SHOT_NAMES):
      if summary["many_medium_few"].get(split) is not None:
        images[f"{split}_shot"] = float(np.nansum(correct[shots == s]))
  return images


def _paired(summaries: list[dict], reference: list[dict], read) -> dict[str, dict] | None:
  """`seed_stats.paired_delta`'s JSON, per metric that every run of both has, of `read(summary)`
  (method − reference on the *same* seed); None when a run has none (`read` gave None).
  Seeds must match between the two methods."""
  by_seed = {s["seed"]: s for s in reference}
  seeds = [s["seed"] for s in summaries]
  if sorted(seeds) != sorted(by_seed):
    raise ValueError(f"paired comparison needs the same seeds: {sorted(seeds)} vs "
                     f"{sorted(by_seed)}")
  ours = {s["seed"]: read(s) for s in summaries}
  theirs = {seed: read(by_seed[seed]) for seed in ours}
  if any(m is None for m in (*ours.values(), *theirs.values())):
    return None
  common = [k for k in next(iter(ours.values()))
            if all(k in m for m in (*ours.values(), *theirs.values()))]
  ours = {seed: {k: m[k] for k in common} for seed, m in ours.items()}
  return {key: delta.to_json() for key, delta in seed_stats.metric_deltas(ours, theirs).items()}


def paired_deltas(summaries: list[dict], reference: list[dict], groups) -> dict[str, dict]:
  """Per metric: the paired Δ (method − reference) on the *same* seed, as its JSON object (mean Δ,
  sample std, seeds ahead / behind / paired, the 95 % t-interval, the sign-test p and the per-seed
  Δs)."""
  return _paired(summaries, reference, lambda s: metrics_of(s, groups))


def paired_image_deltas(summaries: list[dict], reference: list[dict], groups
                        ) -> dict[str, dict] | None:
  """As `paired_deltas`, in test images (`_images_of`) instead of fractions; None unless every run
  of both recorded its test images per class."""
  return _paired(summaries, reference, lambda s: _images_of(s, groups))


_pct = seed_stats.percent_cell


def definitions(row: dict, reference: str | None) -> str:
  """The groups and ρ, defined where a report first uses them (the columns `row` has)."""
  parts = []
  if "many_medium_few" in row:
    parts.append("Many / Medium / Few-shot are the classes with over 100, 20–100 and under 20 "
                 "training images (Liu et al., CVPR 2019)")
  if "easy_medium_hard" in row:
    parts.append("Easy / Medium / Hard are the reference's best, middle and worst third of the "
                 f"classes by test accuracy (seed mean{f' of {reference}' if reference else ''}), "
                 "fixed for every method")
  if "neural_collapse" in row:
    parts.append("ρ = std_c L_c / mean_c L_c is the spread of the per-class cross-entropy on the "
                 "training set at the end, and NC1–NC4 the neural-collapse metrics of its "
                 "features")
  return "".join(f"; {part}" for part in parts)


def markdown_tables(table: dict[str, dict], class_counts: Sequence[int]) -> str:
  """An overall table (one row per method), the paired Δ table and a per-class table (one column
  per method), each under a header stating the spread (`seed_stats.spread`)."""
  methods = [m for m in table if not m.startswith("_")]
  spread = seed_stats.spread(len(table[m]["seeds"]) for m in methods)
  seed_sets = {tuple(table[m]["seeds"]) for m in methods}
  if len(seed_sets) == 1 and None not in (seeds := next(iter(seed_sets))):
    spread += f" ({'seed' if len(seeds) == 1 else 'seeds'} {', '.join(map(str, seeds))})"
  nc = " and neural-collapse metrics at the end" if "neural_collapse" in table[methods[0]] else ""
  averaged = "" if spread.startswith("one seed") else ", averaged over seeds like the others"
  lines = [f"Final-epoch test accuracy (%){nc}, {spread}; \"std of classes\" is one run's spread of "
           f"its per-class accuracy (population std over classes){averaged}"
           f"{definitions(table[methods[0]], table.get('_groups_from'))}:", ""]
  header = ["method", "overall", "worst class", "std of classes"]
  first = table[methods[0]]
  mmf = list(first.get("many_medium_few", {}))
  emh = list(first.get("easy_medium_hard", {}))
  # '-shot' tells the frequency splits from the difficulty groups (two columns say Medium).
  header += [f"{s.capitalize()}-shot" for s in mmf] + [g.capitalize() for g in emh]
  if "neural_collapse" in first:
    header += ["NC1", "NC2", "NC3", "NC4", "ρ"]
  rows = []
  for m in methods:
    row = table[m]
    cells = [m, _pct(row["overall"]), _pct(row["worst_class"]), _pct(row["class_std"])]
    cells += [_pct(row["many_medium_few"][s]) for s in mmf]
    cells += [_pct(row["easy_medium_hard"][g]) for g in emh]
    if "neural_collapse" in row:
      nc = row["neural_collapse"]
      cells += [seed_stats.cell(*nc[k], fmt=".3g", std_fmt=".2g")
                for k in ("nc1", "nc2", "nc3", "nc4", "rho")]
    rows.append(cells)
  lines += seed_stats.markdown_table(header, rows) + [""]
  paired = [m for m in methods if "delta_vs_reference" in table[m]]
  if paired:
    keys = list(table[paired[0]]["delta_vs_reference"])
    one_seed = all(len(table[m]["seeds"]) == 1 for m in paired)
    lines.append(f"Paired Δ vs {table.get('_paired_against', 'the reference')}, same seed (points, "
                 "ρ as it is; "
                 f"{'one seed: the Δ of that run, no interval' if one_seed else seed_stats.PAIRED}"
                 "):")
    lines.append("")
    lines += seed_stats.markdown_table(
        ["method"] + [f"Δ {'ρ' if k == 'rho' else k.replace('_', ' ')}" for k in keys],
        ([m] + [seed_stats.delta_cell(table[m]["delta_vs_reference"][k],
                                      **dict(zip(("scale", "digits"), DELTA_FORMAT.get(k, (100.0, 1)))))
                for k in keys]
         for m in paired))
    lines.append("")
  groups = table.get("_groups")
  lines += [f"Per-class test accuracy (%), {spread}:", ""]
  header = ["class", "train n"] + (["group"] if groups else []) + methods
  rows = []
  for k, count in enumerate(class_counts):
    cells = [str(k), str(count)]
    if groups:
      cells.append(perclass_metrics.GROUP_NAMES[groups[k]])
    cells += [_pct((table[m]["per_class_mean"][k], table[m]["per_class_std"][k])) for m in methods]
    rows.append(cells)
  lines += seed_stats.markdown_table(header, rows)
  return "\n".join(lines) + "\n"


# The training-set metrics the periodic pass logs (`config.class_loss_every_epochs`; NC1–NC4 with
# `config.nc_metrics`): metrics.jsonl keys, and their labels in the report.
NC_OVER_TRAINING = (("train_nc1", "NC1"), ("train_nc2", "NC2"), ("train_nc3", "NC3"),
                    ("train_nc4", "NC4"))


def metric_history(workdirs: Sequence[str | pathlib.Path], key: str = "train_rho"
                   ) -> dict[str, list[float]] | None:
  """A metric of the periodic training-set pass over training (ρ by default; `NC_OVER_TRAINING`),
  mean and sample std (ddof = 1, `seed_stats.mean_std_arrays`) over the runs at the epochs every
  run logged: {"epoch": [...], "mean": [...], "std": [...], "seeds": n}; None when a run logged
  none."""
  per_run = []
  for workdir in workdirs:
    records = read_jsonl(pathlib.Path(workdir) / "metrics.jsonl")
    per_run.append({round(r["epoch"], 6): r[key] for r in records if key in r})
  epochs = sorted(set.intersection(*(set(run) for run in per_run))) if per_run else []
  if not epochs:
    return None
  mean, std = seed_stats.mean_std_arrays([[run[e] for e in epochs] for run in per_run])
  return {"epoch": epochs, "mean": mean.tolist(), "std": std.tolist(), "seeds": len(per_run)}


def rho_markdown(histories: dict[str, dict], columns: int = 10) -> str:
  """ρ over training, one row per method, at `columns` epochs spread over those every method
  logged (all of them when they are no more: a 200-epoch run logging every 20 shows each)."""
  epochs = sorted(set.intersection(*(set(h["epoch"]) for h in histories.values())))
  if not epochs:
    return ""
  picks = sorted(set(np.linspace(0, len(epochs) - 1, min(columns, len(epochs))).round().astype(int)))
  shown = [epochs[i] for i in picks]
  counts = [h["seeds"] for h in histories.values() if "seeds" in h]
  lines = ["ρ = std_c L_c / mean_c L_c of the per-class cross-entropy on the training set, over "
           f"training ({seed_stats.spread(counts)}):", ""]
  rows = []
  for name, history in histories.items():
    at = {e: i for i, e in enumerate(history["epoch"])}
    rows.append([name] + [seed_stats.cell(history["mean"][at[e]], history["std"][at[e]], fmt=".3f")
                          for e in shown])
  lines += seed_stats.markdown_table(["method"] + [f"epoch {e:g}" for e in shown], rows)
  return "\n".join(lines) + "\n"


def nc_markdown(nc_histories: dict[str, dict[str, dict]], columns: int = 10) -> str:
  """NC1–NC4 of the training set over training, one table per metric (the epochs every method
  logged), as `rho_markdown` gives ρ."""
  parts = []
  for key, label in NC_OVER_TRAINING:
    histories = {name: h[key] for name, h in nc_histories.items() if key in h}
    if histories:
      table = rho_markdown(histories, columns)
      parts.append(table.replace("ρ = std_c L_c / mean_c L_c of the per-class cross-entropy on "
                                 "the training set", f"{label} of the training set's features", 1))
  return "\n".join(parts)


def write_report(methods: dict[str, list[pathlib.Path]], reference: str | None,
                 out: pathlib.Path, paired_against: str | None = None,
                 claimed: Sequence[str] = claims.CLAIMED) -> str:
  """Tables (report.md), comparison.json and plots in `out`; returns the Markdown. Under the tables,
  the verdict line of each paired Δ in `claimed` (`claims.claims_markdown`)."""
  out.mkdir(parents=True, exist_ok=True)
  summaries = {name: load_summaries(dirs) for name, dirs in methods.items()}
  table = method_table(summaries, reference, paired_against)
  class_counts = next(iter(summaries.values()))[0]["train_class_counts"]
  markdown = markdown_tables(table, class_counts)
  verdicts = claims.claims_markdown(table, claimed, class_counts)
  markdown += "\n" + verdicts if verdicts else ""
  if "neural_collapse" in next(iter(table.values())):  # both centrings, the sample one's floors
    note = nc_centring.centring_markdown(table, class_counts)
    markdown += "\n" + note if note else ""
  best = best_epoch.best_epoch_table(methods, summaries)
  if best is not None:  # runs with `config.test_every_epochs`: the release's best_acc1 beside ours
    table["_best_epoch"] = best
    markdown += "\n" + best_epoch.best_epoch_markdown(best)
  histories = {name: metric_history(dirs) for name, dirs in methods.items()}
  histories = {name: h for name, h in histories.items() if h is not None}
  if histories:
    table["_rho_history"] = histories
    markdown += "\n" + rho_markdown(histories)
    plots.plot_rho_history(histories, out / "rho_over_training.png")
  nc_histories = {name: {key: h for key, _ in NC_OVER_TRAINING
                         if (h := metric_history(dirs, key)) is not None}
                  for name, dirs in methods.items()}
  nc_histories = {name: h for name, h in nc_histories.items() if h}
  if nc_histories:  # runs with `config.nc_metrics` and the periodic pass
    table["_nc_history"] = nc_histories
    markdown += "\n" + nc_markdown(nc_histories)
    plots.plot_nc_history(nc_histories, NC_OVER_TRAINING, out / "nc_over_training.png")
  (out / "report.md").write_text(markdown)
  (out / "comparison.json").write_text(json.dumps(table, indent=2) + "\n")
  plots.plot_per_class_accuracy(table, out / "per_class_accuracy.png")
  for name, dirs in methods.items():
    plots.plot_class_history(read_jsonl(pathlib.Path(dirs[0]) / "class_history.jsonl"),
                             out / f"{name.replace('+', '_')}")
  return markdown


def parse_runs(specs: Sequence[str]) -> dict[str, list[pathlib.Path]]:
  methods = {}
  for spec in specs:
    name, _, dirs = spec.partition("=")
    if not dirs:
      raise SystemExit(f"error: --runs entry {spec!r} is not name=dir[,dir...]")
    methods[name] = [pathlib.Path(d) for d in dirs.split(",")]
  return methods


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_multi_string("runs", None, "A method's runs, name=workdir[,workdir...] (one per "
                            "seed); repeat the flag for each method, in table order",
                            required=True, flag_values=flag_values)
  flags.DEFINE_string("reference", None, "The method fixing Easy / Medium / Hard (ERM).",
                      flag_values=flag_values)
  flags.DEFINE_string("paired_against", None, "The method the paired per-seed Δ is taken against "
                      "(default: --reference).", flag_values=flag_values)
  flags.DEFINE_string("out", None, "Output folder of the report.", required=True,
                      flag_values=flag_values)


def report_command(args: flags.FlagValues) -> None:
  """Writes the report of `--runs` and prints its Markdown."""
  try:
    print(write_report(parse_runs(args.runs), args.reference, pathlib.Path(args.out),
                       args.paired_against))
  except (FileNotFoundError, KeyError) as error:
    raise SystemExit(f"error: {error}") from None


def main(argv=None) -> int:
  """`python -m experiments.report.run_tables`; `argv` (without the program name) from Python."""
  return cli.run_command(define_flags, report_command, argv)


if __name__ == "__main__":
  sys.exit(main())
