"""CIFAR-10-LT IF 100 with the reweighting paper's network and optimiser (ResNet-32, cosine head
s = 30, 200 epochs, batch 256, lr 0.3, weight decay 5e-4, reweighting from 160) but a cosine
schedule and crop + flip only: the named alternative to the released recipe (`cifar10_lt.py`: three views,
AutoAugment, Cutout, MiLeLR).

Needs `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz`
(the `cifar10_jpeg` layout; or `--config.dataset=tfds:cifar10`).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 100.0
  config.lt_selection = "ldam"
  config.augment = True
  config.model = "resnet32"
  config.num_epochs = 200
  config.reweight.start_epoch = 160
  config.ldam.drw_epoch = 160
  config.eval_batch_size = 500
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.batch_size = 256
  config.learning_rate = 0.3
  config.warmup_epochs = 10
  config.weight_decay = 5e-4
  # LDAM on the cosine head: the head's ×30 is LDAM's s, and the 0.5 cosine margin is 15 in logits.
  config.ldam.scale = 1.0
  config.ldam.max_margin = 15.0
  config.ib.start_epoch = 100
  return config
