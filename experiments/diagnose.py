"""Per-class diagnosis of a trained classifier: who is hard, how spread out, what MR2 would do.

    python -m experiments.diagnose --workdir W            # any finished or interrupted run
    python -m experiments.diagnose --features F.npz       # features of a model trained elsewhere

Writes `report.md`, `diagnose.json` and PNG plots into `--out` (default W/diagnose, or
F_diagnose/ next to the feature file):

* per-class accuracy against per-class feature spread A_k + V_k and V_k (MR2 spec, 'Per-class
  statistics': A_k = ‖μ_k‖_p², V_k = mean_i ‖φ_i − μ_k‖_p², here over the whole set at once), the
  scatter of the MR2 paper's Figure 1b, with Spearman's rank correlation;
* the margins γ_k that MR2 would assign to these statistics (`mr2_jax.class_margins`);
* per-class mean cross-entropy L_c and ρ = std_c L_c / mean_c L_c (`reweight_jax.rho`);
* NC1–NC4 (`reweight_jax.nc_metrics`; NC1 and NC2 of the class means need no classifier);
* the confusion matrix and its most frequent off-diagonal (true → predicted) pairs.

For a workdir the statistics (A_k, V_k, γ_k, L_c, ρ, NC) come from the training split and the
accuracy and confusions from the test split, both through the model in inference mode (running
BatchNorm statistics, no augmentation). For a feature file everything is on the given set.

Feature file (`np.savez`): `features` [N, d] float, `labels` [N] int, optional `classifier` [K, d]
(the rows the decision uses: for a cosine head the normalised rows), `bias` [K], `logits` [N, K]
(otherwise features·Wᵀ + b when a classifier is given) and `class_names` [K] strings.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pathlib
import sys
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from mr2_reweight_core.metrics import class_mean

FEATURE_FILE_KEYS = ("features", "labels", "classifier", "bias", "logits", "class_names")
# Dense confusion matrices above this many classes are not kept (K² counts); pairs still are.
MAX_DENSE_CONFUSION = 2000
# Scatter points and axis ticks carry class names up to this many classes.
MAX_NAMED_CLASSES = 40


class DiagnoseError(ValueError):
  """An input the diagnosis cannot use (reported by the CLI as one line, exit status 2)."""


# ------------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------------

def _float_array(value, name: str, shape: tuple[int | None, ...], shape_doc: str) -> np.ndarray:
  """float64 copy of `value`, checked for rank, shape (None: any), numeric dtype and finiteness."""
  array = np.asarray(value)
  if array.dtype == bool or not (np.issubdtype(array.dtype, np.floating)
                                 or np.issubdtype(array.dtype, np.integer)):
    raise DiagnoseError(f"{name}: expected a float array {shape_doc}, got dtype {array.dtype}")
  if array.ndim != len(shape) or any(want is not None and got != want
                                     for got, want in zip(array.shape, shape)):
    expected = tuple("?" if s is None else s for s in shape)
    raise DiagnoseError(f"{name}: expected shape {shape_doc} = {expected}, got {array.shape}")
  array = array.astype(np.float64)
  bad = int(np.sum(~np.isfinite(array)))
  if bad:
    raise DiagnoseError(f"{name}: {bad} non-finite value(s) (NaN or inf)")
  return array


def check_labels(labels, num_examples: int | None, num_classes: int | None,
                 name: str = "labels") -> np.ndarray:
  """int64 [N] labels; integer dtype (or floats with integral values), in [0, num_classes)."""
  array = np.asarray(labels)
  if array.ndim != 1:
    raise DiagnoseError(f"{name}: expected a 1-D array [N], got shape {array.shape}")
  if num_examples is not None and array.shape[0] != num_examples:
    raise DiagnoseError(f"{name}: expected {num_examples} labels (one per row of the "
                        f"features/logits), got {array.shape[0]}")
  if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer)
                                 or np.issubdtype(array.dtype, np.floating)):
    raise DiagnoseError(f"{name}: expected integer class indices, got dtype {array.dtype}")
  if np.issubdtype(array.dtype, np.floating):
    fractional = ~np.isfinite(array) | (array != np.round(array))
    if np.any(fractional):
      raise DiagnoseError(f"{name}: expected integer class indices, got non-integer value "
                          f"{array[np.argmax(fractional)]!r} ({int(fractional.sum())} such)")
  array = array.astype(np.int64)
  if num_classes is not None and array.size:
    outside = (array < 0) | (array >= num_classes)
    if np.any(outside):
      raise DiagnoseError(f"{name}: values must lie in [0, {num_classes}) for K = {num_classes} "
                          f"classes; got {array[np.argmax(outside)]} ({int(outside.sum())} "
                          f"label(s) out of range)")
  return array


def _check_num_classes(num_classes) -> int:
  if (isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer))
      or num_classes < 1):
    raise DiagnoseError(f"num_classes: expected a positive integer, got {num_classes!r}")
  return int(num_classes)


# ------------------------------------------------------------------------------------------------
# Computation (statistics, γ, L_c, ρ and NC through the library; counts and ranks in NumPy)
# ------------------------------------------------------------------------------------------------

def _class_means(features: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
  """μ_k [K, d] (NaN rows for absent classes) through the one per-class core."""
  sums = np.zeros((num_classes, features.shape[1]))
  np.add.at(sums, labels, features)
  return class_mean(sums, np.bincount(labels, minlength=num_classes))


def rank_average(values: np.ndarray) -> np.ndarray:
  """Ranks 1..n, ties given their average rank (as scipy.stats.rankdata)."""
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  ranks = np.empty(len(values), np.float64)
  start = 0
  while start < len(values):
    stop = start
    while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
      stop += 1
    ranks[order[start:stop + 1]] = 0.5 * (start + stop) + 1.0
    start = stop + 1
  return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
  """Spearman's rank correlation of two [n] vectors over the entries where both are finite.

  Returns {'rho', 'pvalue', 'classes', 'note'}; rho is NaN (with a note) for fewer than 3 classes
  or a constant vector. The two-sided p-value (t approximation) needs scipy; None without it.
  """
  keep = np.isfinite(x) & np.isfinite(y)
  x, y = x[keep], y[keep]
  result = {"rho": math.nan, "pvalue": None, "classes": int(keep.sum()), "note": ""}
  if len(x) < 3:
    result["note"] = f"only {len(x)} class(es) with both values (need 3)"
    return result
  if np.all(x == x[0]) or np.all(y == y[0]):
    result["note"] = "one of the two vectors is constant over these classes"
    return result
  rx, ry = rank_average(x), rank_average(y)
  rx, ry = rx - rx.mean(), ry - ry.mean()
  result["rho"] = float(np.sum(rx * ry) / math.sqrt(np.sum(rx * rx) * np.sum(ry * ry)))
  try:
    from scipy import stats  # pylint: disable=g-import-not-at-top
  except ImportError:
    result["note"] = "p-value needs scipy"
  else:
    result["pvalue"] = float(stats.spearmanr(x, y).pvalue)
  return result


def _nc4_from_logits(features, labels, logits, num_classes, present):
  """NC4 from logits: the fraction of examples whose argmax logit is not the nearest class mean."""
  means = np.nan_to_num(_class_means(features, labels, num_classes))
  distances = np.sum(np.square(means), axis=1) - 2.0 * features @ means.T
  distances = np.where(present, distances, np.inf)
  return float(np.mean(np.argmax(logits, axis=1) != np.argmin(distances, axis=1)))


def _nc_metrics(features, labels, num_classes, classifier, bias, logits, present, skipped):
  """NC1–NC4 with the library; what a missing classifier prevents is None (said in `skipped`)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import reweight_jax  # pylint: disable=g-import-not-at-top
  names = ("nc1", "nc2", "nc2_classifier", "nc3", "nc4")
  if classifier is not None:
    metrics = reweight_jax.nc_metrics(
        jnp.asarray(features, jnp.float32), jnp.asarray(labels, jnp.int32),
        jnp.asarray(classifier, jnp.float32),
        bias=None if bias is None else jnp.asarray(bias, jnp.float32))
    return {name: float(getattr(metrics, name)) for name in names}, "classifier"
  accumulator = reweight_jax.NCAccumulator.init(num_classes, features.shape[1]).update(
      jnp.asarray(features, jnp.float32), jnp.asarray(labels, jnp.int32))
  metrics = accumulator.finalize(jnp.zeros((num_classes, features.shape[1]), jnp.float32))
  result = {"nc1": float(metrics.nc1), "nc2": float(metrics.nc2), "nc2_classifier": None,
            "nc3": None, "nc4": None}
  if logits is not None:
    result["nc4"] = _nc4_from_logits(features, labels, logits, num_classes, present)
    skipped.append("NC2 (classifier) and NC3: no classifier W [K, d] given (NC4 is computed from "
                   "the argmax of the logits)")
  else:
    skipped.append("NC2 (classifier), NC3 and NC4: no classifier W [K, d] and no logits given")
  return result, "logits" if logits is not None else None


