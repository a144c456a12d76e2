"""The papers' settings as configs (`cifar100_lt`, `imagenet_lt`, `inat2018`, `imagenet_mr2`) run end to
end on fixture data in their real formats (a folder of JPEGs with OLTR split lists, iNaturalist's
JSON, TFDS `cifar100` mocked) through the grain pipeline: a run stopped and resumed equals the
uninterrupted one, input position included; in the slow run, two processes × 4 fake devices under
shard_map equal one process."""

import json
import os
import pathlib
import subprocess
import sys

import chex
import numpy as np
import pytest
from PIL import Image

from experiments import launch
from experiments.configs import cifar100_lt
from experiments.configs import imagenet_lt
from experiments.configs import imagenet_mr2
from experiments.configs import inat2018
from experiments.data import array_records
from experiments.methods import registry
from experiments.train import loop
from tests import checkpoints as checkpoint_files

REPO = pathlib.Path(__file__).resolve().parents[3]
COUNTS = (12, 6, 3, 2)  # training images per class: long-tailed, 23 in all
TEST_PER_CLASS = 2
CONFIGS = {"imagenet_lt": imagenet_lt, "inat2018": inat2018, "imagenet_mr2": imagenet_mr2}


def write_benchmarks(root: pathlib.Path) -> pathlib.Path:
  """Four classes of 24×20 JPEGs under train/<wnid>/ and val/<wnid>/, with the lists of every
  source format: ImageNet_LT_{train,val,test}.txt, ImageNet_{train,test}.txt (OLTR's
  `<relative path> <label>`) and train2018.json / val2018.json (iNaturalist's COCO style)."""
  rng = np.random.default_rng(0)
  rows = {"train": [], "test": []}
  for split, counts in (("train", COUNTS), ("test", (TEST_PER_CLASS,) * len(COUNTS))):
    for label, count in enumerate(counts):
      for j in range(count):
        path = f"{'train' if split == 'train' else 'val'}/n0{label}/img_{j}.JPEG"
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / path)
        rows[split].append((path, label))
  lines = {split: "".join(f"{p} {k}\n" for p, k in items) for split, items in rows.items()}
  for split, text in (("train", lines["train"]), ("val", lines["test"]), ("test", lines["test"])):
    (root / f"ImageNet_LT_{split}.txt").write_text(text)
  for split in ("train", "test"):
    (root / f"ImageNet_{split}.txt").write_text(lines[split])
  for split, name in (("train", "train2018.json"), ("test", "val2018.json")):
    items = rows[split]
    (root / name).write_text(json.dumps({
        "images": [{"id": i, "file_name": p} for i, (p, _) in enumerate(items)],
        "annotations": [{"id": i, "image_id": i, "category_id": k}
                        for i, (_, k) in enumerate(items)],
        "categories": [{"id": k, "name": f"n0{k}"} for k in range(len(COUNTS))]}))
  write_cifar100_records(root)
  return root


def write_cifar100_records(root: pathlib.Path) -> None:
  """CIFAR-100-shaped ArrayRecord files written by the project (`array_records.write_array_record`):
  32×32 PNGs, 100 classes, 2 training and 1 test image each (c100-{train,test}.array_record)."""
  import io  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  for split, per_class in (("train", 2), ("test", 1)):
    labels = np.repeat(np.arange(100), per_class)
    encoded = []
    for _ in labels:
      buffer = io.BytesIO()
      Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, "PNG")
      encoded.append(buffer.getvalue())
    array_records.write_array_record(root / f"c100-{split}.array_record", encoded, labels,
                                     [f"class{k}" for k in range(100)])


@pytest.fixture(scope="module")
def benchmarks(tmp_path_factory):
  return write_benchmarks(tmp_path_factory.mktemp("benchmarks"))


TINY = dict(model="small_cnn", image_size=16, resize=18, batch_size=8, eval_batch_size=8,
            num_epochs=2, warmup_epochs=1, data_workers=0, log_every_steps=1,
            checkpoint_every_steps=1, nc_metrics=False, progress_bar=False)


def tiny(module, data_dir, **overrides):
  config = module.get_config()
  config.update(dict(TINY, data_dir=str(data_dir), **overrides))
  config = registry.with_method_trees(config, ("reweight", "ldam"))
  config.reweight.start_epoch = config.ldam.drw_epoch = 1  # both phases within 2 epochs
  return config


# ImageNet-LT in the default run; the other two read the same fixture through another list format
# (the sources' own tests: tests/harness/data/test_sources.py) and run in the slow one.
@pytest.mark.parametrize("name, loss", [
    ("imagenet_lt", "inverse_reweight"),
    pytest.param("inat2018", "ce", marks=pytest.mark.slow),
    pytest.param("imagenet_mr2", "mr2", marks=pytest.mark.slow)])
def test_config_runs_on_its_fixture_and_resumes_exactly(benchmarks, tmp_path, name, loss):
  config = tiny(CONFIGS[name], benchmarks, loss=loss)
  assert config.input_pipeline == "grain"
  straight = loop.train_and_evaluate(config, tmp_path / "straight", max_steps=3)
  # 23 images, batch 8: 2 steps an epoch, so step 3 is in epoch 1 (the reweighting's).
  assert straight["steps"] == 3
  # ImageNet-LT's K is the benchmark's (1,000; the fixture fills four); the others' from the files.
  assert len(straight["per_class_accuracy"]) == (1000 if name == "imagenet_lt" else len(COUNTS))
  assert np.isfinite(straight["overall_accuracy"])
  loop.train_and_evaluate(config, tmp_path / "resumed", max_steps=1)
  loop.train_and_evaluate(config, tmp_path / "resumed", max_steps=3)
  (step_a, a), (step_b, b) = (checkpoint_files.restore_latest(tmp_path / "straight"),
                              checkpoint_files.restore_latest(tmp_path / "resumed"))
  assert step_a == step_b == 3
  for key in ("params", "batch_stats", "loss_state", "opt_state"):
    chex.assert_trees_all_equal(a[key], b[key])
  saved = json.loads((tmp_path / "resumed" / "checkpoints" / "3" / "input" /
                      "process_0-of-1.json").read_text())
  # The resumed run continued the saved iterator (counted from the first run's start), at step 3.
  assert saved == {"start": 0, "grain": {"next_index": 3}}
  if loss == "inverse_reweight":
    assert sum(straight["reweight_batch_counts"]) > 0


