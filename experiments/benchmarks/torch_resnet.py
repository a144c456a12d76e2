"""PyTorch ResNet-32 (CIFAR, option-A shortcuts), the same network as `experiments.models.ResNet32`.

Used only by the CPU-gap benchmark as the eager-mode reference; PyTorch is an optional benchmark
dependency (`pip install ".[bench]"`), never imported by the library or the trainer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):

  def __init__(self, in_planes: int, planes: int, stride: int):
    super().__init__()
    self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(planes)
    self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
    self.bn2 = nn.BatchNorm2d(planes)
    self.stride, self.extra = stride, planes - in_planes

  def forward(self, x):
    y = F.relu(self.bn1(self.conv1(x)))
    y = self.bn2(self.conv2(y))
    shortcut = x
    if self.stride != 1 or self.extra:
      shortcut = x[:, :, ::self.stride, ::self.stride]
      shortcut = F.pad(shortcut, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))
    return F.relu(y + shortcut)


class ResNet32(nn.Module):
  """3 stages × 5 basic blocks, 16/32/64 channels, global average pool, linear head."""

  def __init__(self, num_classes: int = 10):
    super().__init__()
    self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
    self.bn = nn.BatchNorm2d(16)
    blocks, in_planes = [], 16
    for stage, planes in enumerate((16, 32, 64)):
      for block in range(5):
        blocks.append(BasicBlock(in_planes, planes, 2 if stage > 0 and block == 0 else 1))
        in_planes = planes
    self.blocks = nn.Sequential(*blocks)
    self.head = nn.Linear(64, num_classes)

  def forward(self, x):
    x = F.relu(self.bn(self.stem(x)))
    features = self.blocks(x).mean((2, 3))
    return self.head(features), features


def num_params(model: nn.Module) -> int:
  return sum(p.numel() for p in model.parameters())
