"""The linear stage of a two-stage method, or a linear probe of a pretrained network, in the trainer:
the base model always in inference mode."""

from __future__ import annotations

import flax.linen as nn
import jax


class FrozenEncoder(nn.Module):
  """The base model always in inference mode (BatchNorm uses its running statistics and does not
  update them): the linear stage of a two-stage method, whose optimiser trains the head only
  (`train_state.create_train_state` with `config.frozen_encoder_from`)."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)

  def __call__(self, x: jax.Array, train: bool):
    del train
    return self.base(x, train=False)
