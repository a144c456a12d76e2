"""A run's encoder from a PyTorch weight file: `config.pretrained` (fine-tuning: every variable but
the head starts from the file) and `config.frozen_encoder_from=<file>` (a linear probe: the same,
the encoder then frozen). One converter per model of `experiments.models` that has a PyTorch
counterpart (`CONVERTERS`: torchvision's ResNet-50, timm's ViT-B/16); the file is read without
executing code (`torch_state_dict.load_state_dict`). The head always starts from the model's own
initialisation (a file's classifier, if it has one, is left out): the task's classes are not the
pre-training's.
"""

from __future__ import annotations

import pathlib
import pickle
import warnings

import jax
import numpy as np

from experiments.common.errors import ConfigError
from experiments.models.pretrained import torch_state_dict as tsd

CONVERTERS = {"resnet50": tsd.resnet50_params_from_torch, "vit_b16": tsd.vit_params_from_torch}
SUFFIXES = (".safetensors", *tsd.TORCH_SUFFIXES)


def is_weight_file(path: str | pathlib.Path) -> bool:
  """Whether `path` names a weight file (by its suffix) rather than a run's workdir."""
  return pathlib.Path(path).suffix in SUFFIXES


def encoder_variables(path: str | pathlib.Path, model_name: str, model, field: str) -> dict:
  """{'params', 'batch_stats'} of `model` (config.model `model_name`, unwrapped) from the weight
  file at `path`, without the head. ConfigError (naming `field`) for a model without a converter,
  a missing or unreadable file, or tensors that do not fit the model."""
  if model_name not in CONVERTERS:
    raise ConfigError(f"config.{field}: no PyTorch weights convert into config.model="
                      f"{model_name!r}; models with a converter: {sorted(CONVERTERS)}")
  path = pathlib.Path(path).expanduser()
  if not path.is_file():
    raise ConfigError(f"config.{field}: weight file not found: {path}")
  unreadable = [ValueError, OSError, pickle.UnpicklingError]
  try:
    # optional: safetensors only when installed (its error is then one of the unreadable ones)
    from safetensors import SafetensorError  # pylint: disable=g-import-not-at-top
    unreadable.append(SafetensorError)
  except ImportError:
    pass
  try:
    state_dict = tsd.load_state_dict(path)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", tsd.HeadNotLoaded)  # the head is the model's own anyway
      variables = CONVERTERS[model_name](state_dict, model)
  except tuple(unreadable) as error:
    raise ConfigError(f"config.{field}: {path}: {str(error).splitlines()[0][:300]}") from error
  variables = {collection: {k: v for k, v in tree.items() if k != "head"}
               for collection, tree in variables.items()}
  return jax.tree.map(np.asarray, variables)


def with_encoder(state, variables: dict):
  """`state` with its params / batch_stats replaced by `variables` wherever those have an entry
  (the head and any loss wrapper's extra parameters keep theirs)."""
  def merge(template: dict, loaded: dict) -> dict:
    missing = sorted(set(loaded) - set(template))
    if missing:
      raise ConfigError(f"pretrained weights hold {missing}, which the model does not have")
    return {key: loaded.get(key, value) for key, value in template.items()}
  return state.replace(params=merge(dict(state.params), variables.get("params", {})),
                       batch_stats=merge(dict(state.batch_stats),
                                         variables.get("batch_stats", {})))
