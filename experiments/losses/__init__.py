"""The loss registry: one entry per method, built from the method modules (`experiments.methods`),
keyed by `config.loss`; what a run's loss function is (`make_loss_fn`: the deferred start as one
`lax.cond`), its initial state and the types a loss reads besides the batch."""

from experiments.losses.registry import CONFIG_TREES
from experiments.losses.registry import REGISTRY
from experiments.losses.registry import get
from experiments.losses.registry import init_loss_state
from experiments.losses.registry import make_loss_fn
from experiments.losses.registry import phases
from experiments.losses.registry import registered
from experiments.losses.registry import start_epoch
from experiments.losses.registry import start_fields
from experiments.losses.registry import takes_mixup
from experiments.methods.method import EpochPass
from experiments.methods.method import Method
from experiments.methods.method import Mix
from experiments.methods.method import RecipeInputs
from experiments.methods.method import StepInfo

__all__ = ["CONFIG_TREES", "REGISTRY", "EpochPass", "Method", "Mix", "RecipeInputs", "StepInfo",
           "get", "init_loss_state", "make_loss_fn", "phases", "registered", "start_epoch",
           "start_fields", "takes_mixup"]
