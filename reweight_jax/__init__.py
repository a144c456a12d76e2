"""Inverse-view loss reweighting towards Neural Collapse, with baselines and metrics.

J. Wang, Z. Tong, Z. Xie, Z. Gao, "Rethinking Loss Reweighting for Imbalance Learning as an Inverse
Problem: A Neural Collapse Point of View", ICML 2026, arXiv 2605.10047; the authors released a
PyTorch reference for CIFAR-LT. Also: the long-tail baselines it is compared against, the
comparison methods of MR2 (Zhu et al., ICLR 2026, arXiv 2602.00205), the ETF-DR and GLMC
pipelines the reweighting is plugged into, Neural-Collapse metrics and the MiLeLR schedule; each
function cites its paper.
"""

from mr2_reweight_core.checks import traced_checks
from mr2_reweight_core.cross_entropy import cross_entropy_loss
from mr2_reweight_core.metrics import class_mean
from mr2_reweight_core.metrics import per_class_loss_sums
from mr2_reweight_core.metrics import rho
from reweight_jax.baselines import balanced_softmax_loss
from reweight_jax.baselines import class_balanced_weights
from reweight_jax.baselines import focal_loss
from reweight_jax.baselines import ib_loss
from reweight_jax.baselines import inverse_frequency_weights
from reweight_jax.baselines import ldam_drw_weights
from reweight_jax.baselines import ldam_loss
from reweight_jax.baselines import ldam_margins
from reweight_jax.baselines import logit_adjusted_loss
from reweight_jax.eql import eql_dropped
from reweight_jax.eql import eql_dropped_at
from reweight_jax.eql import eql_loss
from reweight_jax.eql import eql_rare_classes
from reweight_jax.etf_dr import dot_regression_loss
from reweight_jax.etf_dr import etf_classifier
from reweight_jax.etf_dr import etf_normalize
from reweight_jax.etf_dr import given_ew
from reweight_jax.etf_dr import mixup_dot_regression_loss
from reweight_jax.fairdro import FAIRDRO_SCHEDULES
from reweight_jax.fairdro import fairdro_best_response
from reweight_jax.fairdro import fairdro_loss
from reweight_jax.fairdro import fairdro_step_size
from reweight_jax.fairdro import fairdro_update
from reweight_jax.fairdro import init_fairdro_q
from reweight_jax.glmc import GLMCAux
from reweight_jax.image_mixing import cutmix
from reweight_jax.image_mixing import cutmix_box
from reweight_jax.glmc import glmc_alpha
from reweight_jax.glmc import glmc_class_weights
from reweight_jax.glmc import glmc_consistency
from reweight_jax.glmc import glmc_loss
from reweight_jax.rebalanced_sampling import glmc_rebalanced_indices
from reweight_jax.rebalanced_sampling import glmc_rebalanced_probabilities
from reweight_jax.image_mixing import mix_images
from reweight_jax.soft_labels import mixed_targets
from reweight_jax.soft_labels import soft_cross_entropy
from reweight_jax.group_dro import ClassWeightedAux
from reweight_jax.group_dro import GroupDROAux
from reweight_jax.group_dro import class_weighted_loss
from reweight_jax.group_dro import group_dro_adjustment
from reweight_jax.group_dro import group_dro_loss
from reweight_jax.group_dro import init_group_dro_q
from reweight_jax.inverse_weights import BatchClassLosses
from reweight_jax.inverse_weights import batch_class_losses
from reweight_jax.inverse_weights import inverse_weights
from reweight_jax.inverse_weights import mean_class_loss
from reweight_jax.jtt import jtt_epoch_length
from reweight_jax.jtt import jtt_error_set
from reweight_jax.jtt import jtt_upsampled_indices
from reweight_jax.lff import LfFAux
from reweight_jax.lff import LfFState
from reweight_jax.lff import gce_loss
from reweight_jax.lff import init_lff_state
from reweight_jax.lff import lff_loss
from reweight_jax.lff import lff_update_ema
from reweight_jax.lff import lff_weights
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
from reweight_jax.supcon import SupConAux
from reweight_jax.supcon import stack_views
from reweight_jax.supcon import supcon_loss
from mr2_reweight_core.version import __version__

__all__ = [
    "__version__",
    "FAIRDRO_SCHEDULES",
    "PRIOR_KINDS",
    "BatchClassLosses",
    "ClassWeightedAux",
    "GLMCAux",
    "GroupDROAux",
    "MixedReweightAux",
    "NCAccumulator",
    "NCMetrics",
    "ReweightAux",
    "ReweightState",
    "SupConAux",
    "balanced_softmax_loss",
    "batch_class_losses",
    "class_balanced_weights",
    "class_mean",
    "class_prior",
    "class_weighted_loss",
    "cross_entropy_loss",
    "cutmix",
    "cutmix_box",
    "dot_regression_loss",
    "eql_dropped",
    "eql_dropped_at",
    "eql_loss",
    "eql_rare_classes",
    "etf_classifier",
    "etf_normalize",
    "fairdro_best_response",
    "fairdro_loss",
    "fairdro_step_size",
    "fairdro_update",
    "focal_loss",
    "given_ew",
    "glmc_alpha",
    "glmc_class_weights",
    "glmc_consistency",
    "glmc_loss",
    "glmc_rebalanced_indices",
    "glmc_rebalanced_probabilities",
    "group_dro_adjustment",
    "group_dro_loss",
    "ib_loss",
    "init_fairdro_q",
    "init_group_dro_q",
    "init_reweight_state",
    "inverse_frequency_weights",
    "inverse_reweighted_loss",
    "inverse_weights",
    "ldam_drw_weights",
    "ldam_loss",
    "ldam_margins",
    "logit_adjusted_loss",
    "macro_factor",
    "milelr_schedule",
    "mittag_leffler_neg",
    "mittag_leffler_order",
    "mix_images",
    "mixed_inverse_reweighted_loss",
    "mixed_targets",
    "mixup_dot_regression_loss",
    "mean_class_loss",
    "nc_metrics",
    "per_class_loss_sums",
    "rho",
    "soft_cross_entropy",
    "traced_checks",
    "LfFAux",
    "LfFState",
    "gce_loss",
    "init_lff_state",
    "jtt_epoch_length",
    "jtt_error_set",
    "jtt_upsampled_indices",
    "lff_loss",
    "lff_update_ema",
    "lff_weights",
    "stack_views",
    "supcon_loss",
]