def diagnose(features, labels, num_classes: int, classifier=None, bias=None, logits=None,
             c_bar: float = 1.0, *, p: float = 2.0, eval_labels=None, eval_logits=None,
             top_pairs: int = 10, class_names: Sequence[str] | None = None) -> dict[str, Any]:
  """Per-class diagnosis of one model (pure computation; see the module docstring).

  Args:
    features: [N, d] penultimate features φ of the statistics set (a workdir: the training split).
    labels: int [N] in [0, K).
    num_classes: K.
    classifier: optional [K, d] W the decision uses (cosine head: its normalised rows).
    bias: optional [K] classifier bias (with `classifier` only).
    logits: optional [N, K]; default features·Wᵀ + b when a classifier is given.
    c_bar: MR2's mean margin c̄ > 0.
    p: norm order of A_k and V_k (2 as in the paper; MR2's released form uses 5).
    eval_labels, eval_logits: optional [M] and [M, K] of a separate evaluation set (a workdir: the
      test split) for the accuracy and the confusions; default the statistics set itself.
    top_pairs: how many off-diagonal (true → predicted) pairs to list.
    class_names: optional K names.

  Returns:
    A dict of plain Python / NumPy values: per-class arrays [K] (NaN where undefined), the
    confusion matrix [K, K] (or None), the pairs, the rank correlations, NC metrics, ρ, and
    `skipped`: one line per quantity that could not be computed and why.

  Raises:
    DiagnoseError (a ValueError) naming the array for a shape, dtype, range or finiteness problem.
  """
  num_classes = _check_num_classes(num_classes)
  features = _float_array(features, "features", (None, None), "[N, d]")
  num_examples, dim = features.shape
  if num_examples == 0:
    raise DiagnoseError("features: no examples (N = 0)")
  labels = check_labels(labels, num_examples, num_classes)
  if classifier is not None:
    classifier = _float_array(classifier, "classifier", (num_classes, dim), "[K, d]")
  if bias is not None:
    if classifier is None:
      raise DiagnoseError("bias: given without a classifier")
    bias = _float_array(bias, "bias", (num_classes,), "[K]")
  if logits is not None:
    logits = _float_array(logits, "logits", (num_examples, num_classes), "[N, K]")
  if (eval_labels is None) != (eval_logits is None):
    raise DiagnoseError("eval_labels and eval_logits: give both or neither")
  if eval_logits is not None:
    eval_logits = _float_array(eval_logits, "eval_logits", (None, num_classes), "[M, K]")
    eval_labels = check_labels(eval_labels, eval_logits.shape[0], num_classes, "eval_labels")
  if class_names is None:
    class_names = [str(k) for k in range(num_classes)]
  class_names = [str(name) for name in class_names]
  if len(class_names) != num_classes:
    raise DiagnoseError(f"class_names: expected {num_classes} names (one per class), got "
                        f"{len(class_names)}")
  if not c_bar > 0:
    raise DiagnoseError(f"c_bar: expected a positive mean margin, got {c_bar}")
  if not p >= 1:
    raise DiagnoseError(f"p: expected a norm order p >= 1, got {p}")
  if isinstance(top_pairs, bool) or not isinstance(top_pairs, (int, np.integer)) or top_pairs < 0:
    raise DiagnoseError(f"top_pairs: expected a non-negative integer, got {top_pairs!r}")

  skipped: list[str] = []
  logits_source = "given"
  if logits is None and classifier is not None:
    logits = features @ classifier.T + (0.0 if bias is None else bias)
    logits_source = "features·Wᵀ + b"
  elif logits is None:
    logits_source = None

  # MR2 statistics over the whole set, by the library itself: one `update_class_stats` of fresh
  # statistics sets A_k = a_k and V_k = v_k of the set (MR2 spec, 'Per-class statistics').
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import mr2_jax  # pylint: disable=g-import-not-at-top
  import reweight_jax  # pylint: disable=g-import-not-at-top
  counts = np.bincount(labels, minlength=num_classes)
  present = counts > 0
  stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(num_classes),
                                     jnp.asarray(features, jnp.float32), jnp.asarray(labels),
                                     decay=0.0, p=p)
  sq_mean_norm = np.where(present, np.asarray(stats.sq_mean_norm, np.float64), np.nan)
  mean_sq_deviation = np.where(present, np.asarray(stats.mean_sq_deviation, np.float64), np.nan)
  spread = sq_mean_norm + mean_sq_deviation
  gamma = np.asarray(mr2_jax.class_margins(stats, c_bar), np.float64)

  class_loss, rho = None, None
  if logits is not None:
    losses = np.asarray(reweight_jax.cross_entropy_loss(jnp.asarray(logits, jnp.float32),
                                                        jnp.asarray(labels)), np.float64)
    class_loss = class_mean(np.bincount(labels, weights=losses, minlength=num_classes), counts)
    rho = float(reweight_jax.rho(jnp.asarray(np.nan_to_num(class_loss), jnp.float32),
                                 jnp.asarray(present)))
  else:
    skipped.append("L_c and ρ: no logits and no classifier given")

  nc, nc4_source = _nc_metrics(features, labels, num_classes, classifier, bias, logits, present,
                               skipped)
  if present.sum() < 2:
    skipped.append("NC1–NC3: undefined with fewer than two classes present")

  # Accuracy and confusions: on the evaluation set when one is given, else on this set.
  if eval_logits is None:
    eval_labels, eval_logits = labels, logits
  eval_counts = np.bincount(eval_labels, minlength=num_classes)
  accuracy = overall_accuracy = confusion = None
  pairs: list[dict[str, Any]] = []
  if eval_logits is not None:
    predictions = np.argmax(eval_logits, axis=1)
    correct = np.bincount(eval_labels[predictions == eval_labels], minlength=num_classes)
    accuracy = np.where(eval_counts > 0, correct / np.maximum(eval_counts, 1), np.nan)
    overall_accuracy = float(np.mean(predictions == eval_labels)) if len(eval_labels) else math.nan
    codes = eval_labels * num_classes + predictions
    if num_classes <= MAX_DENSE_CONFUSION:
      confusion = np.bincount(codes, minlength=num_classes * num_classes).reshape(
          num_classes, num_classes)
    else:
      skipped.append(f"confusion matrix: K = {num_classes} > {MAX_DENSE_CONFUSION} (only the pairs "
                     f"are kept)")
    mistakes, mistake_counts = np.unique(codes[predictions != eval_labels], return_counts=True)
    true_class, predicted = np.divmod(mistakes, num_classes)
    rates = mistake_counts / eval_counts[true_class]
    order = np.lexsort((predicted, true_class, -rates, -mistake_counts))[:top_pairs]
    pairs = [{"true": int(true_class[i]), "predicted": int(predicted[i]),
              "true_name": class_names[true_class[i]], "predicted_name": class_names[predicted[i]],
              "count": int(mistake_counts[i]), "rate": float(rates[i])} for i in order]
    correlations = {"accuracy_vs_spread": spearman(accuracy, spread),
                    "accuracy_vs_variance": spearman(accuracy, mean_sq_deviation)}
  else:
    skipped.append("accuracy, confusions and the rank correlations: no logits and no classifier "
                   "given")
    correlations = None

  notes = []
  absent = [k for k in range(num_classes) if not present[k]]
  if absent:
    notes.append(f"class(es) {', '.join(class_names[k] for k in absent)} have no example in the "
                 f"statistics set: A_k, V_k, L_c undefined; γ_k = c̄ (MR2's margin for an unseen "
                 f"class); left out of ρ, NC and the correlations")
  single = [k for k in range(num_classes) if counts[k] == 1]
  if single:
    notes.append(f"class(es) {', '.join(class_names[k] for k in single)} have one example: V_k = 0 "
                 f"by construction")
  if eval_logits is not None and np.any(eval_counts == 0):
    missing = [class_names[k] for k in range(num_classes) if eval_counts[k] == 0]
    notes.append(f"class(es) {', '.join(missing)} have no evaluation example: accuracy undefined")
  if logits_source == "features·Wᵀ + b":
    notes.append("logits computed as features·Wᵀ + b from the given classifier")

  return {
      "num_classes": num_classes, "num_examples": int(num_examples), "feature_dim": int(dim),
      "num_eval_examples": int(len(eval_labels)), "class_names": class_names,
      "p": float(p), "c_bar": float(c_bar),
      "count": counts, "eval_count": eval_counts,
      "A": sq_mean_norm, "V": mean_sq_deviation, "A_plus_V": spread, "gamma": gamma,
      "class_loss": class_loss, "rho": rho,
      "accuracy": accuracy, "overall_accuracy": overall_accuracy,
      "confusion": confusion, "confused_pairs": pairs, "spearman": correlations,
      "nc": nc, "nc4_source": nc4_source, "logits_source": logits_source,
      "skipped": skipped, "notes": notes,
      "sources": {"statistics": f"the given set ({num_examples} examples)",
                  "accuracy": f"the given set ({len(eval_labels)} examples)"},
  }


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def _fmt(value, digits: int = 4) -> str:
  if value is None or (isinstance(value, float) and not math.isfinite(value)):
    return "—"
  return f"{value:.{digits}g}"


