"""Tests for experiments/models/vit.py: ViT-B/16's size, timm's layout (a tiny random-weight timm
VisionTransformer converted and run on the same images, when timm is installed), and MR2's L_p path
(p = 3, 5 on L2-normalised features) with the cosine head.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax
from experiments import models
from experiments.models.pretrained import torch_state_dict as tsd
from experiments.models.vit import ViT
from experiments.models.vit import ViTB16
from tests.harness.models.pretrained.test_torch_state_dict import TINY
from tests.harness.models.pretrained.test_torch_state_dict import timm_vit_state_dict
from tests.harness.models.pretrained.test_torch_state_dict import tiny_vit

VIT_B16_PARAMETERS = 86_567_656  # timm's vit_base_patch16_224 with 1000 classes.


def test_vit_b16_parameter_count_equals_timm():
  model = ViTB16(num_classes=1000)
  variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 224, 224, 3)),
                                                train=False))
  assert list(variables) == ["params"]  # No BatchNorm: nothing in 'batch_stats'.
  assert models.count_params(variables["params"]) == VIT_B16_PARAMETERS
  assert variables["params"]["pos_embed"].shape == (1, 197, 768)
  attention = variables["params"]["block12"]["attn"]
  assert attention["query"]["kernel"].shape == (768, 12, 64)
  assert attention["out"]["kernel"].shape == (12, 64, 768)
  logits, features = jax.eval_shape(functools.partial(model.apply, train=False), variables,
                                    jnp.zeros((2, 224, 224, 3)))
  assert logits.shape == (2, 1000) and features.shape == (2, 768)


def test_bfloat16_blocks_give_float32_features_close_to_float32():
  state_dict = timm_vit_state_dict()
  images = jnp.asarray(np.random.default_rng(0).standard_normal((2, 32, 32, 3)), jnp.float32)
  outputs = {}
  for dtype in (jnp.float32, jnp.bfloat16):
    model = ViT(num_classes=10, dtype=dtype, **TINY)
    variables = tsd.vit_params_from_torch(state_dict, model)
    outputs[dtype] = jax.jit(functools.partial(model.apply, train=False))(variables, images)
  for reference, low in zip(outputs[jnp.float32], outputs[jnp.bfloat16]):
    assert low.dtype == jnp.float32
    # bf16 keeps 8 bits: observed max |error| / max |value| ≈ 1e-2 (logits), 2e-2 (features)
    # after two blocks with N(0, 1) weights.
    np.testing.assert_allclose(low, reference, rtol=0, atol=0.1 * np.abs(reference).max())
    assert not np.array_equal(low, reference)  # The blocks did compute in bf16.


def test_other_image_sizes_are_refused():
  model = tiny_vit()
  variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)),
                                                train=False))
  with pytest.raises(ValueError, match=r"expected \[B, 32, 32, C\] \(image_size\)"):
    jax.eval_shape(functools.partial(model.apply, train=False), variables,
                   jnp.zeros((1, 48, 48, 3)))


def test_fused_qkv_is_split_per_head():
  # timm computes qkv = x Wᵀ + b, reshaped to [3, heads, head_dim]: row r of W is q/k/v r // width,
  # head (r % width) // head_dim, channel r % head_dim.
  state_dict = timm_vit_state_dict()
  params = tsd.vit_params_from_torch(state_dict, tiny_vit())["params"]
  width, heads = TINY["width"], TINY["num_heads"]
  head_dim = width // heads
  qkv_weight = state_dict["blocks.0.attn.qkv.weight"]
  qkv_bias = state_dict["blocks.0.attn.qkv.bias"]
  for part, name in enumerate(("query", "key", "value")):
    for head in (0, heads - 1):
      for channel in (0, head_dim - 1):
        row = part * width + head * head_dim + channel
        np.testing.assert_array_equal(params["block1"]["attn"][name]["kernel"][:, head, channel],
                                      qkv_weight[row])
        assert params["block1"]["attn"][name]["bias"][head, channel] == qkv_bias[row]
  proj = state_dict["blocks.0.attn.proj.weight"]  # [out, heads·head_dim]
  np.testing.assert_array_equal(params["block1"]["attn"]["out"]["kernel"][heads - 1, 2],
                                proj[:, (heads - 1) * head_dim + 2])


def _randomised_tiny_timm_vit(timm_vit, torch):
  """A tiny timm ViT with every parameter random (LayerNorm scales around 1): biases, class token
  and position embeddings are not left at their zero/1e-6 initialisation, so each one's mapping
  shows in the output."""
  torch.manual_seed(0)
  model = timm_vit.VisionTransformer(
      img_size=TINY["image_size"], patch_size=TINY["patch_size"], embed_dim=TINY["width"],
      depth=TINY["depth"], num_heads=TINY["num_heads"],
      mlp_ratio=TINY["mlp_dim"] / TINY["width"], num_classes=10)
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      noise = 0.2 * torch.randn_like(parameter)
      is_norm_scale = "norm" in name and name.endswith("weight")
      parameter.copy_(1.0 + noise if is_norm_scale else noise)
  return model.eval()


def test_tiny_timm_vit_forward_matches():
  torch = pytest.importorskip("torch")
  timm_vit = pytest.importorskip("timm.models.vision_transformer")
  reference = _randomised_tiny_timm_vit(timm_vit, torch)
  images = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)  # NCHW
  with torch.no_grad():
    tokens = reference.forward_features(torch.from_numpy(images))
    expected_features = reference.forward_head(tokens, pre_logits=True).numpy()
    expected_logits = reference.forward_head(tokens).numpy()
  state_dict = {k: v.numpy() for k, v in reference.state_dict().items()}
  model = tiny_vit()
  variables = tsd.vit_params_from_torch(state_dict, model)
  logits, features = jax.jit(functools.partial(model.apply, train=False))(
      variables, jnp.asarray(images.transpose(0, 2, 3, 1)))
  # float32 through 2 blocks; observed max |error| ≈ 4e-6 on outputs of magnitude ≈ 4.
  np.testing.assert_allclose(features, expected_features, rtol=0, atol=1e-4)
  np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-4)


def test_timm_vit_base_patch16_224_converts_completely():
  timm = pytest.importorskip("timm")
  reference = timm.create_model("vit_base_patch16_224", pretrained=False)
  state_dict = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
  assert sum(v.size for v in state_dict.values()) == VIT_B16_PARAMETERS
  variables = tsd.vit_params_from_torch(state_dict)  # Raises on any missing or unused tensor.
  assert models.count_params(variables) == VIT_B16_PARAMETERS
  np.testing.assert_array_equal(variables["params"]["block12"]["norm1"]["scale"],
                                state_dict["blocks.11.norm1.weight"])


@pytest.mark.parametrize("mr2_kwargs, p", [(dict(form="paper", p=3.0), 3.0),
                                           (dict(form="released"), 5.0)],
                         ids=["paper_p3", "released_p5"])
def test_mr2_lp_path_runs_with_the_cosine_head(mr2_kwargs, p):
  num_classes = 4
  sizes = {**TINY, "depth": 1}  # One block: compiles faster.
  model = ViT(num_classes, head="cosine", **sizes)
  # The setting of a fine-tuned backbone: the encoder from a (random) timm state dict, a new cosine
  # head W [width, K] (random initialisation would take longer to compile than the test itself).
  with pytest.warns(tsd.HeadNotLoaded, match="the model's head is 'cosine'"):
    params = tsd.vit_params_from_torch(timm_vit_state_dict(**sizes), model)["params"]
  rng = np.random.default_rng(1)
  params["head"] = {"kernel": jnp.asarray(rng.standard_normal((TINY["width"], num_classes)),
                                          jnp.float32)}
  images = jnp.asarray(rng.standard_normal((8, 32, 32, 3)), jnp.float32)
  labels = jnp.arange(8) % num_classes
  assert mr2_jax.objective.form_defaults(mr2_kwargs["form"], TINY["width"],
                                         p=mr2_kwargs.get("p"))[0] == p

  @jax.jit
  def loss_and_grad(params, stats):
    def loss_fn(params):
      logits, features = model.apply({"params": params}, images, train=True)
      # The cosine head classifies φ/‖φ‖; the statistics are taken on the same unit vectors.
      loss, new_stats, aux = mr2_jax.mr2_loss(logits, mr2_jax.l2_normalize(features), labels,
                                              stats, **mr2_kwargs)
      p2_gamma = mr2_jax.mr2_loss(logits, mr2_jax.l2_normalize(features), labels, stats,
                                  form="paper")[2].gamma
      return loss, (new_stats, aux, p2_gamma)
    return jax.value_and_grad(loss_fn, has_aux=True)(params)

  (loss, (new_stats, aux, paper_p2_gamma)), grads = loss_and_grad(
      params, mr2_jax.init_class_stats(num_classes))
  assert np.isfinite(loss) and np.all(np.isfinite(aux.gamma))
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  assert np.abs(grads["block1"]["attn"]["query"]["kernel"]).max() > 0
  assert np.abs(grads["head"]["kernel"]).max() > 0
  assert bool(new_stats.seen.all())
  # Why p ≠ 2 here: on unit vectors ‖μ_k‖₂² + v_k = 1 for every class, so p = 2 gives γ ≡ c̄;
  # the L_p statistics tell the classes apart.
  np.testing.assert_allclose(paper_p2_gamma, 1.0, atol=1e-5)
  assert np.ptp(np.asarray(aux.gamma)) > 1e-4
