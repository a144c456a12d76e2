"""Embedded default: scikit-learn digits, long-tailed (IF = 10), small CNN: `digits.py`'s recipe on
the long-tailed set. Minutes on 2 CPU cores."""

from experiments.configs import digits


def get_config():
  config = digits.get_config()
  config.imbalance_factor = 10.0
  return config
