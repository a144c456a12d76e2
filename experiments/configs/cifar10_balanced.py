"""Balanced CIFAR-10, 1,000 images per class (a fixed per-seed selection), ResNet-32 with a linear
head: MR2's setting at the standard network. SGD 0.1, momentum 0.9, weight decay 5e-4, batch 128,
crop + flip, 2 warm-up epochs then cosine, 30 epochs. Methods: ERM, MR2 (paper form), MR2 (released
form, `mr2.form=released`), γ-only (`mr2.lam=0`). Needs `--config.data_dir=DATA`, a folder holding
CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 1.0
  config.max_train_per_class = 1000
  config.augment = True
  config.model = "resnet32"
  config.head = "linear"
  config.num_epochs = 30
  config.batch_size = 128
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 5e-4
  config.warmup_epochs = 2
  config.schedule = "cosine"
  config.eval_batch_size = 500
  config.checkpoint_every_steps = 500
  return config
