"""State carried across steps by `inverse_reweighted_loss` (Wang et al.,
ICML 2026, arXiv 2605.10047: the macro level)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mr2_reweight_core.checks import check_num_classes


class ReweightState(NamedTuple):
  r"""Macro-level state (a NamedTuple, hence a registered pytree; checkpoint it with the model).

  Wang et al., ICML 2026, arXiv 2605.10047: the batch counts B_c of the macro level.

  Attributes:
    batch_counts: float32 [K], B_c, the number of (global) batches that contained class c since
      reweighting started. Exact as float32 up to :math:`2^{24}` batches.
    beta: float32 [K], the macro factor β in use, recomputed from `batch_counts` whenever the loss is
      called with `refresh_macro=True`.
    skipped_rows: int32 scalar, the real rows (inside `where`) left out since reweighting started:
      a label outside [0, K) or a non-finite loss (docs: "Failure modes").
  """
  batch_counts: jax.Array
  beta: jax.Array
  skipped_rows: ArrayLike = np.int32(0)  # 0 when not given (built before the field existed)


def init_reweight_state(num_classes: int) -> ReweightState:
  """B_c = 0 and β = 1 for all K classes (call when reweighting starts, e.g. epoch 160 of 200).

  Wang et al., ICML 2026, arXiv 2605.10047: the macro level counts batches from the start of the
  reweighting, and the released recipe starts it at epoch 160 of 200 (the authors' README points to
  Appendix F of the paper for the hyper-parameters).

  K = 1: [1] vectors, as for any K.

  Args:
    num_classes: K, a positive Python int.

  Returns:
    `ReweightState` with float32 [K] counts 0, β 1 and `skipped_rows` 0.

  Raises:
    TypeError: `num_classes` is not an int.
    ValueError: `num_classes` < 1.

  Examples:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import reweight_jax
    >>> state = reweight_jax.init_reweight_state(3)
    >>> print(state.batch_counts, state.beta)
    [0. 0. 0.] [1. 1. 1.]
  """
  num_classes = check_num_classes(num_classes)
  return ReweightState(batch_counts=jnp.zeros((num_classes,), jnp.float32),
                       beta=jnp.ones((num_classes,), jnp.float32),
                       skipped_rows=jnp.zeros((), jnp.int32))
