"""Runs the LDAM-DRW release's own `cifar_train.py` (Cao et al., NeurIPS 2019,
github.com/kaidic/LDAM-DRW) on this project's CIFAR-10 copy, on a CPU, unmodified.

    python tools/authors_ldam_drw.py --release DIR --data_dir DIR --workdir DIR [--check_indices] \
        -- [cifar_train.py's own flags, e.g. --loss_type CE -j 1]

The release is not part of this project (nor committed here): DIR is a checkout of it. What this
wrapper does, and nothing more:
  1. writes the CIFAR-10 JPEG copy (`train.npz` / `test.npz`, decoded with Pillow) into `WORKDIR/data`
     as the `cifar-10-batches-py` pickles torchvision's `CIFAR10` reads, in the dataset's order, so
     the release's own `IMBALANCECIFAR10` draws its own selection (12,406 images at IF 100);
  2. runs with no GPU: `.cuda()` of tensors and modules is the identity, `torch.cuda.FloatTensor`
     (LDAMLoss's margins) is `torch.FloatTensor` and `torch.load` maps to the CPU (the release calls
     `.cuda()` unconditionally); torchvision's MD5 check of the batches (the
     originals' checksums, which a re-encoded copy cannot have) is skipped, and nothing downloads;
  3. keeps the logs of every start: the release opens `log_train.csv` / `log_test.csv` with 'w', so a
     resumed start would erase the epochs before it; an existing pair is renamed `*.part<N>.csv`.
     `--resume WORKDIR/checkpoint/<store_name>/ckpt.pth.tar` continues from the last finished epoch
     (the release saves one every epoch; its data order after a resume is a fresh shuffle).
`--check_indices` asserts that the release's selection is `experiments.data.long_tail` 'ldam'
selection (the harness's `cifar10_lt_200` training set), image for image, and exits.

`--summarize OUT` (no run) reads every start's test log of each run under WORKDIR/log and writes
OUT/<store_name>/: `log_test.csv` (the starts' logs in order), `per_epoch.json` (the test accuracy
and per-class accuracy after each epoch) and `summary.json` (the last epoch's and the best epoch's
accuracy: the release reports `best_acc1`, the maximum over epochs), and prints them.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import runpy
import sys

import numpy as np

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]


def decode(npz_path: str) -> tuple[np.ndarray, np.ndarray]:
  """uint8 [N, 32, 32, 3] images and int labels of one split of the JPEG copy."""
  from PIL import Image
  packed = np.load(npz_path)
  jpeg, offsets, labels = packed["jpeg"], packed["offsets"], packed["labels"]
  images = np.stack([np.asarray(Image.open(io.BytesIO(jpeg[offsets[i]:offsets[i + 1]].tobytes()))
                                .convert("RGB")) for i in range(len(labels))])
  return images, labels.astype(np.int64)


def write_batches(data_dir: str, out_root: str) -> None:
  """`out_root/cifar-10-batches-py` in the original's pickle layout (5 train batches, 1 test)."""
  folder = os.path.join(out_root, "cifar-10-batches-py")
  if os.path.exists(os.path.join(folder, "batches.meta")):
    return
  os.makedirs(folder, exist_ok=True)
  def dump(name, images, labels):
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # CHW rows, as the original
    with open(os.path.join(folder, name), "wb") as f:
      pickle.dump({"data": rows, "labels": [int(v) for v in labels]}, f)
  train_images, train_labels = decode(os.path.join(data_dir, "train.npz"))
  for b in range(5):
    part = slice(b * 10000, (b + 1) * 10000)
    dump(f"data_batch_{b + 1}", train_images[part], train_labels[part])
  test_images, test_labels = decode(os.path.join(data_dir, "test.npz"))
  dump("test_batch", test_images, test_labels)
  with open(os.path.join(folder, "batches.meta"), "wb") as f:
    pickle.dump({"label_names": LABEL_NAMES}, f)


def run_on_cpu() -> None:
  """Makes the release's unconditional `.cuda()` calls and CUDA checkpoint loads CPU no-ops."""
  import torch
  import torchvision
  torch.Tensor.cuda = lambda self, *a, **k: self
  torch.nn.Module.cuda = lambda self, *a, **k: self
  torch.cuda.FloatTensor = torch.FloatTensor  # LDAMLoss builds its margins as torch.cuda.FloatTensor
  load = torch.load
  torch.load = lambda f, *a, **k: load(f, map_location="cpu", weights_only=False)
  torchvision.datasets.CIFAR10._check_integrity = lambda self: True
  torchvision.datasets.cifar.check_integrity = lambda *a, **k: True  # batches.meta's MD5
  torchvision.datasets.CIFAR10.download = lambda self: None


def keep_logs(workdir: str) -> None:
  """Renames an earlier start's log_train.csv / log_test.csv to *.part<N>.csv (see module doc)."""
  log_root = os.path.join(workdir, "log")
  if not os.path.isdir(log_root):
    return
  for store in os.listdir(log_root):
    folder = os.path.join(log_root, store)
    for name in ("log_train", "log_test"):
      path = os.path.join(folder, name + ".csv")
      if os.path.exists(path) and os.path.getsize(path) > 0:
        n = 1
        while os.path.exists(os.path.join(folder, f"{name}.part{n}.csv")):
          n += 1
        os.rename(path, os.path.join(folder, f"{name}.part{n}.csv"))


