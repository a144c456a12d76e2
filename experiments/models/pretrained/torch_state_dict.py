"""PyTorch state dicts → flax variables for `experiments.models.resnet50.ResNet50` and
`experiments.models.vit.ViT`.

Reading never runs code from the file and never imports torch: `.safetensors` through the
`safetensors` package's NumPy API (a JSON header and raw bytes, safe by construction), `.pth`/`.pt`/
`.bin` through `efficientnet_lite.read_torch_checkpoint`, whose restricted unpickler resolves only
the globals of a tensor state dict and refuses every other one (`pickle.UnpicklingError` naming it).

Conversion follows the sources' naming: torchvision's `resnet50().state_dict()` and timm's
`vit_base_patch16_224` (any timm `VisionTransformer` with a class token, 'token' pooling, q/k/v
biases and no extra tokens). Layouts: convolution OIHW → HWIO, linear [out, in] → [in, out],
BatchNorm weight/bias → params scale/bias and running_mean/running_var → batch_stats mean/var,
LayerNorm weight/bias → scale/bias, timm's fused qkv [3·width, width] → flax attention's
query/key/value kernels [width, heads, head_dim] (rows ordered (q|k|v, head, head_dim), as timm's
reshape) and proj → out [heads, head_dim, width].

Every tensor is accounted for: each one is converted into exactly one model variable, or is
torchvision's `num_batches_tracked` (ignored: flax's BatchNorm keeps no step count), or is the
classifier when it is left out (below). A tensor the model has no place for, or a model variable
with no tensor, raises `ValueError` with the names.

The classifier ('fc' in torchvision, 'head' in timm) becomes the model's 'head' when the model has
the 'linear' head with the same shape. Otherwise (another head, another number of classes, or no
classifier in the file) it is left out with a `HeadNotLoaded` warning, and the returned variables
have no 'head': start the head from the model's own initialisation,

    fresh = model.init(key, x, train=False)
    variables = {c: {**fresh[c], **loaded.get(c, {})} for c in fresh}
"""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.models.pretrained.efficientnet_lite import read_torch_checkpoint
from experiments.models.resnet50 import ResNet50
from experiments.models.vit import ViT
from experiments.models.vit import ViTB16

TORCH_SUFFIXES = (".pth", ".pt", ".bin")
# Buffers that flax's modules have no counterpart for.
IGNORED_SUFFIXES = (".num_batches_tracked",)

# A flax leaf's source: (torch key, conversion(tensor, flax shape) → array of that shape).
Source = tuple[str, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]]


class HeadNotLoaded(UserWarning):
  """The file's classifier does not fit the model's head, which keeps its own initialisation."""


def load_state_dict(path: str | pathlib.Path) -> dict[str, np.ndarray]:
  """{name: array} of a PyTorch state dict file, read without executing anything in it.

  `.safetensors`: `safetensors.numpy.load_file`. `.pth`, `.pt`, `.bin` (`torch.save`, zip or
  legacy format): `read_torch_checkpoint`'s restricted unpickler.

  Raises:
    ValueError: another suffix, or the file holds something other than a flat {name: tensor} dict
      (e.g. a training checkpoint {'model': ..., 'epoch': ...}; read it with
      `read_torch_checkpoint(path)` and pass the inner dict to the converters).
    pickle.UnpicklingError: the pickle names a global that a tensor state dict does not need.
  """
  path = pathlib.Path(path)
  if path.suffix == ".safetensors":
    try:
      # optional: safetensors only for a .safetensors file
      from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError(f"reading {path.name} needs the 'safetensors' package "
                        "(pip install safetensors)") from e
    state_dict = safetensors_numpy.load_file(path)
  elif path.suffix in TORCH_SUFFIXES:
    state_dict = read_torch_checkpoint(path)
  else:
    raise ValueError(f"{path}: expected a .safetensors or {'/'.join(TORCH_SUFFIXES)} file")
  if not isinstance(state_dict, Mapping):
    raise ValueError(f"{path}: holds a {type(state_dict).__name__}, not a state dict")
  not_tensors = sorted(str(k) for k, v in state_dict.items()
                       if not (isinstance(k, str) and isinstance(v, np.ndarray)))
  if not_tensors:
    raise ValueError(f"{path}: not a flat {{name: tensor}} state dict; entries {not_tensors[:8]} "
                     "are not tensors (a training checkpoint? read it with read_torch_checkpoint "
                     "and pass the state dict inside it)")
  return dict(state_dict)


