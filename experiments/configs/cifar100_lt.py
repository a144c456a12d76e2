"""CIFAR-100-LT IF 100, the reweighting paper's released recipe (REWEIGHT spec 'Schedule', PIPELINES
spec §1) as `cifar10_lt.py` for CIFAR-10-LT: three views (view 0 crop + flip + AutoAugment + Cutout,
the loss on it; views 1, 2 SimCLR), ResNet-32 with the cosine head (s = 30), SGD momentum 0.9,
weight decay 5e-4, batch 256, 200 epochs, MiLeLR with base rate 0.35 (CIFAR-100's), warm-up 10,
switch 160; CE to epoch 159, the inverse reweighting from 160 (`--config.loss=inverse_reweight`).
n_max = 500 (all of CIFAR-100's per-class images), n_i = ⌊500 · 100^(−i/99)⌋ (10,847 images), the
LDAM seed-0 selection.

Data: TFDS `cifar100` in ArrayRecord format (`tfds build cifar100 --file_format=array_record
--data_dir=<dir>` on a machine with network access, then `--config.data_dir=<dir>`).
"""

from experiments.configs import cifar10_lt


def get_config():
  config = cifar10_lt.get_config()  # the released recipe, on CIFAR-100-LT
  config.dataset = "tfds:cifar100"
  config.learning_rate = 0.35
  return config
