"""What every loss entry is: the `Loss` dataclass (its apply, config sub-trees, state, deferred
start, checks and trainer hooks), the `StepInfo` a loss reads besides the batch, the `EpochPass` of
an epoch-end entry, the initial loss state of each state field (`STATE_INIT`, per class;
`EXAMPLE_STATE_INIT`, per training example) and `_output`, a model wrapper's output that a loss
reads from `StepInfo.outputs`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import mr2_jax
import reweight_jax


class StepInfo(NamedTuple):
  """What a loss may read besides the batch (arrays traced in the step, `axis_name` static)."""
  epoch: jax.Array                 # int, the current epoch (step // steps_per_epoch)
  step_in_epoch: jax.Array         # int
  class_counts: jax.Array          # float32 [K], training-set class counts n_c
  axis_name: str | None = None     # data-parallel axis (pmap / shard_map), None on one device
  rng: jax.Array | None = None     # this step's PRNG key (the same on every device), for losses
                                   # that draw (EQL); a pure function of (run seed, step)
  outputs: dict | None = None      # extra model outputs of the entry's `model` wrapper, rows as the
                                   # logits' (SupCon's 'projection', LfF's 'biased_logits')
  indices: jax.Array | None = None  # int [B] the rows' positions in the training set (LfF)
  mix: tuple | None = None         # (labels_b int [B], λ) of a mixup batch x̃ = λx + (1−λ)x_π:
                                   # the mixed-in rows' labels y_π and the step's λ


LossApply = Callable[..., tuple[jax.Array, dict, dict]]


@dataclasses.dataclass(frozen=True)
class Loss:
  """One training objective.

  Attributes:
    apply: (config, logits, features, labels, loss_state, step_info) → (loss, loss_state, metrics)
      once started.
    reads: the config sub-trees (`CONFIG_TREES` keys) it reads; their ranges are checked.
    state: the loss-state fields it carries (`STATE_INIT` keys).
    start: config field of the start epoch of a deferred entry (None: active from the first step).
    before: the entry trained before `start`.
    check: extra config checks (raise ConfigError).
    epoch_end: (config, loss_state, EpochPass, epoch, num_epochs) → loss_state, for an entry whose
      state is set from a pass over the training set after each epoch (FairDRO's q); the trainer
      runs that pass (eval mode, no augmentation) only for such an entry.
    model: (config, base model) → the model it trains: a wrapper (`experiments.models.registry`) that keeps
      the base model's parameters where they are and adds outputs the entry reads from
      `StepInfo.outputs` in training mode (SupCon's projection head, LfF's biased twin).
    views: augmented views per example in a training batch (SupCon: 2); the step runs the model on
      the V·B views (view-major) with the labels and indices repeated per view.
    sampler: the name of a sampler in `experiments.train.samplers.SAMPLERS`, for an entry that
      trains on an edited training set (JTT's up-sampled error set).
    mixes: whether it takes mixup batches (`StepInfo.mix`, `config.mixup_alpha` > 0): the loss of
      a mixed row against both of its labels, weighted λ and 1 − λ.
    pair: (config, train split) → draw(rng, global batch rows, H, W) → {'rows', 'lam', 'box'}:
      paired batches (GLMC's re-balanced partner of each row, the step's λ and CutMix box;
      `data.train_batches(pair=...)`, mixed in the step by `steps.paired_mix`). Mixup's partners
      come the same way (`mixup_pair`, for every entry that `mixes`).
  """
  apply: LossApply
  reads: tuple[str, ...] = ()
  state: tuple[str, ...] = ()
  start: str | None = None
  before: str = "ce"
  check: Callable[[Any], None] | None = None
  epoch_end: Callable[..., dict] | None = None
  model: Callable[[Any, Any], Any] | None = None
  views: int = 1
  sampler: str | None = None
  mixes: bool = False
  pair: Callable[..., Callable[..., dict]] | None = None


class EpochPass(NamedTuple):
  """Per-class sums of a pass over the training set (float32 [K] each, reduced over devices)."""
  loss_sums: jax.Array     # Σ cross-entropy
  correct: jax.Array       # correct predictions
  counts: jax.Array        # examples


STATE_INIT = {"class_stats": mr2_jax.init_class_stats, "reweight": reweight_jax.init_reweight_state,
              "group_dro_q": reweight_jax.init_group_dro_q, "fairdro_q": reweight_jax.init_fairdro_q}
# Per-example state, from the training labels int [N] (LfF's EMAs and the labels its class maxima
# run over).
EXAMPLE_STATE_INIT = {"lff": lambda labels: reweight_jax.init_lff_state(len(labels)),
                      "lff_labels": lambda labels: jnp.asarray(labels, jnp.int32)}


def _output(info: StepInfo, key: str, loss: str) -> jax.Array:
  if not info.outputs or key not in info.outputs:
    raise ValueError(f"the {loss!r} loss reads the model output {key!r} (StepInfo.outputs), which "
                     f"its model wrapper adds: build the model with `train_state.build_model`")
  return info.outputs[key]