def _pct(value) -> str:
  if value is None or not math.isfinite(value):
    return "—"
  return f"{100 * value:.1f}"


def _jsonable(value):
  if isinstance(value, dict):
    return {k: _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, np.ndarray):
    return _jsonable(value.tolist())
  if isinstance(value, (np.integer,)):
    return int(value)
  if isinstance(value, (float, np.floating)):
    return float(value) if math.isfinite(value) else None
  return value


def _class_order(result) -> tuple[np.ndarray, str]:
  """Per-class table order: by accuracy (hardest first), else by A_k + V_k (largest first)."""
  k = np.arange(result["num_classes"])
  if result["accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    key = np.where(np.isfinite(accuracy), accuracy, np.inf)
    return np.lexsort((k, key)), "accuracy (lowest first)"
  spread = np.asarray(result["A_plus_V"], float)
  key = np.where(np.isfinite(spread), -spread, np.inf)
  return np.lexsort((k, key)), "A_k + V_k (largest first; no accuracy)"


def markdown_report(result: dict[str, Any], plots: Sequence[str] = ()) -> str:
  names = result["class_names"]
  p_text = "" if result["p"] == 2.0 else f" (L_{result['p']:g} norms)"
  lines = ["# Per-class diagnosis", ""]
  run = result.get("run")
  if run:
    state = ("finished: summary.json present" if run["finished"]
             else "interrupted or still running: no summary.json")
    lines += [f"Run `{run['workdir']}`: loss `{run['loss']}`, dataset `{run['dataset']}`, "
              f"checkpoint step {run['step']} ({state}).", ""]
  lines += [f"- Statistics (A_k, V_k, γ_k, L_c, ρ, NC): {result['sources']['statistics']}.",
            f"- Accuracy and confusions: {result['sources']['accuracy']}.",
            f"- K = {result['num_classes']} classes, feature dimension "
            f"d = {result['feature_dim']}; "
            f"A_k = ‖μ_k‖², V_k = mean ‖φ − μ_k‖²{p_text}; "
            f"γ_k = c̄·K′·(A_k+V_k)^(1/3) / Σ_j (A_j+V_j)^(1/3) over the K′ classes present "
            f"(MR2 spec, 'Logit margin'), c̄ = {result['c_bar']:g}.", ""]

  lines += ["## Summary", ""]
  if result["overall_accuracy"] is not None:
    accuracy = np.asarray(result["accuracy"], float)
    worst = int(np.nanargmin(accuracy)) if np.any(np.isfinite(accuracy)) else None
    lines.append(f"- Overall accuracy {_pct(result['overall_accuracy'])} %"
                 + (f"; worst class {names[worst]} ({_pct(accuracy[worst])} %)"
                    if worst is not None else "")
                 + f"; std of class accuracies {_pct(float(np.nanstd(accuracy)))} points.")
  if result["spearman"]:
    for key, label in (("accuracy_vs_spread", "A_k + V_k"), ("accuracy_vs_variance", "V_k")):
      corr = result["spearman"][key]
      pvalue = "" if corr["pvalue"] is None else f", p = {corr['pvalue']:.3g}"
      note = f" ({corr['note']})" if corr["note"] else ""
      lines.append(f"- Spearman rank correlation of per-class accuracy with {label}: "
                   f"{_fmt(corr['rho'], 3)}{pvalue}, over {corr['classes']} classes{note}.")
    lines.append("  (MR2's premise, paper Figure 1b: negative — classes with spread-out features "
                 "are the hard ones.)")
  if result["rho"] is not None:
    lines.append(f"- Loss imbalance ρ = std_c L_c / mean_c L_c = {_fmt(result['rho'], 4)}.")
  gamma = np.asarray(result["gamma"], float)
  lines.append(f"- MR2 margins γ_k from {_fmt(float(np.min(gamma)), 4)} to "
               f"{_fmt(float(np.max(gamma)), 4)} (mean over present classes = c̄).")
  for note in result["notes"]:
    lines.append(f"- Note: {note}.")
  for skipped in result["skipped"]:
    lines.append(f"- Skipped: {skipped}.")
  lines.append("")

  order, order_text = _class_order(result)
  lines += ["## Per-class table", "", f"Sorted by {order_text}.", ""]
  has_accuracy = result["accuracy"] is not None
  has_loss = result["class_loss"] is not None
  separate_eval = result["sources"]["statistics"] != result["sources"]["accuracy"]
  header = ["class"] + (["accuracy %"] if has_accuracy else []) + [
      "A_k", "V_k", "A_k+V_k", "γ_k"] + (["L_c"] if has_loss else []) + ["n"] + (
      ["n eval"] if separate_eval and has_accuracy else [])
  lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for k in order:
    row = [f"{k}" if names[k] == str(k) else f"{k} {names[k]}"]
    if has_accuracy:
      row.append(_pct(float(result["accuracy"][k])))
    row += [_fmt(float(result[key][k])) for key in ("A", "V", "A_plus_V", "gamma")]
    if has_loss:
      row.append(_fmt(float(result["class_loss"][k])))
    row.append(str(int(result["count"][k])))
    if separate_eval and has_accuracy:
      row.append(str(int(result["eval_count"][k])))
    lines.append("| " + " | ".join(row) + " |")
  lines.append("")

  lines += ["## Neural collapse", "", "| metric | value | what it measures |", "|---|---|---|"]
  meaning = {
      "nc1": "Tr(Σ_W Σ_B⁺)/K: within-class spread relative to between-class spread",
      "nc2": "distance of the centred class means' Gram matrix from a simplex ETF",
      "nc2_classifier": "the same for the classifier rows W Wᵀ",
      "nc3": "‖W/‖W‖ − M/‖M‖‖²: misalignment of classifier and class means",
      "nc4": "fraction of examples where the classifier disagrees with the nearest class mean"
             + (" (classifier decision = argmax of the logits)" if result["nc4_source"] == "logits"
                else "")}
  for name, text in meaning.items():
    value = result["nc"][name]
    lines.append(f"| {name.upper().replace('_CLASSIFIER', ' (W)')} | "
                 f"{'not computed' if value is None else _fmt(value)} | {text} |")
  lines.append("")

  if result["accuracy"] is not None:
    lines += ["## Most confused pairs", "",
              "Off-diagonal entries of the confusion matrix (true → predicted); rate = count / "
              "examples of the true class.", ""]
    if result["confused_pairs"]:
      lines += ["| true | predicted | count | rate % |", "|---|---|---|---|"]
      for pair in result["confused_pairs"]:
        lines.append(f"| {pair['true_name']} | {pair['predicted_name']} | {pair['count']} | "
                     f"{_pct(pair['rate'])} |")
    else:
      lines.append("No mistakes.")
    lines.append("")

  if plots:
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
  return "\n".join(lines)


def _plots(result: dict[str, Any], out: pathlib.Path) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  names = result["class_names"]
  num_classes = result["num_classes"]
  named = num_classes <= MAX_NAMED_CLASSES
  written = []

  def save(fig, name):
    fig.tight_layout()
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    written.append(name)

  if result["accuracy"] is not None:
    accuracy = 100 * np.asarray(result["accuracy"], float)
    for key, label, name, corr_key in (
        ("A_plus_V", "A_k + V_k (class mean squared feature norm)", "accuracy_vs_spread.png",
         "accuracy_vs_spread"),
        ("V", "V_k (mean squared deviation from the class mean)", "accuracy_vs_variance.png",
         "accuracy_vs_variance")):
      x = np.asarray(result[key], float)
      fig, ax = plt.subplots(figsize=(6, 4.5))
      ax.scatter(x, accuracy, s=18)
      if named:
        for k in range(num_classes):
          if np.isfinite(x[k]) and np.isfinite(accuracy[k]):
            ax.annotate(names[k], (x[k], accuracy[k]), fontsize=7, xytext=(3, 2),
                        textcoords="offset points")
      corr = result["spearman"][corr_key]
      ax.set_title(f"Spearman ρ_s = {_fmt(corr['rho'], 3)} over {corr['classes']} classes")
      ax.set_xlabel(label)
      ax.set_ylabel("per-class accuracy (%)")
      ax.grid(alpha=0.3)
      save(fig, name)

  k = np.arange(num_classes)
  width = max(6, min(0.3 * num_classes, 30))
  fig, ax = plt.subplots(figsize=(width, 3.5))
  ax.bar(k, np.asarray(result["gamma"], float))
  ax.axhline(result["c_bar"], color="k", lw=0.8, ls="--", label=f"c̄ = {result['c_bar']:g}")
  ax.set_ylabel("γ_k (MR2 margin)")
  ax.set_xlabel("class")
  ax.legend()
  if named:
    ax.set_xticks(k, names, rotation=90, fontsize=7)
  save(fig, "margins.png")

  if result["class_loss"] is not None:
    fig, ax = plt.subplots(figsize=(width, 3.5))
    ax.bar(k, np.nan_to_num(np.asarray(result["class_loss"], float)))
    ax.set_ylabel("L_c (mean cross-entropy)")
    ax.set_xlabel("class")
    ax.set_title(f"ρ = {_fmt(result['rho'], 3)}")
    if named:
      ax.set_xticks(k, names, rotation=90, fontsize=7)
    save(fig, "class_loss.png")

  if result["confusion"] is not None:
    confusion = np.asarray(result["confusion"], float)
    rates = confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1)
    size = max(5, min(0.3 * num_classes, 20))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(rates, cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="fraction of the true class")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if named:
      ax.set_xticks(k, names, rotation=90, fontsize=7)
      ax.set_yticks(k, names, fontsize=7)
    save(fig, "confusion.png")
  return written


