"""Every public function of `mr2_jax` and `reweight_jax` that reads labels under a `where` mask,
called on one `Batch` (B rows, K classes): the table that tests/lib/test_padding_labels.py runs
with garbage labels on padding rows, and tests/lib/test_edge_sizes.py at B = 0 and K = 1.

`CALLS` maps each function's public name to a call of it on a batch; `labelled_functions()` lists
the functions that should be there (a `where` and a labels argument), so a new one fails the
completeness tests until it is added.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

import mr2_jax
import reweight_jax
from reweight_jax import baselines


@dataclasses.dataclass(frozen=True)
class Batch:
  """B rows of K classes, d-dimensional features, over a training set of N examples."""
  logits: np.ndarray  # float32 [B, K]
  logits_b: np.ndarray  # float32 [B, K]
  features: np.ndarray  # float32 [B, d]
  views: np.ndarray  # float32 [B, 2, d]
  labels: np.ndarray  # int32 [B]
  labels_b: np.ndarray  # int32 [B]
  losses: np.ndarray  # float32 [B]
  losses_b: np.ndarray  # float32 [B]
  indices: np.ndarray  # int32 [B], distinct in [0, N)
  where: np.ndarray  # bool [B]
  num_classes: int
  num_examples: int

  @property
  def dim(self) -> int:
    return self.features.shape[1]

  def with_padding_labels(self, value: int) -> "Batch":
    """The same batch with every padding row's labels (both label sets) set to `value`."""
    labels = np.where(self.where, self.labels, value).astype(np.int32)
    labels_b = np.where(self.where, self.labels_b, value).astype(np.int32)
    return dataclasses.replace(self, labels=labels, labels_b=labels_b)


def make_batch(batch: int, num_classes: int, *, dim: int = 4, seed: int = 0,
               padding: int = 0) -> Batch:
  """A random batch whose last `padding` rows are padding (`where` False)."""
  rng = np.random.default_rng(seed)
  num_examples = batch + 5
  indices = rng.permutation(num_examples)[:batch].astype(np.int32)
  return Batch(
      logits=rng.normal(size=(batch, num_classes)).astype(np.float32),
      logits_b=rng.normal(size=(batch, num_classes)).astype(np.float32),
      features=rng.normal(size=(batch, dim)).astype(np.float32),
      views=rng.normal(size=(batch, 2, dim)).astype(np.float32),
      labels=indices % num_classes,  # the training set's labels at the indices (`_dataset_labels`)
      labels_b=rng.integers(0, num_classes, batch).astype(np.int32),
      losses=(rng.random(batch) + 0.1).astype(np.float32),
      losses_b=(rng.random(batch) + 0.1).astype(np.float32),
      indices=indices,
      where=np.arange(batch) < batch - padding,
      num_classes=num_classes, num_examples=num_examples)


def _counts(b: Batch):
  return jnp.arange(1.0, b.num_classes + 1.0) * 10.0


def _uniform(b: Batch):
  return jnp.full((b.num_classes,), 1.0 / b.num_classes, jnp.float32)


def _dataset_labels(b: Batch):
  """The training set's labels (LfF reads them beside the batch's): a real row's label is the one
  at its index."""
  return jnp.arange(b.num_examples, dtype=jnp.int32) % b.num_classes


def _classifier(b: Batch):
  """A float32 [d, K] classifier (ETF-DR's M)."""
  return jnp.asarray(np.random.default_rng(7).normal(size=(b.dim, b.num_classes)), jnp.float32)


def _projections_and_mask(projections, labels, where):
  del labels
  return projections, where


def _reweight_kwargs(b: Batch):
  return dict(alpha=0.5, prior=_uniform(b), gamma=0.9, where=b.where)


# Functions that return host (NumPy) values: called eagerly only.
HOST_ONLY = {"mr2_jax.per_class_accuracy"}

