"""experiments.models.pretrained.weights: a run's encoder from a PyTorch weight file (fine-tuning with
`config.pretrained`, a linear probe with `config.frozen_encoder_from=<file>`): every variable but the
head from the file, the head the model's own; clear refusals. A tiny ViT in timm's naming here; the
ViT-B/16 configs end to end in the slow run."""

import pickle

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from experiments import models
from experiments.train import loop
from experiments.train import train_state
from experiments.common.errors import ConfigError
from experiments.configs import schema
from experiments.configs import imagenet_vit_finetune
from experiments.configs import imagenet_vit_probe
from experiments.models.pretrained import torch_state_dict as tsd
from experiments.models.pretrained import weights
from tests import checkpoints as checkpoint_files
from tests.harness.configs import test_paper_configs
from tests.harness.models.pretrained.test_torch_state_dict import TINY
from tests.harness.models.pretrained.test_torch_state_dict import tiny_vit
from tests.harness.models.pretrained.test_torch_state_dict import timm_vit_state_dict


def test_encoder_variables_are_the_files_but_the_head(tmp_path):
  path = tmp_path / "vit.safetensors"
  state_dict = timm_vit_state_dict(num_classes=10, **TINY)
  safetensors_numpy.save_file(state_dict, path)
  model = tiny_vit(num_classes=7, head="cosine")  # neither the file's classes nor its head
  loaded = weights.encoder_variables(path, "vit_b16", model, "pretrained")
  assert "head" not in loaded["params"]
  expected = tsd.vit_params_from_torch(state_dict, tiny_vit(num_classes=10))["params"]
  chex.assert_trees_all_equal(loaded["params"],
                              {k: v for k, v in expected.items() if k != "head"})
  fresh = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)

  class State:  # the two fields `with_encoder` replaces
    def __init__(self, params, batch_stats):
      self.params, self.batch_stats = params, batch_stats

    def replace(self, **fields):
      return State(fields.get("params", self.params), fields.get("batch_stats", self.batch_stats))

  merged = weights.with_encoder(State(fresh["params"], {}), loaded)
  chex.assert_trees_all_equal(merged.params["head"], fresh["params"]["head"])
  chex.assert_trees_all_equal({k: v for k, v in merged.params.items() if k != "head"},
                              loaded["params"])
  assert jax.tree.structure(merged.params) == jax.tree.structure(fresh["params"])


def test_bad_weights_are_refused_naming_the_field(tmp_path):
  path = tmp_path / "vit.safetensors"
  safetensors_numpy.save_file(timm_vit_state_dict(**TINY), path)
  with pytest.raises(ConfigError, match=r"config.pretrained: no PyTorch weights convert into "
                                        r"config.model='resnet32'"):
    weights.encoder_variables(path, "resnet32", tiny_vit(), "pretrained")
  with pytest.raises(ConfigError, match="config.frozen_encoder_from: weight file not found"):
    weights.encoder_variables(tmp_path / "none.pth", "vit_b16", tiny_vit(), "frozen_encoder_from")
  wider = tmp_path / "wider.safetensors"
  safetensors_numpy.save_file(timm_vit_state_dict(**dict(TINY, width=32)), wider)
  with pytest.raises(ConfigError, match="does not fit"):
    weights.encoder_variables(wider, "vit_b16", tiny_vit(), "pretrained")
  evil = tmp_path / "evil.pth"
  import os  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top

  class Call:
    def __reduce__(self):
      return os.system, ("true",)
  with zipfile.ZipFile(evil, "w") as archive:
    archive.writestr("evil/data.pkl", pickle.dumps({"w": Call()}, protocol=2))
  with pytest.raises(ConfigError, match="is not allowed"):
    weights.encoder_variables(evil, "vit_b16", tiny_vit(), "pretrained")
  assert weights.is_weight_file("a/b.safetensors") and not weights.is_weight_file("workdirs/run")
  config = imagenet_vit_finetune.get_config()
  config.pretrained, config.frozen_encoder_from = str(path), str(path)
  with pytest.raises(ConfigError, match="not both"):
    schema.validate(config)


@pytest.mark.slow  # ≈ 3 min on 2 cores: ViT-B/16 at 224 px, a random 86 M-parameter timm file
def test_vit_b16_probe_and_fine_tuning_configs_run_from_a_weight_file(tmp_path):
  root = test_paper_configs.write_benchmarks(tmp_path / "data")
  path = tmp_path / "vit_b16.safetensors"
  safetensors_numpy.save_file(timm_vit_state_dict(num_classes=1000, image_size=224, patch_size=16,
                                                  width=768, depth=12, mlp_dim=3072), path)
  small = dict(batch_size=4, eval_batch_size=8, num_epochs=1, warmup_epochs=0, data_workers=0,
               log_every_steps=1, checkpoint_every_steps=1, nc_metrics=False, progress_bar=False,
               data_dir=str(root))
  probe = imagenet_vit_probe.get_config()
  probe.update(dict(small, frozen_encoder_from=str(path)))
  loop.train_and_evaluate(probe, tmp_path / "probe", max_steps=1)
  fine = imagenet_vit_finetune.get_config()
  # A tiny step: the random 12-layer file's gradients are large, and the test is where it started.
  fine.update(dict(small, pretrained=str(path), learning_rate=1e-9))
  loop.train_and_evaluate(fine, tmp_path / "fine", max_steps=1)
  model = train_state.base_model(probe, 4)
  loaded = weights.encoder_variables(path, "vit_b16", model, "pretrained")["params"]
  probed = checkpoint_files.restore_latest(tmp_path / "probe")[1]["params"]
  tuned = checkpoint_files.restore_latest(tmp_path / "fine")[1]["params"]
  chex.assert_trees_all_equal({k: v for k, v in probed.items() if k != "head"}, loaded)
  moved = [not np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves({k: v for k, v in tuned.items() if k != "head"}), jax.tree.leaves(loaded))]
  assert any(moved)  # fine-tuning trains the encoder (the probe's stayed bit for bit)
  # One (tiny) step from the file: the fine-tuned encoder moved, and is the file's, not a fresh
  # initialisation's.
  chex.assert_trees_all_close({k: v for k, v in tuned.items() if k != "head"}, loaded, atol=1e-3)