# ----------------------------------------------------------------------------------------------
# Layouts.


def _same(tensor: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  del shape
  return tensor


def _kernel(tensor: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  """Convolution OIHW → HWIO, linear [out, in] → [in, out]."""
  del shape
  return tensor.transpose(2, 3, 1, 0) if tensor.ndim == 4 else tensor.T


# flax leaf → torch parameter or buffer of the same module.
_LEAF_NAMES = {"kernel": ("weight", _kernel), "scale": ("weight", _same), "bias": ("bias", _same),
               "mean": ("running_mean", _same), "var": ("running_var", _same)}


def _module_leaf(torch_module: str, leaf: str) -> Source:
  name, convert = _LEAF_NAMES[leaf]
  return f"{torch_module}.{name}", convert


def _block_index(flax_name: str, prefix: str) -> int:
  """0-based torch index of a 1-based flax block name ('block3' → 2)."""
  return int(flax_name[len(prefix):]) - 1


# ----------------------------------------------------------------------------------------------
# Sources of each model's variables.

_RESNET_MODULES = {"stem_conv": "conv1", "stem_bn": "bn1", "downsample_conv": "downsample.0",
                   "downsample_bn": "downsample.1", "head": "fc"}


def _resnet50_source(modules: tuple[str, ...], leaf: str) -> Source:
  """torchvision name of a ResNet50 variable: stage{s}_block{b}/conv1 → layer{s}.{b-1}.conv1, ..."""
  names = []
  for module in modules:
    if module.startswith("stage"):
      stage, block = module[len("stage"):].split("_block")
      names.append(f"layer{stage}.{int(block) - 1}")
    else:
      names.append(_RESNET_MODULES.get(module, module))
  return _module_leaf(".".join(names), leaf)


def _vit_source(modules: tuple[str, ...], leaf: str) -> Source:
  """timm name of a ViT variable: block{i}/mlp/fc1 → blocks.{i-1}.mlp.fc1, the attention's
  query/key/value → slices of blocks.{i-1}.attn.qkv, its out → attn.proj."""
  if not modules:  # cls_token, pos_embed: stored as they are.
    return leaf, _same
  if modules == ("patch_embed",):
    return _module_leaf("patch_embed.proj", leaf)
  if modules[0].startswith("block"):
    block = f"blocks.{_block_index(modules[0], 'block')}"
    if modules[1:2] == ("attn",):
      return _attention_source(f"{block}.attn", modules[2], leaf)
    return _module_leaf(".".join((block,) + modules[1:]), leaf)
  return _module_leaf(".".join(modules), leaf)


def _attention_source(torch_attn: str, projection: str, leaf: str) -> Source:
  if projection == "out":
    if leaf == "kernel":  # [width, heads·head_dim] → [heads, head_dim, width].
      return f"{torch_attn}.proj.weight", lambda w, shape: w.T.reshape(shape)
    return f"{torch_attn}.proj.bias", _same
  part = ("query", "key", "value").index(projection)

  def rows(tensor: np.ndarray) -> np.ndarray:
    width = tensor.shape[0] // 3
    return tensor[part * width:(part + 1) * width]

  if leaf == "kernel":  # [3·width, width] → rows of q, k or v → [width, heads, head_dim].
    return f"{torch_attn}.qkv.weight", lambda w, shape: rows(w).T.reshape(shape)
  return f"{torch_attn}.qkv.bias", lambda b, shape: rows(b).reshape(shape)


# ----------------------------------------------------------------------------------------------
# Conversion.


def _from_torch(state_dict: Mapping[str, np.ndarray], model, input_shape: tuple[int, ...],
                source: Callable[[tuple[str, ...], str], Source], classifier: str
                ) -> dict[str, Any]:
  """Fills the model's variables from `state_dict` (see the module docstring for the rules)."""
  abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(input_shape),
                                               train=False))
  abstract = {collection: dict(tree) for collection, tree in abstract.items()}
  head_keys = [f"{classifier}.weight", f"{classifier}.bias"]
  ignored = {k for k in state_dict if k.endswith(IGNORED_SUFFIXES)}
  if not _head_fits(state_dict, model, abstract, head_keys):
    for tree in abstract.values():
      tree.pop("head", None)
    abstract = {collection: tree for collection, tree in abstract.items() if tree}
    ignored.update(k for k in head_keys if k in state_dict)

  used, missing = set(), []

  def fill(key_path, target):
    collection, *modules, leaf = [k.key for k in key_path]
    flax_name = "/".join([collection, *modules, leaf])
    torch_key, convert = source(tuple(modules), leaf)
    if torch_key not in state_dict:
      missing.append(f"{torch_key} (for {flax_name})")
      return None
    tensor = np.asarray(state_dict[torch_key])
    try:
      value = np.asarray(convert(tensor, target.shape))
    except ValueError:
      value = None
    if value is None or value.shape != target.shape:
      raise ValueError(f"{torch_key} of shape {tensor.shape} does not fit {flax_name} of shape "
                       f"{target.shape}")
    used.add(torch_key)
    # A copy: on CPU `jnp.asarray` may alias the NumPy buffer, and a state dict of
    # `tensor.numpy()` views shares memory with a torch model that later updates it in place.
    return jnp.array(value, jnp.float32, copy=True)

  variables = jax.tree_util.tree_map_with_path(fill, abstract)
  unknown = sorted(set(state_dict) - used - ignored)
  if missing or unknown:
    raise ValueError(f"state dict does not match {type(model).__name__}: "
                     f"missing {_names(missing)}; not used by the model {_names(unknown)}")
  return variables


