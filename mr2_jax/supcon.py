"""Deprecated alias of `reweight_jax.baselines.supcon`: SupCon is a comparison method and moved to
`reweight_jax` in 0.2.0. This module and the names `mr2_jax.supcon_loss`, `mr2_jax.stack_views` and
`mr2_jax.SupConAux` keep working, with a `DeprecationWarning`, until 0.3.0."""

import warnings

from reweight_jax.baselines.supcon import SupConAux
from reweight_jax.baselines.supcon import stack_views
from reweight_jax.baselines.supcon import supcon_loss

warnings.warn("mr2_jax.supcon moved to reweight_jax.baselines.supcon (SupCon is a comparison method); the "
              "old path goes in 0.3.0", DeprecationWarning, stacklevel=2)

__all__ = ["SupConAux", "stack_views", "supcon_loss"]
