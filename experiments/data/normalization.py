"""Normalisation of uint8 pixels: the channel (mean, std) of each data set (`NORMALIZATION`) and
`normalize`, a 256-entry table per channel looked up on the host (NumPy) or on the device (jnp),
bit for bit the same float32 values either way."""

from __future__ import annotations

import numpy as np

from experiments.data.in_memory_sources import CIFAR10_JPEG, DIGITS, MNIST
from experiments.data.tfds_source import TFDS_PREFIX

# Channel mean / std of pixel values in [0, 1]. CIFAR-10: the per-channel statistics of the training
# set (std of pixels, not the often-copied 0.2023/0.1994/0.2010, which is a mean of per-image stds).
# CIFAR-100: the same statistics of its training set.
# Digits: statistics of all 1,797 scikit-learn images after scaling 0..16 to 0..255.
# Datasets not listed use 0.5 / 0.5, which maps [0, 1] to [-1, 1].
NORMALIZATION = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    CIFAR10_JPEG: ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    MNIST: ((0.1307,), (0.3081,)),
    DIGITS: ((0.3053,), (0.3759,)),
    # The long-tailed image benchmarks use ImageNet's (as torchvision and the OLTR release do).
    "imagenet_lt": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "places_lt": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "inat2018": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
DEFAULT_NORMALIZATION = ((0.5,), (0.5,))


def normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """The channel (mean, std) of data set `name` (NORMALIZATION, else DEFAULT_NORMALIZATION)."""
  base_name = name.removeprefix(TFDS_PREFIX).split(":")[0].split("/")[0]
  return NORMALIZATION.get(base_name, DEFAULT_NORMALIZATION)


def normalization_table(name_or_constants) -> np.ndarray:
  """float32 [256, C]: entry [v, c] = v · (1 / (255 · std_c)) − mean_c / std_c = (v / 255 − mean_c)
  / std_c, with the constants of data set `name` (`normalization`) or given (mean, std)."""
  mean, std = (normalization(name_or_constants) if isinstance(name_or_constants, str)
               else name_or_constants)
  mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
  return np.arange(256, dtype=np.float32)[:, None] * (1 / (255 * std)) - mean / std


def normalize(images_uint8, name_or_constants, xp=np):
  """float32 (x / 255 − mean) / std per channel of uint8 images [..., C], looked up in
  `normalization_table`: `xp` = np on the host, jnp on the device (the grain pipeline sends
  uint8), bit for bit the same values either way (no fused multiply-add can differ)."""
  table = xp.asarray(normalization_table(name_or_constants))
  channels = images_uint8.shape[-1]
  column = xp.arange(channels) if table.shape[1] > 1 else xp.zeros(channels, np.int32)
  return table[images_uint8, column]