def _names(names: list[str], limit: int = 20) -> str:
  if not names:
    return "nothing"
  if len(names) <= limit:
    return str(names)
  return f"{names[:limit]} and {len(names) - limit} more"


def _head_fits(state_dict: Mapping[str, np.ndarray], model, abstract: dict[str, Any],
               head_keys: list[str]) -> bool:
  """Whether the file's classifier converts into the model's head; warns (HeadNotLoaded) if not."""
  weight_key, bias_key = head_keys
  if weight_key not in state_dict and bias_key not in state_dict:
    reason = f"the state dict has no classifier ({weight_key}, {bias_key})"
  elif model.head != "linear":
    reason = f"the model's head is {model.head!r}; {weight_key} is a linear classifier"
  elif weight_key not in state_dict or bias_key not in state_dict:
    return True  # Half a classifier: reported as a missing tensor.
  elif abstract["params"]["head"]["kernel"].shape != tuple(state_dict[weight_key].shape[::-1]):
    shape = tuple(state_dict[weight_key].shape)
    reason = (f"{weight_key} {shape} has {shape[0]} classes, the model "
              f"num_classes={model.num_classes}")
  else:
    return True
  warnings.warn(f"classifier not loaded: {reason}. The returned variables have no 'head'; merge "
                "them into the model's initialised variables.", HeadNotLoaded, stacklevel=4)
  return False


def resnet50_params_from_torch(state_dict: Mapping[str, np.ndarray],
                               model: ResNet50 | None = None) -> dict[str, Any]:
  """Flax variables {'params', 'batch_stats'} of `model` (default `ResNet50(num_classes=1000)`) from
  torchvision's `resnet50().state_dict()` naming.

  Raises:
    ValueError: a tensor is missing, unused or of the wrong shape (the names are in the message).
  Warns:
    HeadNotLoaded: 'fc' does not fit the model's head; the result then has no 'head'.
  """
  model = ResNet50(num_classes=1000) if model is None else model
  return _from_torch(state_dict, model, (1, 64, 64, 3), _resnet50_source, classifier="fc")


def vit_params_from_torch(state_dict: Mapping[str, np.ndarray],
                          model: ViT | None = None) -> dict[str, Any]:
  """Flax variables {'params'} of `model` (default `ViTB16(num_classes=1000)`) from timm's
  `VisionTransformer` naming (`vit_base_patch16_224`); the model's sizes (image_size, patch_size,
  width, depth, num_heads, mlp_dim) must be the checkpoint's.

  Raises:
    ValueError: a tensor is missing, unused or of the wrong shape (the names are in the message).
  Warns:
    HeadNotLoaded: 'head' does not fit the model's head; the result then has no 'head'.
  """
  model = ViTB16(num_classes=1000) if model is None else model
  input_shape = (1, model.image_size, model.image_size, 3)
  return _from_torch(state_dict, model, input_shape, _vit_source, classifier="head")
