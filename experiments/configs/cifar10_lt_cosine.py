"""CIFAR-10-LT IF 100 with the reweighting paper's network and optimiser (ResNet-32, cosine head
s = 30, 200 epochs, batch 256, lr 0.3, weight decay 5e-4, reweighting from 160) but a cosine
schedule and crop + flip only: the named alternative to the released recipe (`cifar10_lt.py`,
which adds three views, AutoAugment, Cutout and MiLeLR to this one).

Needs `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz`
(the `cifar10_jpeg` layout; or `--config.dataset=tfds:cifar10`).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.batch_size = 256
  config.learning_rate = 0.3
  config.warmup_epochs = 10
  config.weight_decay = 5e-4
  # The deferred methods: the reweighting and DRW from epoch 160, IB from 100. LDAM on the cosine
  # head: the head's ×30 is LDAM's s, and the 0.5 cosine margin is 15 in logits.
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=160))
  config.ldam = ml_collections.ConfigDict(dict(scale=1.0, max_margin=15.0, drw_epoch=160))
  config.ib = ml_collections.ConfigDict(dict(start_epoch=100))
  return config
