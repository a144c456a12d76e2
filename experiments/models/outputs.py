"""What a model returns: (logits, features) for a bare network, and in training mode for a method's
wrapper (`experiments.methods.method.Recipe.model`) `Outputs` with the extra outputs its loss reads.
Wrappers keep the base model's parameters where they are (`nn.share_scope`), so evaluation,
checkpoints and NC metrics read them as for the bare model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax


class Outputs(NamedTuple):
  """A wrapper's training-mode outputs.

  Attributes:
    logits: [R, K] of the R rows the model ran on (all views).
    features: [R, d].
    rows: extra outputs with a row per example (cut with the logits to the rows the loss sees).
    shared: extra outputs of the model as a whole (ETF-DR's fixed classifier M).
  """
  logits: jax.Array
  features: jax.Array
  rows: Mapping[str, jax.Array] = {}
  shared: Mapping[str, jax.Array] = {}


def split_outputs(outputs) -> Outputs:
  """`Outputs` of a model's output, with no extras for a bare model's (logits, features)."""
  if isinstance(outputs, Outputs):
    return outputs
  logits, features = outputs
  return Outputs(logits, features)


def count_params(params: Any) -> int:
  """Total number of scalars in a parameter pytree."""
  return sum(int(leaf.size) for leaf in jax.tree.leaves(params))
