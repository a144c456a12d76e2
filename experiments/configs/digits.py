"""Embedded balanced digits (scikit-learn, 8×8, 10 classes), small CNN: MR2's setting (balanced data,
class-wise disparity) for the main job. Seconds per run on 2 CPU cores."""

from experiments.configs import digits_lt


def get_config():
  config = digits_lt.get_config()
  config.imbalance_factor = 1.0
  return config
