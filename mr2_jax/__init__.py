"""mr2_jax: MR2 margin regularization (ICLR 2026) as pure JAX functions.

Spec: MR2.md. Class statistics are an explicit pytree (`ClassStats`) for the train state. The
per-class machinery (sums and counts, checks, per-class metrics) is the shared core `_perclass`; the
evaluation helpers are re-exported here.
"""

from mr2_jax.class_stats import ClassStats
from mr2_jax.class_stats import init_class_stats
from mr2_jax.class_stats import lp_sq_norm
from mr2_jax.class_stats import update_class_stats
from _perclass.metrics import GROUP_NAMES
from _perclass.metrics import accuracy_from_counts
from _perclass.metrics import class_accuracy_std
from _perclass.metrics import difficulty_tertiles
from _perclass.metrics import group_accuracy
from _perclass.metrics import per_class_accuracy
from _perclass.metrics import per_class_correct
from _perclass.metrics import worst_class_accuracy
from mr2_jax.heads import CosineClassifier
from mr2_jax.heads import l2_normalize
from mr2_jax.margins import class_margins
from mr2_jax.margins import margin_cross_entropy
from mr2_jax.objective import mr2_loss
from mr2_jax.objective import mr2_terms
from mr2_jax.representation_margin import mean_class_deviation
from mr2_jax.representation_margin import representation_margin_loss
from mr2_jax.supcon import SupConAux
from mr2_jax.supcon import SupConProjection
from mr2_jax.supcon import stack_views
from mr2_jax.supcon import supcon_loss
from _perclass.checks import traced_checks

__all__ = [
    "GROUP_NAMES",
    "ClassStats",
    "CosineClassifier",
    "SupConAux",
    "SupConProjection",
    "accuracy_from_counts",
    "class_accuracy_std",
    "class_margins",
    "difficulty_tertiles",
    "group_accuracy",
    "init_class_stats",
    "l2_normalize",
    "lp_sq_norm",
    "margin_cross_entropy",
    "mean_class_deviation",
    "mr2_loss",
    "mr2_terms",
    "per_class_accuracy",
    "per_class_correct",
    "representation_margin_loss",
    "stack_views",
    "supcon_loss",
    "traced_checks",
    "update_class_stats",
    "worst_class_accuracy",
]
