"""Tests for experiments/models/pretrained/torch_state_dict.py: reading state dict files without running
code from them, and the conversion's accounting of every tensor (missing, unknown, wrong shape, the
classifier left out), on a tiny ViT in timm's naming built here in NumPy (no torch needed).

The files are written by torch itself where it is installed (`torch.save`, both formats) and, so
that the reader is tested without torch too, by a hand-assembled pickle in the zip format.
"""

import builtins
import importlib.util
import os
import pickle
import struct
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.models.pretrained import torch_state_dict as tsd
from experiments.models.vit import ViT

TINY = dict(image_size=32, patch_size=8, width=64, depth=2, num_heads=4, mlp_dim=128)


def tiny_vit(num_classes=10, head="linear"):
  return ViT(num_classes=num_classes, head=head, **TINY)


def timm_vit_state_dict(seed=0, num_classes=10, image_size=32, patch_size=8, width=64, depth=2,
                        mlp_dim=128, **unused):
  """{name: random float32 array} with the names and shapes of timm's `VisionTransformer`
  (class token, q/k/v biases, 'token' pooling), written from timm's source."""
  del unused
  rng = np.random.default_rng(seed)
  shapes = {"cls_token": (1, 1, width),
            "pos_embed": (1, 1 + (image_size // patch_size) ** 2, width),
            "patch_embed.proj.weight": (width, 3, patch_size, patch_size),
            "patch_embed.proj.bias": (width,)}
  for i in range(depth):
    for name, shape in (("norm1.weight", (width,)), ("norm1.bias", (width,)),
                        ("attn.qkv.weight", (3 * width, width)), ("attn.qkv.bias", (3 * width,)),
                        ("attn.proj.weight", (width, width)), ("attn.proj.bias", (width,)),
                        ("norm2.weight", (width,)), ("norm2.bias", (width,)),
                        ("mlp.fc1.weight", (mlp_dim, width)), ("mlp.fc1.bias", (mlp_dim,)),
                        ("mlp.fc2.weight", (width, mlp_dim)), ("mlp.fc2.bias", (width,))):
      shapes[f"blocks.{i}.{name}"] = shape
  shapes.update({"norm.weight": (width,), "norm.bias": (width,),
                 "head.weight": (num_classes, width), "head.bias": (num_classes,)})
  return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


# ----------------------------------------------------------------------------------------------
# Reading files.


def test_safetensors_round_trip(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  rng = np.random.default_rng(0)
  arrays = {"conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "bn.running_var": rng.uniform(0.5, 2, (4,)).astype(np.float32),
            "half": rng.standard_normal((2, 5)).astype(np.float16),
            "bn.num_batches_tracked": np.array(7, np.int64)}
  path = tmp_path / "model.safetensors"
  safetensors_numpy.save_file(arrays, str(path))
  loaded = tsd.load_state_dict(path)
  assert sorted(loaded) == sorted(arrays)
  for name, array in arrays.items():
    assert loaded[name].dtype == array.dtype
    np.testing.assert_array_equal(loaded[name], array)


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_save_loads_without_torch_objects(tmp_path, zipped):
  torch = pytest.importorskip("torch")
  base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
  state = {"weight": base, "transposed": base.t(), "sliced": base[1:, 2:],
           "param": torch.nn.Parameter(torch.ones(2)), "count": torch.tensor(5),
           "half": torch.full((3,), 0.5, dtype=torch.float16)}
  path = tmp_path / "model.pth"
  torch.save(state, path, _use_new_zipfile_serialization=zipped)
  loaded = tsd.load_state_dict(path)
  assert sorted(loaded) == sorted(state)
  for name, tensor in state.items():
    expected = tensor.detach().numpy()
    assert isinstance(loaded[name], np.ndarray) and loaded[name].dtype == expected.dtype
    np.testing.assert_array_equal(loaded[name], expected)


def _binunicode(text):
  data = text.encode()
  return b"X" + struct.pack("<I", len(data)) + data


def test_hand_built_zip_checkpoint_loads(tmp_path):
  """The zip format without torch: data.pkl is {'w': _rebuild_tensor_v2(storage '0', offset 0,
  size (2, 3), stride (3, 1), requires_grad False, OrderedDict())}, pickle protocol 2 by opcode."""
  ordered_dict = b"ccollections\nOrderedDict\n)R"
  storage = (b"(" + _binunicode("storage") + b"ctorch\nFloatStorage\n" + _binunicode("0")
             + _binunicode("cpu") + b"K\x06tQ")
  tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"K\x00" + b"K\x02K\x03\x86"
            + b"K\x03K\x01\x86" + b"\x89" + ordered_dict + b"tR")
  data_pkl = b"\x80\x02" + ordered_dict + b"(" + _binunicode("w") + tensor + b"u."
  values = np.arange(6, dtype="<f4")
  path = tmp_path / "hand.pth"
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("hand/data.pkl", data_pkl)
    archive.writestr("hand/data/0", values.tobytes())
  loaded = tsd.load_state_dict(path)
  np.testing.assert_array_equal(loaded["w"], values.reshape(2, 3))


class _SystemCall:
  """Unpickles as os.system(command) (pickled under its real module, 'posix' on Linux)."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return os.system, (f"touch '{self.marker}'",)


class _EvalCall:
  """Unpickles as builtins.eval(source)."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return builtins.eval, (f"open({str(self.marker)!r}, 'w').close()",)


@pytest.mark.parametrize("payload, global_name", [
    (_SystemCall, f"{os.system.__module__}.system"),
    (_EvalCall, r"__builtin__.eval")])  # Protocol 2 writes builtins under its Python 2 name.
def test_code_executing_pickle_is_refused_and_never_run(tmp_path, payload, global_name):
  live_marker = tmp_path / "live"
  pickle.loads(pickle.dumps(payload(live_marker), protocol=2))  # The payload is live: it runs...
  assert live_marker.exists()
  marker = tmp_path / "pwned"
  malicious = pickle.dumps({"weight": payload(marker)}, protocol=2)
  zipped = tmp_path / "evil.pth"
  with zipfile.ZipFile(zipped, "w") as archive:
    archive.writestr("evil/data.pkl", malicious)
  legacy = tmp_path / "evil.bin"
  legacy.write_bytes(pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) + malicious)
  for path in (zipped, legacy):  # ...but not through the loader, in either torch format.
    with pytest.raises(pickle.UnpicklingError, match=f"{global_name} is not allowed"):
      tsd.load_state_dict(path)
  if importlib.util.find_spec("safetensors") is not None:
    # A pickle under the .safetensors suffix is parsed as safetensors, never unpickled.
    import safetensors  # pylint: disable=g-import-not-at-top
    disguised = tmp_path / "evil.safetensors"
    disguised.write_bytes(malicious)
    with pytest.raises(safetensors.SafetensorError, match="header"):
      tsd.load_state_dict(disguised)
  assert not marker.exists()


def test_training_checkpoints_and_other_suffixes_are_named(tmp_path):
  torch = pytest.importorskip("torch")
  path = tmp_path / "checkpoint.pt"
  torch.save({"model": {"w": torch.ones(2)}, "epoch": 3}, path)
  with pytest.raises(ValueError, match=r"not a flat .*'epoch', 'model'"):
    tsd.load_state_dict(path)
  with pytest.raises(ValueError, match=r"expected a \.safetensors"):
    tsd.load_state_dict(tmp_path / "weights.npz")


# ----------------------------------------------------------------------------------------------
# Accounting for every tensor.


def test_every_tensor_is_consumed():
  state_dict = timm_vit_state_dict()
  variables = tsd.vit_params_from_torch(state_dict, tiny_vit())
  assert list(variables) == ["params"]
  params = variables["params"]
  np.testing.assert_array_equal(params["cls_token"], state_dict["cls_token"])
  np.testing.assert_array_equal(params["block2"]["norm2"]["scale"],
                                state_dict["blocks.1.norm2.weight"])
  np.testing.assert_array_equal(params["head"]["kernel"], state_dict["head.weight"].T)
  np.testing.assert_array_equal(params["patch_embed"]["kernel"],
                                state_dict["patch_embed.proj.weight"].transpose(2, 3, 1, 0))


def test_missing_and_unknown_tensors_raise_with_their_names():
  state_dict = timm_vit_state_dict()
  del state_dict["blocks.1.mlp.fc1.bias"]
  state_dict["blocks.1.ls1.gamma"] = np.ones(64, np.float32)  # LayerScale: not in this model.
  with pytest.raises(ValueError) as error:
    tsd.vit_params_from_torch(state_dict, tiny_vit())
  message = str(error.value)
  assert "missing ['blocks.1.mlp.fc1.bias (for params/block2/mlp/fc1/bias)']" in message
  assert "not used by the model ['blocks.1.ls1.gamma']" in message


def test_wrong_shapes_raise_with_both_names():
  state_dict = timm_vit_state_dict(image_size=48)  # 36 patches: another position embedding.
  with pytest.raises(ValueError, match=r"pos_embed of shape \(1, 37, 64\) does not fit "
                                       r"params/pos_embed of shape \(1, 17, 64\)"):
    tsd.vit_params_from_torch(state_dict, tiny_vit())


@pytest.mark.parametrize("num_classes, head, reason", [
    (7, "linear", r"has 10 classes, the model num_classes=7"),
    (10, "cosine", r"the model's head is 'cosine'"),
    (10, "etf", r"the model's head is 'etf'")])
def test_a_classifier_that_does_not_fit_is_left_out(num_classes, head, reason):
  model = tiny_vit(num_classes, head)
  with pytest.warns(tsd.HeadNotLoaded, match=reason):
    loaded = tsd.vit_params_from_torch(timm_vit_state_dict(num_classes=10), model)
  assert "head" not in loaded["params"] and "batch_stats" not in loaded
  # The documented merge: the head from the model's own initialisation, the encoder loaded.
  x = jnp.zeros((2, 32, 32, 3))
  fresh = model.init(jax.random.key(0), x, train=False)
  variables = {c: {**fresh[c], **loaded.get(c, {})} for c in fresh}
  np.testing.assert_array_equal(variables["params"]["block1"]["mlp"]["fc1"]["kernel"],
                                loaded["params"]["block1"]["mlp"]["fc1"]["kernel"])
  logits, _ = jax.jit(model.apply, static_argnames="train")(variables, x, train=False)
  assert logits.shape == (2, num_classes) and jnp.isfinite(logits).all()


def test_a_headless_state_dict_loads_the_encoder():
  state_dict = timm_vit_state_dict()
  del state_dict["head.weight"], state_dict["head.bias"]
  with pytest.warns(tsd.HeadNotLoaded, match="has no classifier"):
    loaded = tsd.vit_params_from_torch(state_dict, tiny_vit())
  assert "head" not in loaded["params"] and "norm" in loaded["params"]


def test_half_a_classifier_is_a_missing_tensor():
  state_dict = timm_vit_state_dict()
  del state_dict["head.bias"]
  with pytest.raises(ValueError, match=r"missing \['head.bias \(for params/head/bias\)'\]"):
    tsd.vit_params_from_torch(state_dict, tiny_vit())


def test_another_architecture_is_refused_with_a_bounded_message():
  state_dict = timm_vit_state_dict(depth=12)
  with pytest.raises(ValueError, match=r"not used by the model \['blocks.10.attn.proj.bias', .*\] "
                                       r"and 100 more$"):
    tsd.vit_params_from_torch(state_dict, tiny_vit())


def test_variables_do_not_alias_the_state_dict():
  # A state dict of `tensor.numpy()` views shares memory with its torch model: updating the model
  # (e.g. BatchNorm's running statistics in a train-mode pass) must not change converted variables.
  state_dict = timm_vit_state_dict()
  variables = tsd.vit_params_from_torch(state_dict, tiny_vit())
  before = np.array(variables["params"]["cls_token"])
  state_dict["cls_token"] += 1.0
  np.testing.assert_array_equal(variables["params"]["cls_token"], before)
