"""The CIFAR-10-LT data of the paper recipes here (each of them sets these fields itself): the
CIFAR-10 JPEG copy, imbalance factor 100 with the standard LDAM seed-0 selection (Cao et al. 2019),
pad-4 crop + flip, ResNet-32, 200 epochs, deferred methods (the reweighting, DRW) from epoch 160.
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
  return config