def write_report(result: dict[str, Any], out_dir: str | pathlib.Path) -> pathlib.Path:
  """Writes report.md, diagnose.json and the PNG plots into `out_dir`; returns report.md's path."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  plots = _plots(result, out)
  (out / "diagnose.json").write_text(json.dumps(_jsonable(result), indent=1) + "\n")
  path = out / "report.md"
  path.write_text(markdown_report(result, plots))
  return path


# ------------------------------------------------------------------------------------------------
# Inputs: a workdir or a feature file
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SplitFeatures:
  """A split run through a model: features [N, d], labels [N], logits [N, K], the classifier."""
  features: np.ndarray
  labels: np.ndarray
  logits: np.ndarray
  classifier: np.ndarray
  bias: np.ndarray | None
  class_names: tuple[str, ...]
  num_classes: int
  step: int
  config: Any


def features_from_workdir(workdir: str | pathlib.Path, split: str | Sequence[str] = "train"):
  """Restores the latest checkpoint of a training workdir and runs its model over `split`.

  Every use of the trainer's code is in this function (its helpers are moving to new modules):
  `load_data` rebuilds the splits exactly as trained on (long tail, validation hold-out),
  `models.create_model` the model, `classifier_weights` the decision's W and b. The checkpoint is
  restored without a state template — only its `params` and `batch_stats` are used, and they are
  checked against the model's shapes — so the layout of the rest of the train state (optimizer,
  per-class loss state) does not matter; both the trainer's composite steps ('state' + digest) and
  older single-item steps are read. The digest is not checked (the trainer checks it on resume). The
  manager is read-only: it creates nothing and leaves a still-running job's files alone.

  Args:
    workdir: a run's folder (config.json and checkpoints/; summary.json not needed).
    split: 'train' (the long-tailed training set, as trained on), 'validation' or 'test'; or a
      sequence of them (one restore).

  Returns:
    A `SplitFeatures` (a dict name → `SplitFeatures` for a sequence), in inference mode.

  Raises:
    FileNotFoundError: no workdir, config.json or checkpoint.
    DiagnoseError: an unknown split, data that cannot be loaded, a checkpoint that does not fit.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from experiments import checkpoints as checkpoints_lib  # pylint: disable=g-import-not-at-top
  from experiments import data as data_lib  # pylint: disable=g-import-not-at-top
  from experiments import train as train_lib  # pylint: disable=g-import-not-at-top
  from experiments import train_state  # pylint: disable=g-import-not-at-top
  from experiments.evaluation import classifier_weights  # pylint: disable=g-import-not-at-top

  workdir = pathlib.Path(workdir).resolve()  # orbax needs absolute paths
  splits = [split] if isinstance(split, str) else list(split)
  for name in splits:
    if name not in ("train", "validation", "test"):
      raise DiagnoseError(f"split: expected 'train', 'validation' or 'test', got {name!r}")
  if not workdir.is_dir():
    raise FileNotFoundError(f"--workdir {workdir}: no such directory")
  config_path = workdir / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(f"{config_path}: not found (not a training workdir?)")
  config = ml_collections.ConfigDict(checkpoints_lib.read_saved_config(config_path))

  try:
    train, validation, test = train_lib.load_data(config)
  except data_lib.DataError as error:
    raise DiagnoseError(f"the run's data set cannot be loaded: {error}") from error
  if "validation" in splits and validation is None:
    raise DiagnoseError("split: this run has no validation split (config.validation_fraction = 0)")
  num_classes = train.num_classes
  model = train_state.build_model(config, num_classes)
  try:
    step, variables = checkpoints_lib.read_variables(workdir, model, train.images.shape[1:])
  except checkpoints_lib.CheckpointError as error:
    raise DiagnoseError(str(error)) from error
  classifier, bias = classifier_weights(variables["params"], config.head)
  classifier = np.asarray(classifier, np.float64)
  bias = None if bias is None else np.asarray(bias, np.float64)

  # (logits, features) in inference mode (running BatchNorm statistics); the variables are an
  # argument, not constants folded into the compiled program.
  forward = jax.jit(functools.partial(model.apply, train=False))

  results = {}
  for name in splits:
    data = {"train": train, "validation": validation, "test": test}[name]
    features, logits, labels = [], [], []
    for batch in data_lib.eval_batches(data, config.eval_batch_size):
      batch_logits, batch_features = forward(variables, batch["image"])
      mask = batch["mask"]
      features.append(np.asarray(batch_features)[mask])
      logits.append(np.asarray(batch_logits)[mask])
      labels.append(np.asarray(batch["label"])[mask])
    results[name] = SplitFeatures(
        features=np.concatenate(features).astype(np.float64),
        labels=np.concatenate(labels).astype(np.int64),
        logits=np.concatenate(logits).astype(np.float64), classifier=classifier, bias=bias,
        class_names=tuple(train.class_names), num_classes=num_classes, step=int(step),
        config=config)
  return results[split] if isinstance(split, str) else results