def test_cifar100_lt_runs_on_mock_tfds(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = tiny(cifar100_lt, "", loss="inverse_reweight", input_pipeline="grain",
                batch_size=16, eval_batch_size=64, imbalance_factor=10.0)
  config.data_dir = None
  assert (config.views, config.augmentation, config.schedule) == (3, "released", "milelr")
  config.milelr_switch_epoch = 1
  with tfds.testing.mock_data(num_examples=400):
    summary = loop.train_and_evaluate(config, tmp_path / "run", max_steps=2)
  assert summary["steps"] == 2 and len(summary["per_class_accuracy"]) == 100


# CIFAR-100-LT's data in a subprocess: TFDS's mock serves one process only, so the recipe reads the
# same images from ArrayRecord files written by the project (the 'arrayrecord:' source). Its
# AutoAugment / Cutout / SimCLR draws are made per process batch (`data.augment_view`: vectorised,
# so they depend on the split over processes, unlike crop + flip); the comparison runs the three
# views unaugmented.
CIFAR100_FIXTURE = ("--config.dataset=arrayrecord:c100-{split}.array_record",
                    "--config.image_size=32", "--config.resize=32", "--config.imbalance_factor=1",
                    "--config.milelr_switch_epoch=1", "--config.augment=False")


# The ViT-B/16 configs keep their model (224 px) and read a random timm-shaped weight file.
VIT = {"imagenet_vit_probe": "frozen_encoder_from", "imagenet_vit_finetune": "pretrained"}
LIMIT = {"imagenet_vit_finetune": 2400}  # seconds per launch (the rest: 600)


def vit_weights(data_dir: pathlib.Path) -> pathlib.Path:
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  from tests.harness.models.pretrained.test_torch_state_dict import timm_vit_state_dict  # pylint: disable=g-import-not-at-top
  path = data_dir / "vit_b16.safetensors"
  if not path.exists():
    safetensors_numpy.save_file(timm_vit_state_dict(num_classes=1000, image_size=224,
                                                    patch_size=16, width=768, depth=12,
                                                    mlp_dim=3072), path)
  return path


def cli_overrides(name, data_dir):
  tiny = dict(TINY)
  if name in VIT:  # the config's own model at its own size
    tiny.update(model="vit_b16", image_size=224, resize=256)
  return [f"--config=experiments/configs/{name}.py", f"--config.data_dir={data_dir}",
          *(f"--config.{k}={v}" for k, v in tiny.items()), "--config.data_workers=2",
          "--config.reweight.start_epoch=1", "--config.ldam.drw_epoch=1",
          "--config.parallel=shard_map", "--max_steps=2", "--config.input_pipeline=grain",
          *(CIFAR100_FIXTURE if name == "cifar100_lt" else ()),
          *((f"--config.{VIT[name]}={vit_weights(data_dir)}",) if name in VIT else ())]


# The ViT-B/16 probe (its 86 M frozen parameters, a trained head) runs in ≈ 150 s here; its
# fine-tuning twin (8 replicas' backward passes of 86 M parameters on 2 cores, an all-reduce of
# 344 MB of gradients over gloo per step) in ≈ 14 min (passed 2026-12-01).
@pytest.mark.slow  # ≈ 60 s a config on 2 cores (ViT: above): 2 processes × 4 devices
@pytest.mark.parametrize("name", sorted([*CONFIGS, "cifar100_lt", *VIT]))
def test_two_processes_over_shard_map_equal_one_process(benchmarks, tmp_path, name):
  os.chdir(REPO)
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
  subprocess.run([sys.executable, "-m", "experiments.main", *cli_overrides(name, benchmarks),
                  f"--workdir={tmp_path / 'one'}"], cwd=REPO, env=env, check=True,
                 capture_output=True, timeout=LIMIT.get(name, 600))
  status = launch.launch(2, 4, [*cli_overrides(name, benchmarks), f"--workdir={tmp_path / 'two'}"],
                         timeout=LIMIT.get(name, 600))
  assert status == 0
  (step_a, a), (step_b, b) = (checkpoint_files.restore_latest(tmp_path / "one"),
                              checkpoint_files.restore_latest(tmp_path / "two"))
  assert step_a == step_b == 2
  # Exact in exact arithmetic; the devices' partial sums group differently (tests/harness/train/test_multiprocess).
  chex.assert_trees_all_close(a["params"], b["params"], rtol=1e-4, atol=1e-5)
  if name == "imagenet_vit_probe":  # the frozen encoder is the file's, bit for bit, in both
    chex.assert_trees_all_equal({k: v for k, v in a["params"].items() if k != "head"},
                                {k: v for k, v in b["params"].items() if k != "head"})
  for process in range(2):  # each process saved its own input position
    saved = json.loads((tmp_path / "two" / "checkpoints" / "2" / "input" /
                        f"process_{process}-of-2.json").read_text())
    assert saved["start"] == 0
