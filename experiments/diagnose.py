"""Per-class diagnosis of a trained classifier: who is hard, how spread out, what MR2 would do.

    python -m experiments.diagnose --workdir W            # any finished or interrupted run
    python -m experiments.diagnose --features F.npz       # features of a model trained elsewhere

Writes `report.md`, `diagnose.json` and PNG plots into `--out` (default W/diagnose, or
F_diagnose/ next to the feature file). What it computes (A_k, V_k, γ_k, Spearman's ρ_s, L_c and ρ, NC1–NC4, confused pairs) is listed in
`experiments.report.diagnosis`; the report's tables and plots are in
`experiments.report.diagnosis_report`.

For a workdir the statistics come from the training split and the accuracy from the test split,
through the model in inference mode; the feature file's arrays are listed there too.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

import mr2_jax
from experiments.common.errors import DiagnoseError
from experiments.report.diagnosis import diagnose, load_feature_file
from experiments.report.diagnosis_report import _fmt, _pct, write_report
from experiments.train.run_features import SplitFeatures, features_from_workdir


def _run_info(workdir: pathlib.Path, split: SplitFeatures) -> dict[str, Any]:
  config = split.config
  return {"workdir": str(workdir), "loss": config.loss, "dataset": config.dataset,
          "step": split.step, "finished": (workdir / "summary.json").is_file()}


def _mr2_p(config) -> float:
  """The norm order MR2 uses in this run's config (`mr2_jax.objective.form_defaults`)."""
  mr2 = config.mr2
  return float(mr2_jax.objective.form_defaults(mr2.get("form", "paper"), 1, p=mr2.get("p"))[0])


def summary_lines(result: dict[str, Any], report: pathlib.Path) -> list[str]:
  lines = [f"report: {report}"]
  names = result["class_names"]
  if result["accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    worst = int(np.nanargmin(accuracy)) if np.any(np.isfinite(accuracy)) else None
    lines.append(f"overall accuracy {_pct(result['overall_accuracy'])} %"
                 + (f", worst class {names[worst]} {_pct(accuracy[worst])} %" if worst is not None
                    else ""))
    corr = result["spearman"]
    lines.append(f"Spearman(accuracy, A_k+V_k) = {_fmt(corr['accuracy_vs_spread']['rho'], 3)}, "
                 f"Spearman(accuracy, V_k) = {_fmt(corr['accuracy_vs_variance']['rho'], 3)} "
                 f"over {corr['accuracy_vs_spread']['classes']} classes")
  gamma = np.asarray(result["gamma"], float)
  line = f"γ_k in [{_fmt(float(gamma.min()), 4)}, {_fmt(float(gamma.max()), 4)}]"
  if result["rho"] is not None:
    line += f", ρ = {_fmt(result['rho'], 4)}"
  nc = ", ".join(f"{name.upper()} = {_fmt(value, 4)}" for name, value in result["nc"].items()
                 if value is not None and name != "nc2_classifier")
  lines.append(line + (f", {nc}" if nc else ""))
  if result["confused_pairs"]:
    pair = result["confused_pairs"][0]
    lines.append(f"most confused: {pair['true_name']} → {pair['predicted_name']} "
                 f"({pair['count']}, {_pct(pair['rate'])} % of {pair['true_name']})")
  return lines


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m experiments.diagnose",
      description="Per-class diagnosis (accuracy vs feature spread, MR2 margins, L_c and ρ, "
                  "NC1–NC4, confused pairs) of a training workdir or a saved feature file.")
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--workdir", help="a training workdir (finished or interrupted)")
  source.add_argument("--features", help="an .npz with features [N,d], labels [N], optional "
                      "classifier [K,d], bias [K], logits [N,K], class_names [K]")
  parser.add_argument("--out", help="output folder (default WORKDIR/diagnose or F_diagnose/)")
  parser.add_argument("--top_pairs", type=int, default=10, help="confused pairs to list")
  parser.add_argument("--c_bar", type=float, default=None,
                      help="MR2's mean margin c̄ (default: the run's config.mr2.c_bar, else 1)")
  parser.add_argument("--p", type=float, default=None,
                      help="norm order of A_k, V_k (default: the run's MR2 setting, else 2)")
  args = parser.parse_args(argv)
  try:
    if args.workdir:
      workdir = pathlib.Path(args.workdir)
      data = features_from_workdir(workdir, ("train", "test"))
      train, test = data["train"], data["test"]
      c_bar = args.c_bar if args.c_bar is not None else float(train.config.mr2.c_bar)
      p = args.p if args.p is not None else _mr2_p(train.config)
      result = diagnose(train.features, train.labels, train.num_classes,
                        classifier=train.classifier, bias=train.bias, logits=train.logits,
                        c_bar=c_bar, p=p, eval_labels=test.labels, eval_logits=test.logits,
                        top_pairs=args.top_pairs, class_names=train.class_names)
      result["sources"] = {
          "statistics": f"the training split ({len(train.labels)} examples, as trained on; "
                        f"model in inference mode, no augmentation)",
          "accuracy": f"the test split ({len(test.labels)} examples)"}
      result["run"] = _run_info(workdir.resolve(), train)
      out = pathlib.Path(args.out) if args.out else workdir / "diagnose"
    else:
      inputs = load_feature_file(args.features)
      result = diagnose(inputs["features"], inputs["labels"], inputs["num_classes"],
                        classifier=inputs["classifier"], bias=inputs["bias"],
                        logits=inputs["logits"], c_bar=1.0 if args.c_bar is None else args.c_bar,
                        p=2.0 if args.p is None else args.p, top_pairs=args.top_pairs,
                        class_names=inputs["class_names"])
      path = pathlib.Path(args.features)
      result["sources"] = {key: f"the feature file {path.name} ({result['num_examples']} examples)"
                           for key in ("statistics", "accuracy")}
      out = pathlib.Path(args.out) if args.out else path.with_name(path.stem + "_diagnose")
    report = write_report(result, out)
  except (FileNotFoundError, DiagnoseError) as error:
    print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
    return 2
  print("\n".join(summary_lines(result, report)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
