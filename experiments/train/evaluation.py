"""Evaluation: one pass of the compiled, data-parallel `eval_step` over a split, and the summary.

Each split is visited once: per-class correct counts, per-class cross-entropy sums (L_c) and — on the
training set when `config.nc_metrics` — the Neural-Collapse statistics accumulate on the devices as
sums and counts (`steps.EvalSums`). NC4 needs the final class means, so its nearest-class-mean pass
reads the features kept from that one forward pass (N·d floats on the host), not the data again.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import mr2_jax
from mr2_reweight_core import metrics as perclass_metrics
from experiments.methods import registry
from experiments.data import batches
from experiments.data import long_tail
from experiments.train import steps


def classifier_weights(params, head_kind: str) -> tuple[jax.Array, jax.Array | None]:
  """(W [K, d], bias [K] or None) of the classifier the model applies: for the cosine head the
  rows w_c/‖w_c‖ (its scale does not change NC2–NC4), so NC metrics see the decision rule used; for
  the ETF head the fixed Mᵀ (on the normalised features h the model returns)."""
  head = params["head"]
  if head_kind == "etf":
    return jnp.asarray(head["etf"]).T, None
  kernel = jnp.asarray(head["kernel"])
  if head_kind == "cosine":
    kernel = mr2_jax.l2_normalize(kernel, axis=0)
  return kernel.T, head.get("bias")


def process_rows(batch: dict[str, np.ndarray], process_index: int, process_count: int):
  """This process's contiguous share of a global evaluation batch."""
  if process_count == 1:
    return batch
  size = len(batch["label"]) // process_count
  return {k: v[process_index * size:(process_index + 1) * size] for k, v in batch.items()}


def evaluate_split(runner, state, split, batch_size: int, num_classes: int, *,
                   neural_collapse: bool = False, head_kind: str = "linear",
                   process_index: int = 0, process_count: int = 1) -> steps.EvalSums:
  """Host `EvalSums` of `split` (every example once; the padded tail masked). `state` is in the
  runner's layout; `batch_size` is global and divisible by the runner's devices."""
  sums, kept = None, []
  for batch in batches.eval_batches(split, batch_size):
    local = runner.place_batch(process_rows(batch, process_index, process_count))
    if sums is None:
      feature_dim = None
      if neural_collapse:
        shapes = jax.eval_shape(runner.eval_step, state, runner.place_state(
            steps.EvalSums.init(num_classes)), local)
        feature_dim = shapes[1].shape[-1]
      sums = runner.place_state(steps.EvalSums.init(num_classes, feature_dim))
    sums, features = runner.eval_step(state, sums, local)
    if neural_collapse:
      kept.append((features, local["mask"]))
  if neural_collapse:
    weights, bias = classifier_weights(runner.to_host(state).params, head_kind)
    for features, mask in kept:
      sums = runner.ncc_step(sums, features, mask, weights, bias)
  return runner.to_host(sums)


def test_accuracy(sums: steps.EvalSums) -> tuple[float, list[float]]:
  """(overall accuracy, per-class accuracy [K] as a list, NaN for a class without examples) of a
  pass over a split: what the final summary reports (`summarize`) and the periodic test pass
  (`config.test_every_epochs`) logs."""
  return float(sums.correct.sum() / sums.counts.sum()), sums.class_accuracy().tolist()


def training_class_loss(sums: steps.EvalSums) -> tuple[list[float], float]:
  """(L_c [K] as a list, NaN for absent classes; ρ = std_c L_c / mean_c L_c over present classes)."""
  class_loss = sums.class_loss()
  present = sums.counts > 0
  return class_loss.tolist(), float(perclass_metrics.rho(np.nan_to_num(class_loss), present))


def neural_collapse_metrics(sums: steps.EvalSums, head_kind: str, params,
                            centring: str = "sample") -> dict[str, float]:
  """NC1–NC4 and ρ of a pass with the NC statistics; with `centring='class_balanced'` only the
  metrics the centring changes (NC1, NC2, NC2 of W, NC3; `reweight_jax.nc_metrics`)."""
  weights, _ = classifier_weights(params, head_kind)
  metrics = sums.neural_collapse.finalize(weights, centring=centring)._asdict()
  if centring != "sample":
    metrics = {name: metrics[name] for name in ("nc1", "nc2", "nc2_classifier", "nc3")}
  return {name: float(value) for name, value in metrics.items()}


