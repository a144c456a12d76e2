"""An empty batch (B = 0) and a single class (K = 1), documented per function and tested.

Every public function that takes a batch says in its docstring what B = 0 gives (N = 0 for a
training-set array), and every one that takes classes what K = 1 gives; the functions that read
labels under a mask (tests/batch_calls.py) run at both sizes eagerly and under `jit` with the same
result, and the documented values are checked: losses 0 and states unchanged at B = 0, one-class
cross-entropies 0 and the reweighting's ŵ = (1,) at K = 1.
"""

from __future__ import annotations

import dataclasses
import inspect

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax
import reweight_jax
from reweight_jax import baselines
from tests import batch_calls

# A parameter of one of these names is a batch of rows (or of a training set's rows) ...
BATCH_PARAMETERS = {"logits", "labels", "labels_a", "features", "per_example_loss", "loss_a",
                    "loss_biased", "predictions", "projections", "views", "images_a", "pred_g",
                    "x", "batch", "rows", "error_set"}
# ... and of these, classes (a count, a per-class vector, labels in [0, K), K-wide logits).
CLASS_PARAMETERS = {"num_classes", "class_counts", "counts", "batch_counts", "class_losses",
                    "class_accuracy", "reference_accuracy", "correct", "sums", "stats", "q",
                    "classifier", "logits", "labels", "labels_a"}
# Labels that are only carried along, never read as classes.
NO_CLASSES = {"reweight_jax.baselines.stack_views"}


def _documented():
  functions = dict(batch_calls._public_functions())  # pylint: disable=protected-access
  functions["reweight_jax.NCAccumulator.init"] = reweight_jax.NCAccumulator.init
  functions["reweight_jax.NCAccumulator.finalize"] = reweight_jax.NCAccumulator.finalize
  seen = set()
  for qualified, function in sorted(functions.items()):
    if function in seen:  # the per-class metrics, exported by both libraries
      continue
    seen.add(function)
    parameters = set(inspect.signature(function).parameters)
    yield qualified, function, parameters


def _doc(function):
  return " ".join(inspect.getdoc(function).split())


