"""Inverse-view loss reweighting towards Neural Collapse (ICML 2026), with its metrics.

J. Wang, Z. Tong, Z. Xie, Z. Gao, "Rethinking Loss Reweighting for Imbalance Learning as an Inverse
Problem: A Neural Collapse Point of View", ICML 2026, arXiv 2605.10047; the authors released a
PyTorch reference for CIFAR-LT.

The top level is the paper: the inverse weights (`inverse_weights`, `batch_class_losses`), the
macro factor, the reweighted loss and its state and priors (`inverse_reweighted_loss`,
`mixed_inverse_reweighted_loss`, `ReweightState`, `class_prior`), the MiLeLR schedule, the
Neural-Collapse metrics NC1–NC4 and the per-class metrics with ρ (the same set `mr2_jax` exports).
The methods it is compared against and the pipelines it is plugged into (long-tail baselines,
Group DRO, FairDRO, EQL, JTT, LfF, SupCon, ETF-DR, GLMC) are `reweight_jax.baselines`; each
function cites its paper.
"""

from mr2_reweight_core import metrics as _metrics
from mr2_reweight_core.checks import traced_checks
from mr2_reweight_core.cross_entropy import cross_entropy_loss
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
from mr2_reweight_core.version import __version__
from reweight_jax import baselines
from reweight_jax.inverse_weights import BatchClassLosses
from reweight_jax.inverse_weights import batch_class_losses
from reweight_jax.inverse_weights import inverse_weights
from reweight_jax.inverse_weights import mean_class_loss
from reweight_jax.loss import ReweightAux
from reweight_jax.loss import inverse_reweighted_loss
from reweight_jax.macro import macro_factor
from reweight_jax.milelr import milelr_schedule
from reweight_jax.milelr import mittag_leffler_neg
from reweight_jax.milelr import mittag_leffler_order
from reweight_jax.mixed_labels import MixedReweightAux
from reweight_jax.mixed_labels import mixed_inverse_reweighted_loss
from reweight_jax.neural_collapse import NCAccumulator
from reweight_jax.neural_collapse import NCMetrics
from reweight_jax.neural_collapse import nc_metrics
from reweight_jax.priors import PRIOR_KINDS
from reweight_jax.priors import class_prior
from reweight_jax.state import ReweightState
from reweight_jax.state import init_reweight_state

__all__ = [
    "__version__",
    "BatchClassLosses",
    "MixedReweightAux",
    "NCAccumulator",
    "NCMetrics",
    "PRIOR_KINDS",
    "ReweightAux",
    "ReweightState",
    "baselines",
    "batch_class_losses",
    "class_prior",
    "cross_entropy_loss",
    "init_reweight_state",
    "inverse_reweighted_loss",
    "inverse_weights",
    "macro_factor",
    "mean_class_loss",
    "milelr_schedule",
    "mittag_leffler_neg",
    "mittag_leffler_order",
    "mixed_inverse_reweighted_loss",
    "nc_metrics",
    "traced_checks",
]
# The per-class metrics: the one set both libraries export (`mr2_reweight_core.metrics`).
__all__ += _metrics.__all__