def shot_accuracy(class_accuracy, shot_groups) -> dict[str, float | None]:
  """Many / Medium / Few accuracy: acc_g = mean_{k ∈ g} acc_k over the classes of group g that have
  test examples (`mr2_reweight_core.metrics.group_accuracy` of the `long_tail.many_medium_few`
  groups; Liu et al., CVPR 2019, arXiv 1904.05160). A group without such a class (Few on
  CIFAR-10-LT at IF 100, whose smallest class has 50 examples) is None, the JSON null of a run's
  summary: the one meaning of an empty group (statistics over seeds read it as NaN, and tables
  print "n/a").

  Args:
    class_accuracy: [K] per-class test accuracy (NaN for a class without test examples).
    shot_groups: int [K] `long_tail.MANY` / `MEDIUM` / `FEW` of each class.

  Returns:
    {"many", "medium", "few"}: a float or None each.
  """
  accuracy = perclass_metrics.group_accuracy(class_accuracy, shot_groups)
  return {name: None if np.isnan(value) else float(value)
          for name, value in zip(long_tail.SHOT_NAMES, accuracy)}


def summarize(config, train, test: steps.EvalSums, reference_groups) -> dict[str, Any]:
  """Overall / per-class / Many-Medium-Few / Easy-Medium-Hard test accuracy (fractions)."""
  accuracy = test.class_accuracy()
  overall, per_class = test_accuracy(test)
  summary = {
      "overall_accuracy": overall,
      "per_class_accuracy": per_class,
      "worst_class_accuracy": perclass_metrics.worst_class_accuracy(accuracy),
      "class_accuracy_std": perclass_metrics.class_accuracy_std(accuracy),
      "train_class_counts": train.class_counts.tolist(),
      # The test images per class: a paired Δ in whole images (experiments.report.claims).
      "test_class_counts": np.asarray(test.counts).astype(int).tolist(),
  }
  if config.imbalance_factor > 1:
    summary["many_medium_few"] = shot_accuracy(accuracy,
                                               long_tail.many_medium_few(train.class_counts))
  if reference_groups is not None:
    groups = perclass_metrics.group_accuracy(accuracy, reference_groups)
    summary["easy_medium_hard"] = dict(zip(perclass_metrics.GROUP_NAMES, groups.tolist()))
  return summary


def final_evaluation(config, runner, state, train, validation, test, num_classes, *,
                     process_index: int = 0, process_count: int = 1) -> dict[str, Any]:
  """Test accuracy summary, validation accuracy, the training set's accuracy, L_c, ρ and NC1–NC4
  (one pass over each split), and the loss's final per-class state. `state` in the runner's layout."""
  evaluate = lambda split, **kw: evaluate_split(  # noqa: E731
      runner, state, split, config.eval_batch_size, num_classes, head_kind=config.head,
      process_index=process_index, process_count=process_count, **kw)
  reference_groups = None
  if config.reference_summary:
    reference = json.loads(pathlib.Path(config.reference_summary).read_text())
    reference_groups = perclass_metrics.difficulty_tertiles(reference["per_class_accuracy"])
  summary = summarize(config, train, evaluate(test), reference_groups)
  if validation is not None:
    v = evaluate(validation)
    summary["validation_accuracy"], summary["validation_class_accuracy"] = test_accuracy(v)
  t = evaluate(train, neural_collapse=config.nc_metrics)
  summary["train_accuracy"] = float(t.correct.sum() / t.counts.sum())
  summary["train_class_loss"], summary["train_rho"] = training_class_loss(t)
  host_state = runner.to_host(state)
  summary.update(registry.state_summary(config, host_state.loss_state))
  if config.nc_metrics:
    summary["neural_collapse"] = neural_collapse_metrics(t, config.head, host_state.params)
    # Centred on the mean of the class means: an exact simplex scores 0 at any class counts.
    summary["neural_collapse_balanced"] = neural_collapse_metrics(
        t, config.head, host_state.params, centring="class_balanced")
  return summary