def check_indices(release: str, workdir: str, imb_factor: float) -> None:
  """Asserts the release's selected images are the harness's 'ldam' selection, in class order."""
  sys.path.insert(0, release)
  from imbalance_cifar import IMBALANCECIFAR10
  chosen = IMBALANCECIFAR10(root=os.path.join(workdir, "data"), imb_factor=imb_factor,
                            rand_number=0, train=True, download=False)
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(0, repo)
  from experiments.data.long_tail import long_tail_indices
  whole = torchvision_train(os.path.join(workdir, "data"))
  ours = long_tail_indices(np.asarray(whole.targets), 10, 1 / imb_factor, 0, selection="ldam")
  # The same images (the release keeps them in its shuffled order, ours are sorted indices).
  assert len(chosen.data) == len(ours), (len(chosen.data), len(ours))
  ours_rows = sorted(row.tobytes() + bytes([t]) for row, t in
                     zip(whole.data[ours], np.asarray(whole.targets)[ours]))
  their_rows = sorted(row.tobytes() + bytes([t]) for row, t in zip(chosen.data, chosen.targets))
  assert ours_rows == their_rows, "the release's selection is not the harness's"
  print(f"release selection == harness 'ldam' selection: {len(ours)} images, counts "
        f"{np.bincount(chosen.targets, minlength=10).tolist()}")


def read_test_logs(folder: str) -> tuple[str, list[dict]]:
  """The concatenated test logs of one run (`log_test.part1.csv`, ..., `log_test.csv`) and, per
  evaluated epoch in order, {'top1': %, 'class_accuracy': [K] fractions}."""
  import re
  parts = sorted((f for f in os.listdir(folder) if re.fullmatch(r"log_test\.part\d+\.csv", f)),
                 key=lambda f: int(re.findall(r"\d+", f)[0]))
  text = "".join(open(os.path.join(folder, f)).read() for f in [*parts, "log_test.csv"]
                 if os.path.exists(os.path.join(folder, f)))
  epochs = []
  for line in text.splitlines():
    top1 = re.match(r"val Results: Prec@1 ([\d.]+)", line)
    if top1:
      epochs.append({"top1": float(top1.group(1))})
    classes = re.match(r"val Class Accuracy: \[(.*)\]", line)
    if classes and epochs:
      epochs[-1]["class_accuracy"] = [float(v) for v in classes.group(1).split(",")]
  return text, epochs


def summarize(workdir: str, out: str) -> None:
  """Writes and prints each run's per-epoch test accuracy, final and best epoch (module doc)."""
  import json
  for store in sorted(os.listdir(os.path.join(workdir, "log"))):
    text, epochs = read_test_logs(os.path.join(workdir, "log", store))
    if not epochs:
      continue
    best = max(range(len(epochs)), key=lambda e: (epochs[e]["top1"], -e))
    summary = {"run": store, "epochs_evaluated": len(epochs),
               "final_epoch": len(epochs), "final_top1": epochs[-1]["top1"],
               "final_class_accuracy": epochs[-1].get("class_accuracy"),
               "best_epoch": best + 1, "best_top1": epochs[best]["top1"],
               "best_class_accuracy": epochs[best].get("class_accuracy")}
    folder = os.path.join(out, store)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "log_test.csv"), "w") as f:
      f.write(text)
    with open(os.path.join(folder, "per_epoch.json"), "w") as f:
      json.dump([{"epoch": e + 1, **r} for e, r in enumerate(epochs)], f, indent=1)
    with open(os.path.join(folder, "summary.json"), "w") as f:
      json.dump(summary, f, indent=1)
    print(f"{store}: {len(epochs)} epochs evaluated; last {epochs[-1]['top1']:.2f} %, best "
          f"{epochs[best]['top1']:.2f} % at epoch {best + 1}")


def torchvision_train(root: str):
  import torchvision
  return torchvision.datasets.CIFAR10(root=root, train=True, download=False)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--release", help="a checkout of kaidic/LDAM-DRW")
  parser.add_argument("--data_dir", help="folder of the CIFAR-10 JPEG npz files")
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--check_indices", action="store_true")
  parser.add_argument("--summarize", metavar="OUT", help="write the runs' summaries to OUT")
  args, release_args = parser.parse_known_args()
  if args.summarize:
    summarize(args.workdir, args.summarize)
    return
  release_args = [a for a in release_args if a != "--"]
  if not (args.release and args.data_dir):
    parser.error("--release and --data_dir are needed to run")
  os.makedirs(args.workdir, exist_ok=True)
  write_batches(args.data_dir, os.path.join(args.workdir, "data"))
  run_on_cpu()
  if args.check_indices:
    check_indices(os.path.abspath(args.release), args.workdir, 0.01)
    return
  keep_logs(args.workdir)
  release = os.path.abspath(args.release)
  os.chdir(args.workdir)
  sys.path.insert(0, release)
  sys.argv = [os.path.join(release, "cifar_train.py"), *release_args]
  runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
  main()
