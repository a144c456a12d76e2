"""One run of a frozen-feature study: a run of the trainer (`experiments.train.train_and_evaluate`)
on the probe's config (`experiments/configs/probe_cifar10.py`: the cached features, the linear head,
its one recipe) with a registry entry under its registry name and its fields set. The studies
(`linear_probe`, `probe_comparison`) name their rows; each row is an entry and its fields.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from experiments.common import overrides as config_overrides
from experiments.configs import probe_cifar10
from experiments.methods import registry
from experiments.train import loop

FEATURES = "lite0-r128"   # the cached features' stem (`experiments.probe.features`)


def probe_config(loss: str, fields: dict[str, Any], seed: int, *, imbalance_factor: float = 1.0,
                 adapter: bool = False, data_dir=None, validation_fraction: float = 0.0):
  """The trainer's config of one run: registry entry `loss` with `fields` ({"tree.field": value},
  a ConfigError names an unknown one), on the linear head, or with `adapter` on the MLP adapter and
  two stored views (the features and the flipped images' features)."""
  config = probe_cifar10.get_config()
  config.loss = loss
  config = registry.with_method_trees(config)  # the loss's sub-trees, to set their fields
  config.seed = seed
  config.data_dir = data_dir
  config.imbalance_factor = imbalance_factor
  config.validation_fraction = validation_fraction
  if adapter:
    config.dataset = f"features:{FEATURES}+flip"
    config.model = "mlp_adapter"
  else:
    config.dataset = f"features:{FEATURES}"
  config = registry.with_method_trees(config)  # the entry's sub-trees, its defaults
  config_overrides.apply_overrides(config, dict(fields), context=f"loss {loss!r}")
  return config


def train(config, workdir: pathlib.Path) -> dict[str, Any]:
  """The summary of the run of `config` in `workdir`: read when the run finished before, else
  trained (resumed from its latest checkpoint)."""
  summary_path = pathlib.Path(workdir) / "summary.json"
  if summary_path.exists():
    return json.loads(summary_path.read_text())
  return loop.train_and_evaluate(config, workdir)


def recipe_record(config) -> dict[str, Any]:
  """The recipe a study's run file records."""
  return {"learning_rate": config.learning_rate, "epochs": config.num_epochs,
          "batch_size": config.batch_size, "momentum": config.momentum,
          "weight_decay": config.weight_decay, "schedule": config.schedule,
          "model": config.model, "dataset": config.dataset}
