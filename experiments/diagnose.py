"""Per-class diagnosis of a trained classifier: who is hard, how spread out, what MR2 would do.

    python -m experiments.diagnose --workdir=W            # any finished or interrupted run
    python -m experiments.diagnose --features=F.npz       # features of a model trained elsewhere

Writes `report.md`, `diagnose.json` and PNG plots into `--out` (default W/diagnose, or
F_diagnose/ next to the feature file). What it computes (A_k, V_k, γ_k, Spearman's ρ_s, L_c and ρ, NC1–NC4, confused pairs) is listed in
`experiments.report.diagnosis`; the report's tables and plots are in
`experiments.report.diagnosis_report`.

For a workdir the statistics come from the training split and the accuracy from the test split,
through the model in inference mode; the feature file's arrays are listed there too.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import flags

import mr2_jax
from experiments.common import cli
from experiments.methods import registry
from experiments.report.diagnosis import diagnose, load_feature_file
from experiments.report.diagnosis_report import format_percent, format_value, write_report
from experiments.train.run_features import SplitFeatures, features_from_workdir


def _run_info(workdir: pathlib.Path, split: SplitFeatures) -> dict[str, Any]:
  config = split.config
  return {"workdir": str(workdir), "loss": config.loss, "dataset": config.dataset,
          "step": split.step, "finished": (workdir / "summary.json").is_file()}


def _mr2(config):
  """MR2's settings in this run's config, its defaults where the run trained no MR2 (its config
  holds no `mr2` sub-tree)."""
  return registry.method_tree("mr2", config.get("mr2"))


def _mr2_p(config) -> float:
  """The norm order MR2 uses in this run's config (`mr2_jax.objective.form_defaults`)."""
  mr2 = _mr2(config)
  return float(mr2_jax.objective.form_defaults(mr2.form, 1, p=mr2.p)[0])


def summary_lines(result: dict[str, Any], report: pathlib.Path) -> list[str]:
  lines = [f"report: {report}"]
  names = result["class_names"]
  if result["accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    worst = int(np.nanargmin(accuracy)) if np.any(np.isfinite(accuracy)) else None
    lines.append(f"overall accuracy {format_percent(result['overall_accuracy'])} %"
                 + (f", worst class {names[worst]} {format_percent(accuracy[worst])} %" if worst is not None
                    else ""))
    corr = result["spearman"]
    lines.append(f"Spearman(accuracy, A_k+V_k) = {format_value(corr['accuracy_vs_spread']['rho'], 3)}, "
                 f"Spearman(accuracy, V_k) = {format_value(corr['accuracy_vs_variance']['rho'], 3)} "
                 f"over {corr['accuracy_vs_spread']['classes']} classes")
  gamma = np.asarray(result["gamma"], float)
  line = f"γ_k in [{format_value(float(gamma.min()), 4)}, {format_value(float(gamma.max()), 4)}]"
  if result["rho"] is not None:
    line += f", ρ = {format_value(result['rho'], 4)}"
  nc = ", ".join(f"{name.upper()} = {format_value(value, 4)}" for name, value in result["nc"].items()
                 if value is not None and name != "nc2_classifier")
  lines.append(line + (f", {nc}" if nc else ""))
  if result["confused_pairs"]:
    pair = result["confused_pairs"][0]
    lines.append(f"most confused: {pair['true_name']} → {pair['predicted_name']} "
                 f"({pair['count']}, {format_percent(pair['rate'])} % of {pair['true_name']})")
  return lines


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_string("workdir", None, "A training workdir (finished or interrupted).",
                      flag_values=flag_values)
  flags.DEFINE_string("features", None, "An .npz with features [N,d], labels [N], optional "
                      "classifier [K,d], bias [K], logits [N,K], class_names [K].",
                      flag_values=flag_values)
  flags.mark_flags_as_mutual_exclusive(["workdir", "features"], required=True,
                                       flag_values=flag_values)
  flags.DEFINE_string("out", None, "Output folder (default WORKDIR/diagnose or F_diagnose/).",
                      flag_values=flag_values)
  flags.DEFINE_integer("top_pairs", 10, "Confused pairs to list.", flag_values=flag_values)
  flags.DEFINE_float("c_bar", None, "MR2's mean margin c̄ (default: the run's config.mr2.c_bar, "
                     "else 1).", flag_values=flag_values)
  flags.DEFINE_float("p", None, "Norm order of A_k, V_k (default: the run's MR2 setting, else 2).",
                     flag_values=flag_values)


def _diagnose_workdir(args: flags.FlagValues) -> tuple[dict[str, Any], pathlib.Path]:
  """(result, output folder) of a training workdir: statistics from the training split, accuracy
  from the test split."""
  workdir = pathlib.Path(args.workdir)
  data = features_from_workdir(workdir, ("train", "test"))
  train, test = data["train"], data["test"]
  mr2 = _mr2(train.config)
  c_bar = args.c_bar if args.c_bar is not None else float(mr2.c_bar)
  l2 = mr2.features == "l2"  # the run's MR2 read φ/‖φ‖₂
  p = args.p if args.p is not None else _mr2_p(train.config)
  result = diagnose(train.features, train.labels, train.num_classes,
                    classifier=train.classifier, bias=train.bias, logits=train.logits,
                    c_bar=c_bar, p=p, eval_labels=test.labels, eval_logits=test.logits,
                    top_pairs=args.top_pairs, class_names=train.class_names,
                    l2_statistics=l2)
  result["sources"] = {
      "statistics": f"the training split ({len(train.labels)} examples, as trained on; "
                    f"model in inference mode, no augmentation"
                    f"{'; A_k, V_k of the L2-normalised features, as MR2 read them' if l2 else ''})",
      "accuracy": f"the test split ({len(test.labels)} examples)"}
  result["run"] = _run_info(workdir.resolve(), train)
  return result, pathlib.Path(args.out) if args.out else workdir / "diagnose"


def _diagnose_feature_file(args: flags.FlagValues) -> tuple[dict[str, Any], pathlib.Path]:
  """(result, output folder) of a feature file: statistics and accuracy from its arrays."""
  inputs = load_feature_file(args.features)
  result = diagnose(inputs["features"], inputs["labels"], inputs["num_classes"],
                    classifier=inputs["classifier"], bias=inputs["bias"],
                    logits=inputs["logits"], c_bar=1.0 if args.c_bar is None else args.c_bar,
                    p=2.0 if args.p is None else args.p, top_pairs=args.top_pairs,
                    class_names=inputs["class_names"])
  path = pathlib.Path(args.features)
  result["sources"] = {key: f"the feature file {path.name} ({result['num_examples']} examples)"
                       for key in ("statistics", "accuracy")}
  return result, pathlib.Path(args.out) if args.out else path.with_name(path.stem + "_diagnose")


def diagnose_command(args: flags.FlagValues) -> None:
  """Diagnoses `--workdir` or `--features`, writes the report and prints its summary lines (a
  missing file or an unusable input is one line: `experiments.common.cli.EXPECTED`)."""
  result, out = (_diagnose_workdir if args.workdir else _diagnose_feature_file)(args)
  report = write_report(result, out)
  print("\n".join(summary_lines(result, report)))


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m experiments.diagnose`; `argv` (without the program name) runs it from Python and
  returns the exit status (2: an error, printed as one line)."""
  return cli.run_command(define_flags, diagnose_command, argv)


if __name__ == "__main__":
  sys.exit(main())
