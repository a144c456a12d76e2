"""tools/reference.sh --smoke: the accelerator script's commands, end to end at tiny size on
CPU, from a checkout without `pip install` of the project (PYTHONPATH), on a generated CIFAR-format
folder (JPEG files packed like ../shared/data/cifar10_jpeg)."""

import io
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
from PIL import Image

REPO = pathlib.Path(__file__).resolve().parents[2]
# Installed here (the `test` extra) but not on the accelerator machine (its package list in the
# device tool's KINDS.md); ml_collections and tensorboardX travel there as wheels instead.
ABSENT_ON_ACCELERATOR = ("tensorflow_datasets", "grain", "array_record", "tensorflow")


def cifar_folder(folder, per_class_train=40, per_class_test=10):
  rng = np.random.default_rng(0)
  folder.mkdir()
  for split, per_class in (("train", per_class_train), ("test", per_class_test)):
    labels = np.repeat(np.arange(10), per_class).astype(np.int32)
    encoded = []
    for label in labels:
      pixels = np.clip(rng.normal(25 * label, 40, (32, 32, 3)), 0, 255).astype(np.uint8)
      buffer = io.BytesIO()
      Image.fromarray(pixels).save(buffer, format="JPEG")
      encoded.append(buffer.getvalue())
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
    np.savez(folder / f"{split}.npz", jpeg=np.frombuffer(b"".join(encoded), np.uint8),
             offsets=offsets, labels=labels)
  return folder


@pytest.mark.slow  # ≈ 1–5 min: fourteen small runs in five `experiments.compare` processes
def test_reference_script_smoke(tmp_path):
  data = cifar_folder(tmp_path / "cifar10_jpeg")
  work = tmp_path / "work"
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
  # The accelerator image has neither tensorflow-datasets nor grain (nor their array_record): the
  # script must not import them. A sitecustomize on PYTHONPATH makes each import raise here too.
  blocker = tmp_path / "absent_packages"
  blocker.mkdir()
  (blocker / "sitecustomize.py").write_text(
      "import sys\n"
      f"sys.modules.update(dict.fromkeys({ABSENT_ON_ACCELERATOR!r}))\n")
  env.update(JAX_PLATFORMS="cpu", MR2_JAX_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(blocker))
  probe = subprocess.run(["python3", "-c", "import tensorflow_datasets"], env=env,
                         capture_output=True, text=True)
  assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, probe.stderr
  result = subprocess.run(["bash", "tools/reference.sh", "--smoke", str(data), str(work)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "reference.sh: done" in result.stdout
  lt = json.loads((work / "cifar10_lt" / "report" / "comparison.json").read_text())
  balanced = json.loads((work / "cifar10_balanced" / "report" / "comparison.json").read_text())
  assert {"ce", "ldam_drw", "inverse_reweight", "mr2+inverse_reweight"} <= set(lt)
  assert {"ce", "mr2", "mr2_released", "gamma_only"} <= set(balanced)
  config = json.loads((work / "cifar10_lt" / "inverse_reweight" / "seed0" / "config.json")
                      .read_text())
  assert config["init_from"].endswith(":1")  # the reweighting started from CE's checkpoint
  assert config["data_workers"] == 2  # batches built in two host threads (THREADS on a device)
  for folder, methods in (("released_cifar10_lt", {"released", "released_rw"}),
                          ("etf_dr_cifar10_lt", {"etf_dr", "etf_dr_rw"}),
                          ("glmc_cifar10_lt", {"glmc", "glmc_rw"})):
    report = json.loads((work / folder / "report" / "comparison.json").read_text())
    assert methods <= set(report), folder
  released = json.loads((work / "released_cifar10_lt" / "released_rw" / "seed0" / "config.json")
                        .read_text())
  assert (released["views"], released["augmentation"], released["schedule"]) == (
      3, "released", "milelr")


@pytest.mark.parametrize("variables,message", [
    (dict(PARTS="1 4"), "PARTS holds 1, 2 and/or 3, got '1 4'"),
    (dict(THREADS="eight"), "THREADS is a count, got 'eight'"),
])
def test_reference_script_refuses_unknown_parts_and_thread_counts(tmp_path, variables, message):
  env = dict(os.environ, **variables)
  result = subprocess.run(["bash", "tools/reference.sh", "--smoke", str(tmp_path / "data"),
                           str(tmp_path / "work")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
  assert result.returncode == 2 and message in result.stderr, result.stderr
  assert not (tmp_path / "work").exists()  # refused before anything ran
