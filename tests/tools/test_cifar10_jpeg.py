"""tools/cifar10_jpeg.py: from an archive laid out as CIFAR-10's Python release to a folder the
harness's `cifar10_jpeg` source loads, images and labels in the release's order."""

import io
import pickle
import tarfile

import numpy as np
import pytest

from experiments.data.loading import load_split
from tools import cifar10_jpeg

PER_BATCH = 3


def _images(count, start):
  """Smooth colour ramps (JPEG keeps them close), a different one per image."""
  ramp = np.linspace(0, 1, 32)
  base = np.stack([np.add.outer(ramp, ramp)] * 3, axis=-1) * 100
  return np.stack([np.clip(base + 10 * (start + i) * np.array([1, 2, 3]), 0, 255)
                   for i in range(count)]).astype(np.uint8)


def _batch(images, labels):
  """A batch as the release pickles it: CHW rows of 3,072 bytes, labels a list, latin-1 strings."""
  rows = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
  return pickle.dumps({"batch_label": "training batch", "data": rows,
                       "labels": [int(v) for v in labels]}, protocol=2)


@pytest.fixture(name="release")
def release_fixture(tmp_path):
  """(archive path, train images, train labels, test images, test labels)."""
  archive = tmp_path / "cifar-10-python.tar.gz"
  train_images, train_labels, members = [], [], {}
  for b, name in enumerate(cifar10_jpeg.TRAIN_BATCHES):
    images, labels = _images(PER_BATCH, PER_BATCH * b), (np.arange(PER_BATCH) + b) % 10
    train_images.append(images)
    train_labels.append(labels)
    members[name] = _batch(images, labels)
  test_images, test_labels = _images(2, 40), np.array([9, 0])
  members[cifar10_jpeg.TEST_BATCH] = _batch(test_images, test_labels)
  with tarfile.open(archive, "w:gz") as tar:
    for name, data in members.items():
      info = tarfile.TarInfo(f"{cifar10_jpeg.FOLDER}/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return (archive, np.concatenate(train_images), np.concatenate(train_labels), test_images,
          test_labels)


def test_the_folder_loads_as_cifar10_jpeg(release, tmp_path, monkeypatch):
  archive, train_images, train_labels, test_images, test_labels = release
  monkeypatch.setenv("MR2_JAX_CACHE", str(tmp_path / "cache"))
  assert cifar10_jpeg.main(["--source", str(archive), "--out", str(tmp_path / "data")]) == 0
  for split, images, labels in (("train", train_images, train_labels),
                                ("test", test_images, test_labels)):
    loaded = load_split("cifar10_jpeg", split, tmp_path / "data")
    np.testing.assert_array_equal(loaded.labels, labels)
    assert loaded.images.shape == images.shape and loaded.images.dtype == np.uint8
    assert np.abs(loaded.images.astype(int) - images).mean() < 3  # JPEG at quality 75
    with np.load(tmp_path / "data" / f"{split}.npz") as packed:
      assert packed["offsets"].dtype == np.int64 and packed["labels"].dtype == np.int32
      assert packed["offsets"][-1] == len(packed["jpeg"])


def test_the_extracted_folder_gives_the_same_files(release, tmp_path):
  archive = release[0]
  with tarfile.open(archive) as tar:
    tar.extractall(tmp_path / "extracted", filter="data")
  cifar10_jpeg.make_folder(archive, tmp_path / "from_archive")
  cifar10_jpeg.make_folder(tmp_path / "extracted", tmp_path / "from_folder")
  for split in ("train", "test"):
    assert ((tmp_path / "from_archive" / f"{split}.npz").read_bytes()
            == (tmp_path / "from_folder" / f"{split}.npz").read_bytes())


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_batch_reads_back_whichever_protocol_wrote_it(protocol):
  images, labels = _images(2, 0), np.array([3, 4])
  rows = images.transpose(0, 3, 1, 2).reshape(2, -1)
  read = cifar10_jpeg.read_batch(pickle.dumps({"data": rows, "labels": [3, 4]}, protocol=protocol))
  np.testing.assert_array_equal(read[0], images)
  np.testing.assert_array_equal(read[1], labels)


def test_a_pickle_that_would_run_code_is_refused():
  class Payload:
    def __reduce__(self):
      return (print, ("not a CIFAR-10 batch",))
  with pytest.raises(pickle.UnpicklingError, match="holds no builtins.print"):
    cifar10_jpeg.read_batch(pickle.dumps({"data": Payload(), "labels": []}))
