"""Tests for experiments/models/resnet50.py: torchvision's size and naming (written out here, so that the
conversion is tested without torch), and, when torch and torchvision are installed, a random-weight
torchvision ResNet-50 converted and run on the same images in evaluation and training mode.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import models
from experiments.models.pretrained import torch_state_dict as tsd
from experiments.models.resnet50 import ResNet50

RESNET50_PARAMETERS = 25_557_032  # torchvision's resnet50() with 1000 classes.


def torchvision_resnet50_shapes(num_classes=1000):
  """{name: shape} of torchvision's `resnet50(num_classes=...).state_dict()`, from its source."""
  shapes = {"conv1.weight": (64, 3, 7, 7)}

  def batch_norm(name, channels):
    shapes.update({f"{name}.weight": (channels,), f"{name}.bias": (channels,),
                   f"{name}.running_mean": (channels,), f"{name}.running_var": (channels,),
                   f"{name}.num_batches_tracked": ()})

  batch_norm("bn1", 64)
  in_channels = 64
  for layer, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
    for block in range(blocks):
      prefix = f"layer{layer}.{block}"
      for conv, shape in (("1", (width, in_channels, 1, 1)), ("2", (width, width, 3, 3)),
                          ("3", (4 * width, width, 1, 1))):
        shapes[f"{prefix}.conv{conv}.weight"] = shape
        batch_norm(f"{prefix}.bn{conv}", shape[0])
      if block == 0:
        shapes[f"{prefix}.downsample.0.weight"] = (4 * width, in_channels, 1, 1)
        batch_norm(f"{prefix}.downsample.1", 4 * width)
      in_channels = 4 * width
  shapes.update({"fc.weight": (num_classes, 2048), "fc.bias": (num_classes,)})
  return shapes


def random_state_dict(shapes, seed=0):
  rng = np.random.default_rng(seed)
  return {name: (np.array(3, np.int64) if name.endswith("num_batches_tracked")
                 else rng.standard_normal(shape).astype(np.float32))
          for name, shape in shapes.items()}


def test_parameter_count_equals_torchvision():
  model = ResNet50(num_classes=1000)
  variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 224, 224, 3)),
                                                train=False))
  assert models.count_params(variables["params"]) == RESNET50_PARAMETERS
  shapes = torchvision_resnet50_shapes()
  assert sum(int(np.prod(s)) for n, s in shapes.items()
             if n.endswith((".weight", ".bias"))) == RESNET50_PARAMETERS
  assert models.count_params(variables["batch_stats"]) == sum(
      int(np.prod(s)) for n, s in shapes.items() if ".running_" in n)
  # Global pooling: any input size.
  logits, features = jax.eval_shape(functools.partial(model.apply, train=False), variables,
                                    jnp.zeros((2, 64, 48, 3)))
  assert logits.shape == (2, 1000) and features.shape == (2, 2048)


def test_bfloat16_body_keeps_float32_parameters_features_and_logits():
  model = ResNet50(num_classes=10, dtype=jnp.bfloat16)
  images = jnp.zeros((2, 64, 64, 3))
  variables = jax.eval_shape(functools.partial(model.init, train=False), jax.random.key(0), images)
  assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype("float32")}
  (logits, features), updates = jax.eval_shape(
      functools.partial(model.apply, train=True, mutable=["batch_stats"]), variables, images)
  assert logits.dtype == features.dtype == jnp.float32
  assert {leaf.dtype for leaf in jax.tree.leaves(updates)} == {jnp.dtype("float32")}
  jaxpr = jax.make_jaxpr(functools.partial(model.apply, train=False))(variables, images)
  convolutions = [e for e in jaxpr.eqns if e.primitive.name == "conv_general_dilated"]
  assert len(convolutions) == 53
  assert all(v.aval.dtype == jnp.bfloat16 for e in convolutions for v in e.outvars)


def test_converts_torchvision_layout_without_torch():
  state_dict = random_state_dict(torchvision_resnet50_shapes())
  variables = tsd.resnet50_params_from_torch(state_dict)  # Raises on a missing or unused tensor.
  params, stats = variables["params"], variables["batch_stats"]
  np.testing.assert_array_equal(params["stem_conv"]["kernel"],
                                state_dict["conv1.weight"].transpose(2, 3, 1, 0))
  np.testing.assert_array_equal(params["stage2_block1"]["conv2"]["kernel"],
                                state_dict["layer2.0.conv2.weight"].transpose(2, 3, 1, 0))
  np.testing.assert_array_equal(params["stage3_block1"]["downsample_conv"]["kernel"],
                                state_dict["layer3.0.downsample.0.weight"].transpose(2, 3, 1, 0))
  np.testing.assert_array_equal(params["stage4_block3"]["bn3"]["scale"],
                                state_dict["layer4.2.bn3.weight"])
  np.testing.assert_array_equal(stats["stage1_block1"]["downsample_bn"]["var"],
                                state_dict["layer1.0.downsample.1.running_var"])
  np.testing.assert_array_equal(stats["stem_bn"]["mean"], state_dict["bn1.running_mean"])
  np.testing.assert_array_equal(params["head"]["kernel"], state_dict["fc.weight"].T)
  np.testing.assert_array_equal(params["head"]["bias"], state_dict["fc.bias"])


