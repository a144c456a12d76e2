"""Networks and heads by name, and the readers of pretrained weights (`pretrained/`). Like
big_vision's `models/`, one module per family (`resnet32`, `wide_resnet`, `small_cnn`, `resnet50`,
`vit`; their shared `layers`); `zoo` maps `config.model` to one of them; `outputs` is what a model
returns (a method's wrapper adds `Outputs`; the wrappers live with their methods,
`experiments.methods`); `frozen_encoder` runs a network in inference mode for a linear stage."""

from experiments.models.frozen_encoder import FrozenEncoder
from experiments.models.outputs import Outputs
from experiments.models.outputs import count_params
from experiments.models.outputs import split_outputs
from experiments.models.resnet32 import ResNet32
from experiments.models.small_cnn import SmallCNN
from experiments.models.wide_resnet import WideResNet
from experiments.models.zoo import COMPUTE_DTYPES
from experiments.models.zoo import HEADS
from experiments.models.zoo import MODELS
from experiments.models.zoo import create_model

__all__ = ["COMPUTE_DTYPES", "HEADS", "MODELS", "FrozenEncoder", "Outputs", "ResNet32", "SmallCNN",
           "WideResNet", "count_params", "create_model", "split_outputs"]