@pytest.mark.parametrize("qualified, function, parameters", list(_documented()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_a_function_documents_what_b_0_and_k_1_give(qualified, function, parameters):
  doc = _doc(function)
  if parameters & BATCH_PARAMETERS or qualified.endswith("finalize"):
    assert "B = 0" in doc or "N = 0" in doc, f"{qualified}: no B = 0 (or N = 0) in its docstring"
  if parameters & CLASS_PARAMETERS and qualified not in NO_CLASSES:
    assert "K = 1" in doc, f"{qualified}: no K = 1 in its docstring"


def _run(name, batch):
  """The call eagerly and under `jit` (the labels as arguments): both results, host values."""
  call = batch_calls.CALLS[name]
  eager = jax.tree.map(np.asarray, call(batch))
  if name in batch_calls.HOST_ONLY:
    return eager, eager
  jitted = jax.jit(lambda labels, labels_b: call(dataclasses.replace(
      batch, labels=labels, labels_b=labels_b)))(batch.labels, batch.labels_b)
  return eager, jax.tree.map(np.asarray, jitted)


def _assert_close(got, want):
  chex.assert_trees_all_equal_structs(got, want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("name", sorted(batch_calls.CALLS))
def test_an_empty_batch_runs_eagerly_and_under_jit(name):
  eager, jitted = _run(name, batch_calls.make_batch(0, 5))
  _assert_close(jitted, eager)
  for leaf in jax.tree.leaves(eager):  # per-row results are empty, per-class ones are [K]
    assert leaf.ndim == 0 or leaf.shape[0] in (0, 5) or leaf.shape[:1] == (4,), (name, leaf.shape)


EMPTY_BATCH_LOSSES = ("mr2_jax.mr2_loss", "reweight_jax.inverse_reweighted_loss",
                      "reweight_jax.mixed_inverse_reweighted_loss",
                      "reweight_jax.baselines.class_weighted_loss",
                      "reweight_jax.baselines.fairdro_loss",
                      "reweight_jax.baselines.dot_regression_loss",
                      "reweight_jax.baselines.mixup_dot_regression_loss",
                      "reweight_jax.baselines.glmc_loss", "reweight_jax.baselines.group_dro_loss",
                      "reweight_jax.baselines.lff_loss", "reweight_jax.baselines.supcon_loss")


@pytest.mark.parametrize("name", EMPTY_BATCH_LOSSES)
def test_an_empty_batch_has_loss_0(name):
  eager, _ = _run(name, batch_calls.make_batch(0, 5))
  assert float(eager[0]) == 0.0


def test_an_empty_batch_leaves_every_state_unchanged():
  batch = batch_calls.make_batch(0, 5)
  calls = batch_calls.CALLS
  chex.assert_trees_all_equal(calls["mr2_jax.update_class_stats"](batch),
                              mr2_jax.init_class_stats(5))
  chex.assert_trees_all_equal(calls["mr2_jax.mr2_loss"](batch)[1], mr2_jax.init_class_stats(5))
  chex.assert_trees_all_equal(calls["reweight_jax.NCAccumulator.update"](batch),
                              reweight_jax.NCAccumulator.init(5, batch.dim))
  for name in ("reweight_jax.inverse_reweighted_loss",
               "reweight_jax.mixed_inverse_reweighted_loss"):
    chex.assert_trees_all_equal(calls[name](batch)[1], reweight_jax.init_reweight_state(5))
  chex.assert_trees_all_equal(calls["reweight_jax.baselines.group_dro_loss"](batch)[1],
                              baselines.init_group_dro_q(5))
  chex.assert_trees_all_equal(calls["reweight_jax.baselines.lff_loss"](batch)[1],
                              baselines.init_lff_state(batch.num_examples))
  assert np.all(np.isnan(calls["reweight_jax.nc_metrics"](batch)))


@pytest.mark.parametrize("name", sorted(batch_calls.CALLS))
def test_one_class_runs_eagerly_and_under_jit(name):
  eager, jitted = _run(name, batch_calls.make_batch(6, 1, padding=2))
  _assert_close(jitted, eager)


ONE_CLASS_ZERO = ("mr2_jax.margin_cross_entropy", "reweight_jax.cross_entropy_loss",
                  "reweight_jax.baselines.balanced_softmax_loss", "reweight_jax.baselines.eql_loss",
                  "reweight_jax.baselines.focal_loss", "reweight_jax.baselines.gce_loss",
                  "reweight_jax.baselines.ib_loss", "reweight_jax.baselines.ldam_loss",
                  "reweight_jax.baselines.logit_adjusted_loss")


@pytest.mark.parametrize("name", ONE_CLASS_ZERO)
def test_one_class_cross_entropies_are_0(name):
  eager, _ = _run(name, batch_calls.make_batch(6, 1, padding=2))
  np.testing.assert_array_equal(eager, 0.0)


def test_one_class_values_are_as_documented():
  batch = batch_calls.make_batch(6, 1, padding=2)
  real = batch.where
  calls = batch_calls.CALLS
  mean_loss = batch.losses[real].mean()
  loss, _, aux = calls["reweight_jax.inverse_reweighted_loss"](batch)
  np.testing.assert_allclose(loss, mean_loss, rtol=1e-6)
  np.testing.assert_array_equal(aux.class_weights, [1.0])
  loss, _, _ = calls["reweight_jax.mixed_inverse_reweighted_loss"](batch)
  mixed = 0.3 * batch.losses + 0.7 * batch.losses_b
  np.testing.assert_allclose(loss, mixed[real].mean(), rtol=1e-6)
  loss, q, _ = calls["reweight_jax.baselines.group_dro_loss"](batch)
  np.testing.assert_allclose(loss, mean_loss, rtol=1e-6)
  np.testing.assert_array_equal(q, [1.0])
  lam = 0.1  # mr2_loss's default
  loss, stats, aux = mr2_jax.mr2_loss(batch.logits, batch.features, batch.labels,
                                      mr2_jax.init_class_stats(1), c_bar=2.0, where=batch.where)
  np.testing.assert_array_equal(aux.gamma, [2.0])
  assert float(aux.margin_ce) == 0.0
  np.testing.assert_allclose(loss, lam * aux.representation_margin, rtol=1e-6)
  np.testing.assert_array_equal(mr2_jax.class_margins(stats, 2.0), [2.0])
  np.testing.assert_allclose(mr2_jax.mean_class_deviation(stats), stats.mean_sq_deviation[0])
  metrics = calls["reweight_jax.nc_metrics"](batch)
  assert np.all(np.isnan([metrics.nc1, metrics.nc2, metrics.nc2_classifier, metrics.nc3]))
  assert float(metrics.nc4) == 0.0 and float(metrics.rho) == 0.0
  loss, _, aux = calls["reweight_jax.baselines.lff_loss"](batch)
  assert float(loss) == 0.0 and not np.any(aux.weights)
  np.testing.assert_array_equal(calls["reweight_jax.baselines.jtt_error_set"](batch), False)
  for weights in (baselines.inverse_frequency_weights(np.array([7])),
                  baselines.class_balanced_weights(np.array([7]), 0.99),
                  baselines.glmc_class_weights(np.array([7]), 1.2),
                  reweight_jax.macro_factor(jnp.array([3.0]), 0.9),
                  baselines.init_group_dro_q(1), baselines.init_fairdro_q(1),
                  baselines.fairdro_best_response(jnp.array([0.4]))):
    np.testing.assert_allclose(weights, [1.0], rtol=1e-6)
  assert float(mr2_jax.rho(jnp.array([0.4]))) == 0.0
  assert mr2_jax.class_accuracy_std(np.array([0.5])) == 0.0
  with pytest.raises(ValueError, match="at least 2 classes"):
    baselines.etf_classifier(1, 3, 0)
