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

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "tfds:cifar100"
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
  config.learning_rate = 0.35
  config.warmup_epochs = 10
  config.weight_decay = 5e-4
  # LDAM on the cosine head: the head's ×30 is LDAM's s, and the 0.5 cosine margin is 15 in logits.
  config.ldam.scale = 1.0
  config.ldam.max_margin = 15.0
  config.ib.start_epoch = 100
  config.views = 3
  config.augmentation = "released"
  config.schedule = "milelr"
  config.milelr_switch_epoch = 160
  return config
