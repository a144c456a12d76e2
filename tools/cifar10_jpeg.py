"""Makes the CIFAR-10 folder the harness's `cifar10_jpeg` source reads, from the dataset's Python
release (Krizhevsky, 2009: `cifar-10-python.tar.gz` at https://www.cs.toronto.edu/~kriz/cifar.html).

    python -m tools.cifar10_jpeg --source=cifar-10-python.tar.gz --out=DATA [--quality=75]

`--source` is the archive as downloaded or the `cifar-10-batches-py` folder it holds. `DATA` gets
two files, one per split:

    train.npz  jpeg uint8 [total bytes] (every image's JPEG file, concatenated),
               offsets int64 [50001] (image i is jpeg[offsets[i]:offsets[i + 1]]),
               labels int32 [50000]
    test.npz   the same for the 10,000 test images

in the release's order (the five training batches, then the test batch), labels in CIFAR-10's order
(airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck). Each image is encoded by
Pillow at `--quality` with Pillow's default 4:2:0 chroma subsampling; 75 is the quality of the copy
the committed results were trained on. That copy was re-encoded from another source of the same
images, so a folder made here holds other JPEG bytes: runs on it are the same experiments, not the
committed runs bit for bit. Nothing is downloaded here.

The release's batches are pickles. They are read with an unpickler that builds dicts, lists,
strings and NumPy arrays only, so an archive from elsewhere cannot run code.
"""

from __future__ import annotations

import argparse
import io
import pathlib
import pickle
import sys
import tarfile
from collections.abc import Callable, Iterator

import numpy as np
from PIL import Image

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
FOLDER = "cifar-10-batches-py"

# What a CIFAR-10 batch pickle needs to build its NumPy array, under NumPy 1 and 2, whichever
# pickle protocol wrote it (2: bytes as `_codecs.encode` of a str; 5: `_frombuffer`).
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class _BatchUnpickler(pickle.Unpickler):

  def find_class(self, module, name):
    if (module, name) not in _ALLOWED:
      raise pickle.UnpicklingError(f"a CIFAR-10 batch holds no {module}.{name}")
    return super().find_class(module, name)


def read_batch(data: bytes) -> tuple[np.ndarray, np.ndarray]:
  """uint8 [N, 32, 32, 3] images and int32 [N] labels of one pickled batch (rows of 3,072 bytes:
  the red, green and blue planes of 32 × 32 pixels)."""
  batch = _BatchUnpickler(io.BytesIO(data), encoding="latin1").load()
  rows = np.asarray(batch["data"], np.uint8)
  if rows.ndim != 2 or rows.shape[1] != 3 * 32 * 32:
    raise ValueError(f"a CIFAR-10 batch's rows are 3,072 bytes; got shape {rows.shape}")
  labels = np.asarray(batch["labels"], np.int32)
  if len(labels) != len(rows):
    raise ValueError(f"{len(rows)} images and {len(labels)} labels in one batch")
  return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _batch_reader(source: pathlib.Path) -> Callable[[str], bytes]:
  """name → the batch file's bytes, from the archive or the folder."""
  if source.is_dir():
    folder = source / FOLDER if (source / FOLDER).is_dir() else source
    return lambda name: (folder / name).read_bytes()
  archive = tarfile.open(source, "r:*")

  def read(name):
    member = archive.extractfile(f"{FOLDER}/{name}")
    if member is None:
      raise FileNotFoundError(f"{source} holds no file {FOLDER}/{name}")
    return member.read()
  return read


def encode(images: np.ndarray, quality: int) -> Iterator[bytes]:
  for image in images:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    yield buffer.getvalue()


def write_split(path: pathlib.Path, images: np.ndarray, labels: np.ndarray, quality: int) -> None:
  """`path` (an .npz) in the `cifar10_jpeg` layout; written beside and renamed, so a reader sees
  no half-written file."""
  files = list(encode(images, quality))
  offsets = np.concatenate([[0], np.cumsum([len(f) for f in files])]).astype(np.int64)
  partial = path.with_name(path.name + ".partial")
  with open(partial, "wb") as out:
    np.savez(out, jpeg=np.frombuffer(b"".join(files), np.uint8), offsets=offsets,
             labels=labels.astype(np.int32))
  partial.replace(path)


def make_folder(source: pathlib.Path, out: pathlib.Path, quality: int = 75) -> None:
  read = _batch_reader(source)
  out.mkdir(parents=True, exist_ok=True)
  for split, names in (("train", TRAIN_BATCHES), ("test", (TEST_BATCH,))):
    batches = [read_batch(read(name)) for name in names]
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    write_split(out / f"{split}.npz", images, labels, quality)
    print(f"{out / f'{split}.npz'}: {len(labels)} images, "
          f"{(out / f'{split}.npz').stat().st_size / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--source", required=True, type=pathlib.Path,
                      help="cifar-10-python.tar.gz, or the cifar-10-batches-py folder")
  parser.add_argument("--out", required=True, type=pathlib.Path, help="the folder to write")
  parser.add_argument("--quality", type=int, default=75, help="JPEG quality (Pillow's scale)")
  args = parser.parse_args(argv)
  make_folder(args.source, args.out, args.quality)
  return 0


if __name__ == "__main__":
  sys.exit(main())
