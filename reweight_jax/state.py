"""State carried across steps by `inverse_reweighted_loss` (REWEIGHT spec, 'Two levels')."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mr2_reweight_core.checks import check_num_classes


class ReweightState(NamedTuple):
  """Macro-level state (a NamedTuple, hence a registered pytree; checkpoint it with the model).

  Attributes:
    batch_counts: float32 [K], B_c, the number of (global) batches that contained class c since
      reweighting started. Exact as float32 up to 2^24 batches.
    beta: float32 [K], the macro factor β in use, recomputed from `batch_counts` whenever the loss is
      called with `refresh_macro=True`.
  """
  batch_counts: jax.Array
  beta: jax.Array


def init_reweight_state(num_classes: int) -> ReweightState:
  """B_c = 0 and β = 1 for all K classes (call when reweighting starts, e.g. epoch 160 of 200)."""
  num_classes = check_num_classes(num_classes)
  return ReweightState(batch_counts=jnp.zeros((num_classes,), jnp.float32),
                       beta=jnp.ones((num_classes,), jnp.float32))
