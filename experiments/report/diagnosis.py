"""Per-class diagnosis of a trained classifier, the computation: who is hard, how spread out, what
MR2 would do (the command is `python -m experiments.diagnose`; its Markdown report and plots are
`experiments.report.diagnosis_report`; a run's features come from `experiments.train.run_features`). It computes

* per-class accuracy against per-class feature spread A_k + V_k and V_k (MR2 spec, 'Per-class
  statistics': A_k = ‖μ_k‖_p², V_k = mean_i ‖φ_i − μ_k‖_p², here over the whole set at once), the
  scatter of the MR2 paper's Figure 1b, with Spearman's rank correlation;
* the margins γ_k that MR2 would assign to these statistics (`mr2_jax.class_margins`);
* per-class mean cross-entropy L_c and ρ = std_c L_c / mean_c L_c
  (`mr2_reweight_core.metrics.rho`);
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

import math
import pathlib
import sys
import zipfile
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
import scipy.stats

import mr2_jax
import reweight_jax
from mr2_reweight_core import metrics as perclass_metrics
from experiments.common.errors import DiagnoseError

FEATURE_FILE_KEYS = ("features", "labels", "classifier", "bias", "logits", "class_names")
# Dense confusion matrices above this many classes are not kept (K² counts); pairs still are.
MAX_DENSE_CONFUSION = 2000
# Scatter points and axis ticks carry class names up to this many classes.
MAX_NAMED_CLASSES = 40



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
# Computation (statistics, γ, per-class L_c and accuracy, ρ and NC through the library; confusion
# counts in NumPy, ranks by SciPy)
# ------------------------------------------------------------------------------------------------

def _class_means(features: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
  """μ_k [K, d] (NaN rows for absent classes) through the one per-class core."""
  sums = np.zeros((num_classes, features.shape[1]))
  np.add.at(sums, labels, features)
  return perclass_metrics.class_mean(sums, np.bincount(labels, minlength=num_classes))


def spearman(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
  """Spearman's rank correlation of two [n] vectors over the entries where both are finite.

  Returns {'rho', 'pvalue', 'classes', 'note'}; rho is NaN (with a note) for fewer than 3 classes
  or a constant vector (pvalue None then). The two-sided p-value (t approximation) is scipy's.
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
  rx, ry = scipy.stats.rankdata(x), scipy.stats.rankdata(y)  # ranks 1..n, ties their average
  rx, ry = rx - rx.mean(), ry - ry.mean()
  result["rho"] = float(np.sum(rx * ry) / math.sqrt(np.sum(rx * rx) * np.sum(ry * ry)))
  result["pvalue"] = float(scipy.stats.spearmanr(x, y).pvalue)
  return result


def _nc4_from_logits(features, labels, logits, num_classes, present):
  """NC4 from logits: the fraction of examples whose argmax logit is not the nearest class mean."""
  means = np.nan_to_num(_class_means(features, labels, num_classes))
  distances = np.sum(np.square(means), axis=1) - 2.0 * features @ means.T
  distances = np.where(present, distances, np.inf)
  return float(np.mean(np.argmax(logits, axis=1) != np.argmin(distances, axis=1)))


def _nc_metrics(features, labels, num_classes, classifier, bias, logits, present, skipped):
  """NC1–NC4 with the library; what a missing classifier prevents is None (said in `skipped`)."""
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
             top_pairs: int = 10, class_names: Sequence[str] | None = None,
             l2_statistics: bool = False) -> dict[str, Any]:
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
    l2_statistics: A_k and V_k (and γ) of φ/‖φ‖₂, as MR2 reads them with `config.mr2.features='l2'`;
      the Neural-Collapse metrics always read φ.

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
  counts = np.bincount(labels, minlength=num_classes)
  present = counts > 0
  read = jnp.asarray(features, jnp.float32)
  stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(num_classes),
                                     mr2_jax.l2_normalize(read) if l2_statistics else read,
                                     jnp.asarray(labels), decay=0.0, p=p)
  sq_mean_norm = np.where(present, np.asarray(stats.sq_mean_norm, np.float64), np.nan)
  mean_sq_deviation = np.where(present, np.asarray(stats.mean_sq_deviation, np.float64), np.nan)
  spread = sq_mean_norm + mean_sq_deviation
  gamma = np.asarray(mr2_jax.class_margins(stats, c_bar), np.float64)

  class_loss, rho = None, None
  if logits is not None:
    losses = reweight_jax.cross_entropy_loss(jnp.asarray(logits, jnp.float32), jnp.asarray(labels))
    loss_sums, _ = perclass_metrics.per_class_loss_sums(losses, labels, num_classes)
    # L_c as the trainer's evaluation pass sums it
    class_loss = perclass_metrics.class_mean(loss_sums, counts)
    rho = float(perclass_metrics.rho(jnp.asarray(np.nan_to_num(class_loss), jnp.float32),
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
    accuracy = perclass_metrics.per_class_accuracy(predictions, eval_labels, num_classes)
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