def test_imagenet_classifier_is_left_out_for_another_head():
  state_dict = random_state_dict(torchvision_resnet50_shapes())
  with pytest.warns(tsd.HeadNotLoaded, match=r"fc.weight \(1000, 2048\) has 1000 classes, the "
                                             r"model num_classes=10"):
    variables = tsd.resnet50_params_from_torch(state_dict, ResNet50(num_classes=10))
  assert "head" not in variables["params"] and "stage4_block3" in variables["params"]


def test_hand_written_names_are_torchvisions():
  torchvision = pytest.importorskip("torchvision")
  for num_classes in (1000, 10):
    reference = torchvision.models.resnet50(num_classes=num_classes).state_dict()
    assert {k: tuple(v.shape) for k, v in reference.items()} == torchvision_resnet50_shapes(
        num_classes)


@pytest.fixture(scope="module")
def torchvision_reference():
  """A random-weight torchvision ResNet-50 (eval mode) with realistic BatchNorm statistics (one
  training-mode pass over a calibration batch) and random BatchNorm scales and shifts, so that the
  mean/var/scale/bias mappings all show in the output; its state dict as NumPy copies."""
  torch = pytest.importorskip("torch")
  torchvision = pytest.importorskip("torchvision")
  torch.manual_seed(0)
  reference = torchvision.models.resnet50()
  batch_norms = [m for m in reference.modules() if isinstance(m, torch.nn.BatchNorm2d)]
  with torch.no_grad():
    for batch_norm in batch_norms:
      batch_norm.weight.uniform_(0.5, 1.5)
      batch_norm.bias.normal_(0.0, 0.2)
      batch_norm.momentum = None  # The first pass sets the running statistics to its batch's.
    calibration = np.random.default_rng(1).standard_normal((4, 3, 64, 64)).astype(np.float32)
    reference.train()(torch.from_numpy(calibration))
  for batch_norm in batch_norms:
    batch_norm.momentum = 0.1  # PyTorch's default, which layers.batch_norm mirrors.
  state_dict = {k: v.numpy().copy() for k, v in reference.state_dict().items()}
  return torch, reference.eval(), state_dict


def _torch_forward(torch, reference, images_nchw):
  """(logits, pooled features) of the torchvision model."""
  pooled = {}
  hook = reference.avgpool.register_forward_hook(
      lambda module, inputs, output: pooled.update(features=output.flatten(1)))
  with torch.no_grad():
    logits = reference(torch.from_numpy(images_nchw)).numpy()
  hook.remove()
  return logits, pooled["features"].numpy()


def _assert_close(actual, expected, relative):
  """|actual − expected| ≤ relative · max |expected|: float32 through 53 layers loses digits in
  proportion to the activations' scale."""
  np.testing.assert_allclose(actual, expected, rtol=0, atol=relative * np.abs(expected).max())


def test_eval_forward_matches_torchvision(torchvision_reference):
  torch, reference, state_dict = torchvision_reference
  images = np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)
  expected_logits, expected_features = _torch_forward(torch, reference, images)
  variables = tsd.resnet50_params_from_torch(state_dict)
  model = ResNet50(num_classes=1000)
  logits, features = jax.jit(functools.partial(model.apply, train=False))(
      variables, jnp.asarray(images.transpose(0, 2, 3, 1)))
  # Observed: max |error| / max |value| ≈ 3e-5 (logits) and 4e-5 (features).
  _assert_close(logits, expected_logits, 2e-4)
  _assert_close(features, expected_features, 2e-4)


def test_train_mode_batch_norm_matches_torchvision(torchvision_reference):
  torch, reference, state_dict = torchvision_reference
  images = np.random.default_rng(3).standard_normal((2, 3, 64, 64)).astype(np.float32)
  variables = tsd.resnet50_params_from_torch(state_dict)
  model = ResNet50(num_classes=1000)
  (logits, features), updates = jax.jit(
      functools.partial(model.apply, train=True, mutable=["batch_stats"]))(
          variables, jnp.asarray(images.transpose(0, 2, 3, 1)))
  reference.train()
  try:
    expected_logits, expected_features = _torch_forward(torch, reference, images)
    updated = {k: v.numpy().copy() for k, v in reference.state_dict().items()}
  finally:
    reference.eval()
  # Batch statistics in the forward pass (observed ≈ 1e-4 and 2e-4: with 8 values per channel at
  # the last stage, normalising by the batch's small spread amplifies the float32 error), then the
  # running averages with momentum 0.1.
  _assert_close(logits, expected_logits, 1e-3)
  _assert_close(features, expected_features, 1e-3)
  for flax_path, torch_name, count in ((("stem_bn",), "bn1", 2 * 32 * 32),
                                       (("stage4_block3", "bn3"), "layer4.2.bn3", 2 * 2 * 2)):
    new = functools.reduce(dict.__getitem__, flax_path, updates["batch_stats"])
    old = functools.reduce(dict.__getitem__, flax_path, variables["batch_stats"])
    _assert_close(new["mean"], updated[f"{torch_name}.running_mean"], 1e-4)
    # flax's BatchNorm averages the biased batch variance, torch the unbiased one: the batch's
    # share of the update differs by n / (n − 1), n the values per channel (batch · H · W): 14 %
    # at the last stage here, against a float32 error of ≈ 2e-4 of the largest value.
    _assert_close((new["var"] - 0.9 * old["var"]) * count / (count - 1),
                  updated[f"{torch_name}.running_var"] - 0.9 * old["var"], 1e-3)