CALLS: dict[str, Callable[[Batch], Any]] = {
    "mr2_jax.margin_cross_entropy": lambda b: mr2_jax.margin_cross_entropy(
        b.logits, b.labels, jnp.linspace(0.5, 1.5, b.num_classes), where=b.where),
    "mr2_jax.mr2_loss": lambda b: mr2_jax.mr2_loss(
        b.logits, b.features, b.labels, mr2_jax.init_class_stats(b.num_classes), where=b.where),
    "mr2_jax.mr2_terms": lambda b: mr2_jax.mr2_terms(
        b.logits, b.features, b.labels, mr2_jax.init_class_stats(b.num_classes), where=b.where),
    "mr2_jax.representation_margin_loss": lambda b: mr2_jax.representation_margin_loss(
        b.features, b.labels, 1.0, where=b.where, num_classes=b.num_classes),
    "mr2_jax.update_class_stats": lambda b: mr2_jax.update_class_stats(
        mr2_jax.init_class_stats(b.num_classes), b.features, b.labels, where=b.where),
    "mr2_jax.per_class_accuracy": lambda b: mr2_jax.per_class_accuracy(
        jnp.argmax(b.logits, axis=1), b.labels, b.num_classes, where=b.where),
    "mr2_jax.per_class_correct": lambda b: mr2_jax.per_class_correct(
        jnp.argmax(b.logits, axis=1), b.labels, b.num_classes, where=b.where),
    "mr2_jax.per_class_loss_sums": lambda b: mr2_jax.per_class_loss_sums(
        b.losses, b.labels, b.num_classes, where=b.where),
    "reweight_jax.NCAccumulator.update": lambda b: reweight_jax.NCAccumulator.init(
        b.num_classes, b.dim).update(b.features, b.labels, per_example_loss=b.losses,
                                     where=b.where),
    "reweight_jax.batch_class_losses": lambda b: reweight_jax.batch_class_losses(
        b.losses, b.labels, b.num_classes, where=b.where),
    "reweight_jax.cross_entropy_loss": lambda b: reweight_jax.cross_entropy_loss(
        b.logits, b.labels, where=b.where),
    "reweight_jax.inverse_reweighted_loss": lambda b: reweight_jax.inverse_reweighted_loss(
        b.losses, b.labels, reweight_jax.init_reweight_state(b.num_classes),
        **_reweight_kwargs(b)),
    "reweight_jax.mixed_inverse_reweighted_loss":
        lambda b: reweight_jax.mixed_inverse_reweighted_loss(
            b.losses, b.losses_b, b.labels, b.labels_b, 0.3,
            reweight_jax.init_reweight_state(b.num_classes), **_reweight_kwargs(b)),
    "reweight_jax.nc_metrics": lambda b: reweight_jax.nc_metrics(
        b.features, b.labels, _classifier(b).T, per_example_loss=b.losses, where=b.where),
    "reweight_jax.baselines.balanced_softmax_loss": lambda b: baselines.balanced_softmax_loss(
        b.logits, b.labels, _counts(b), where=b.where),
    "reweight_jax.baselines.class_weighted_loss": lambda b: baselines.class_weighted_loss(
        b.losses, b.labels, _uniform(b), where=b.where),
    "reweight_jax.baselines.dot_regression_loss": lambda b: baselines.dot_regression_loss(
        b.features, b.labels, _classifier(b), where=b.where),
    "reweight_jax.baselines.eql_loss": lambda b: baselines.eql_loss(
        b.logits, b.labels, jnp.arange(b.num_classes) % 2 == 1,
        jnp.ones(b.logits.shape, bool), where=b.where),
    "reweight_jax.baselines.fairdro_loss": lambda b: baselines.fairdro_loss(
        b.losses, b.labels, _uniform(b), where=b.where),
    "reweight_jax.baselines.focal_loss": lambda b: baselines.focal_loss(
        b.logits, b.labels, where=b.where),
    "reweight_jax.baselines.gce_loss": lambda b: baselines.gce_loss(
        b.logits, b.labels, where=b.where),
    "reweight_jax.baselines.given_ew": lambda b: baselines.given_ew(
        b.labels, b.num_classes, where=b.where),
    "reweight_jax.baselines.glmc_loss": lambda b: baselines.glmc_loss(
        b.logits, b.logits_b, b.logits_b, b.logits, b.features, b.views[:, 0], b.views[:, 1],
        b.features, b.labels, b.labels_b, lam=0.3, class_weights=jnp.ones(b.num_classes),
        alpha=0.5, w_con=1.0, where=b.where),
    "reweight_jax.baselines.group_dro_loss": lambda b: baselines.group_dro_loss(
        b.losses, b.labels, _uniform(b), where=b.where),
    "reweight_jax.baselines.ib_loss": lambda b: baselines.ib_loss(
        b.logits, b.labels, b.features, where=b.where),
    "reweight_jax.baselines.jtt_error_set": lambda b: baselines.jtt_error_set(
        b.logits, b.labels, where=b.where),
    "reweight_jax.baselines.ldam_loss": lambda b: baselines.ldam_loss(
        b.logits, b.labels, _counts(b), where=b.where),
    "reweight_jax.baselines.lff_loss": lambda b: baselines.lff_loss(
        b.logits_b, b.logits, b.labels, b.indices, baselines.init_lff_state(b.num_examples),
        _dataset_labels(b), where=b.where),
    "reweight_jax.baselines.lff_weights": lambda b: baselines.lff_weights(
        baselines.init_lff_state(b.num_examples), b.indices, b.labels, _dataset_labels(b),
        b.num_classes, where=b.where),
    "reweight_jax.baselines.logit_adjusted_loss": lambda b: baselines.logit_adjusted_loss(
        b.logits, b.labels, _counts(b), where=b.where),
    "reweight_jax.baselines.mixed_targets": lambda b: baselines.mixed_targets(
        b.labels, b.labels_b, 0.3, b.num_classes, jnp.linspace(0.5, 1.5, b.num_classes),
        where=b.where),
    "reweight_jax.baselines.mixup_dot_regression_loss":
        lambda b: baselines.mixup_dot_regression_loss(
            b.features, b.labels, b.labels_b, 0.3, _classifier(b), where=b.where),
    # The labels come back as given (repeated per view): the projections and the mask are compared.
    "reweight_jax.baselines.stack_views": lambda b: _projections_and_mask(
        *baselines.stack_views(b.views, b.labels, where=b.where)),
    "reweight_jax.baselines.supcon_loss": lambda b: baselines.supcon_loss(
        b.features, b.labels, where=b.where, num_classes=b.num_classes),
}


def public_symbols():
  """(qualified name, value) of every public symbol of the libraries (their `__all__`), but for the
  Flax heads when Flax is not installed."""
  for library in (mr2_jax, reweight_jax, baselines):
    for name in library.__all__:
      try:
        value = getattr(library, name)
      except ModuleNotFoundError:  # the Flax heads, without Flax
        continue
      yield f"{library.__name__}.{name}", value


def _public_functions():
  for qualified, value in public_symbols():
    if inspect.isfunction(value):
      yield qualified, value
    elif inspect.isclass(value):
      for method in ("update", "update_ncc"):
        if inspect.isfunction(getattr(value, method, None)):
          yield f"{qualified}.{method}", getattr(value, method)


def labelled_functions() -> set[str]:
  """The public functions that take a `where` mask and class labels (under the first name the
  libraries export them by: the per-class metrics are `mr2_jax`'s and `reweight_jax`'s both)."""
  found, seen = set(), set()
  for qualified, function in _public_functions():
    parameters = inspect.signature(function).parameters
    if "where" in parameters and any("labels" in name for name in parameters):
      if function not in seen:
        seen.add(function)
        found.add(qualified)
  return found