def load_feature_file(path: str | pathlib.Path) -> dict[str, Any]:
  """The arrays of a feature file (see the module docstring) and the inferred number of classes."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"--features {path}: no such file")
  if not zipfile.is_zipfile(path):
    raise DiagnoseError(f"{path}: not a NumPy .npz file (write it with np.savez)")
  try:
    with np.load(path, allow_pickle=False) as archive:
      arrays = {key: archive[key] for key in archive.files}
  except ValueError as error:
    if "pickle" in str(error):
      raise DiagnoseError(f"{path}: holds object arrays; save class_names as strings "
                          f"(np.asarray(names, str)) and the rest as numbers") from error
    raise DiagnoseError(f"{path}: not a NumPy .npz file ({error})") from error
  except (OSError, EOFError) as error:
    raise DiagnoseError(f"{path}: not a NumPy .npz file ({error})") from error
  for key in ("features", "labels"):
    if key not in arrays:
      raise DiagnoseError(f"{path}: missing array {key!r} (has {sorted(arrays)})")
  unknown = sorted(set(arrays) - set(FEATURE_FILE_KEYS))
  if unknown:
    print(f"warning: {path}: ignoring unknown arrays {unknown}; expected {FEATURE_FILE_KEYS}",
          file=sys.stderr)
  inputs = {key: arrays.get(key) for key in FEATURE_FILE_KEYS}
  names = inputs["class_names"]
  if names is not None:
    if names.ndim != 1 or not np.issubdtype(names.dtype, np.str_):
      raise DiagnoseError(f"class_names: expected a 1-D string array [K], got {names.dtype} "
                          f"{names.shape}")
    inputs["class_names"] = [str(name) for name in names]
  if inputs["classifier"] is not None and np.ndim(inputs["classifier"]) == 2:
    num_classes = np.shape(inputs["classifier"])[0]
  elif inputs["logits"] is not None and np.ndim(inputs["logits"]) == 2:
    num_classes = np.shape(inputs["logits"])[1]
  elif inputs["class_names"] is not None:
    num_classes = len(inputs["class_names"])
  else:
    labels = check_labels(inputs["labels"], None, None)
    num_classes = int(labels.max()) + 1 if labels.size else 1
  inputs["num_classes"] = int(num_classes)
  return inputs


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def _run_info(workdir: pathlib.Path, split: SplitFeatures) -> dict[str, Any]:
  config = split.config
  return {"workdir": str(workdir), "loss": config.loss, "dataset": config.dataset,
          "step": split.step, "finished": (workdir / "summary.json").is_file()}


def _mr2_p(config) -> float:
  """The norm order MR2 uses in this run's config (`mr2_jax.objective.form_defaults`)."""
  import mr2_jax  # pylint: disable=g-import-not-at-top
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
