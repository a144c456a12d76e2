"""The methods the inverse-view reweighting (Wang et al., ICML 2026, arXiv 2605.10047) and MR2
(Zhu et al., ICLR 2026, arXiv 2602.00205) are compared against, and the pipelines the reweighting is
plugged into; each function cites its own paper.

One contract, as for the papers' own losses (docs: "The loss contract"): a loss whose value is a sum
of per-row terms returns per-example values [B] like optax's (`logits, labels, ..., *, where=None`;
the reduction is the caller's); a batch objective that couples rows returns `(loss, aux)`, and one
that carries state `(loss, new_state, aux)`, `aux` a NamedTuple. `where` and `axis_name` are
keyword-only everywhere.

Modules, each named for what it computes::

  long_tail            class weights and per-example losses of the long-tail baselines (inverse
                       frequency, class-balanced, focal, LDAM(-DRW), logit adjustment, balanced
                       softmax, IB).
  group_dro, fairdro   class-level Group DRO and FairDRO: the class-weighted loss and its q.
  eql, jtt, lff, supcon  EQL (softmax form), JTT (error set, host-side up-sampler), LfF, SupCon.
  etf_dr, glmc         the ETF-DR and GLMC pipelines' own terms.
  rebalanced_sampling  GLMC's host-side NumPy re-balanced sampler.
  image_mixing         mixup and CutMix on image batches.
  soft_labels          the soft-target cross-entropy and mixed targets.
"""

from reweight_jax.baselines.long_tail import balanced_softmax_loss
from reweight_jax.baselines.long_tail import class_balanced_weights
from reweight_jax.baselines.long_tail import focal_loss
from reweight_jax.baselines.long_tail import ib_loss
from reweight_jax.baselines.long_tail import inverse_frequency_weights
from reweight_jax.baselines.long_tail import ldam_drw_weights
from reweight_jax.baselines.long_tail import ldam_loss
from reweight_jax.baselines.long_tail import ldam_margins
from reweight_jax.baselines.long_tail import logit_adjusted_loss
from reweight_jax.baselines.eql import eql_dropped
from reweight_jax.baselines.eql import eql_dropped_at
from reweight_jax.baselines.eql import eql_loss
from reweight_jax.baselines.eql import eql_rare_classes
from reweight_jax.baselines.etf_dr import dot_regression_loss
from reweight_jax.baselines.etf_dr import etf_classifier
from reweight_jax.baselines.etf_dr import etf_normalize
from reweight_jax.baselines.etf_dr import given_ew
from reweight_jax.baselines.etf_dr import mixup_dot_regression_loss
from reweight_jax.baselines.fairdro import FAIRDRO_SCHEDULES
from reweight_jax.baselines.fairdro import fairdro_best_response
from reweight_jax.baselines.fairdro import fairdro_loss
from reweight_jax.baselines.fairdro import fairdro_step_size
from reweight_jax.baselines.fairdro import fairdro_update
from reweight_jax.baselines.fairdro import init_fairdro_q
from reweight_jax.baselines.glmc import GLMCAux
from reweight_jax.baselines.glmc import glmc_alpha
from reweight_jax.baselines.glmc import glmc_class_weights
from reweight_jax.baselines.glmc import glmc_consistency
from reweight_jax.baselines.glmc import glmc_loss
from reweight_jax.baselines.image_mixing import cutmix
from reweight_jax.baselines.image_mixing import cutmix_box
from reweight_jax.baselines.image_mixing import mix_images
from reweight_jax.baselines.rebalanced_sampling import glmc_rebalanced_indices
from reweight_jax.baselines.rebalanced_sampling import glmc_rebalanced_probabilities
from reweight_jax.baselines.soft_labels import mixed_targets
from reweight_jax.baselines.soft_labels import soft_cross_entropy
from reweight_jax.baselines.group_dro import ClassWeightedAux
from reweight_jax.baselines.group_dro import GroupDROAux
from reweight_jax.baselines.group_dro import class_weighted_loss
from reweight_jax.baselines.group_dro import group_dro_adjustment
from reweight_jax.baselines.group_dro import group_dro_loss
from reweight_jax.baselines.group_dro import init_group_dro_q
from reweight_jax.baselines.jtt import jtt_epoch_length
from reweight_jax.baselines.jtt import jtt_error_set
from reweight_jax.baselines.jtt import jtt_upsampled_indices
from reweight_jax.baselines.lff import LfFAux
from reweight_jax.baselines.lff import LfFState
from reweight_jax.baselines.lff import gce_loss
from reweight_jax.baselines.lff import init_lff_state
from reweight_jax.baselines.lff import lff_loss
from reweight_jax.baselines.lff import lff_update_ema
from reweight_jax.baselines.lff import lff_weights
from reweight_jax.baselines.supcon import SupConAux
from reweight_jax.baselines.supcon import stack_views
from reweight_jax.baselines.supcon import supcon_loss

__all__ = [
    "ClassWeightedAux",
    "FAIRDRO_SCHEDULES",
    "GLMCAux",
    "GroupDROAux",
    "LfFAux",
    "LfFState",
    "SupConAux",
    "balanced_softmax_loss",
    "class_balanced_weights",
    "class_weighted_loss",
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
    "gce_loss",
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
    "init_lff_state",
    "inverse_frequency_weights",
    "jtt_epoch_length",
    "jtt_error_set",
    "jtt_upsampled_indices",
    "ldam_drw_weights",
    "ldam_loss",
    "ldam_margins",
    "lff_loss",
    "lff_update_ema",
    "lff_weights",
    "logit_adjusted_loss",
    "mix_images",
    "mixed_targets",
    "mixup_dot_regression_loss",
    "soft_cross_entropy",
    "stack_views",
    "supcon_loss",
]
