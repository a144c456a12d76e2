"""mr2_jax: MR2 margin regularization (ICLR 2026) as pure JAX functions.

B. Zhu, K. Zhao, J. Cui, Q. Sun, Y. Zhou, X. Yang, H. Zhang, "Reducing Class-Wise Performance
Disparity via Margin Regularization", ICLR 2026, arXiv 2602.00205; the authors released a PyTorch
reference, whose differences from the paper are offered as `form='released'`.

Class statistics are an explicit pytree (`ClassStats`) for the train state. The
per-class machinery (sums and counts, checks, per-class metrics) is the shared core `mr2_reweight_core`; the
per-class metrics are re-exported here, the same set as `reweight_jax` exports.
"""

from typing import TYPE_CHECKING

from mr2_jax.class_stats import ClassStats
from mr2_jax.class_stats import init_class_stats
from mr2_jax.class_stats import update_class_stats
from mr2_jax.lp_norm import lp_sq_norm
from mr2_reweight_core.metrics import GROUP_NAMES
from mr2_reweight_core.metrics import accuracy_from_counts
from mr2_reweight_core.metrics import class_accuracy_std
from mr2_reweight_core.metrics import class_mean
from mr2_reweight_core.metrics import difficulty_tertiles
from mr2_reweight_core.metrics import group_accuracy
from mr2_reweight_core.metrics import per_class_accuracy
from mr2_reweight_core.metrics import per_class_correct
from mr2_reweight_core.metrics import per_class_loss_sums
from mr2_reweight_core.metrics import rho
from mr2_reweight_core.metrics import worst_class_accuracy
from mr2_jax.heads import l2_normalize
from mr2_jax.margins import class_margins
from mr2_jax.margins import margin_cross_entropy
from mr2_jax.objective import MR2Aux
from mr2_jax.objective import MR2Margins
from mr2_jax.objective import mr2_loss
from mr2_jax.objective import mr2_terms
from mr2_jax.representation_margin import mean_class_deviation
from mr2_jax.representation_margin import representation_margin_loss
from mr2_reweight_core import metrics as _metrics
from mr2_reweight_core.checks import traced_checks
from mr2_reweight_core.version import __version__

if TYPE_CHECKING:
  from mr2_jax.linen import CosineClassifier
  from mr2_jax.linen import SupConProjection

# The Flax heads, imported on first use: the losses need no Flax (`pip install "mr2-jax[flax]"`).
_FLAX_HEADS = {"CosineClassifier": "mr2_jax.linen", "SupConProjection": "mr2_jax.linen"}


def __getattr__(name: str):
  if name in _FLAX_HEADS:
    import importlib
    try:
      module = importlib.import_module(_FLAX_HEADS[name])
    except ModuleNotFoundError as error:
      if error.name is None or not error.name.startswith("flax"):
        raise
      raise ModuleNotFoundError(
          f"mr2_jax.{name} is a Flax module and Flax is not installed: "
          'pip install "mr2-jax[flax]"', name=error.name) from error
    return getattr(module, name)
  raise AttributeError(f"module 'mr2_jax' has no attribute {name!r}")


__all__ = [
    "__version__",
    "ClassStats",
    "CosineClassifier",
    "MR2Aux",
    "MR2Margins",
    "SupConProjection",
    "class_margins",
    "init_class_stats",
    "l2_normalize",
    "lp_sq_norm",
    "margin_cross_entropy",
    "mean_class_deviation",
    "mr2_loss",
    "mr2_terms",
    "representation_margin_loss",
    "traced_checks",
    "update_class_stats",
]
# The per-class metrics: the one set both libraries export (`mr2_reweight_core.metrics`).
__all__ += _metrics.__all__
