"""The CIFAR-10-LT data of the recipes here, the family's one data block (every cifar10_lt*.py and
study_*_cifar10_lt.py config starts from it): the CIFAR-10 JPEG copy at imbalance factor 100 with
the standard LDAM seed-0 selection (Cao et al. 2019), pad-4 crop + flip, ResNet-32, evaluation in
batches of 500. Needs `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in
`train.npz` / `test.npz` (the `cifar10_jpeg` layout; or `--config.dataset=tfds:cifar10`).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 100.0
  config.lt_selection = "ldam"
  config.augment = True
  config.model = "resnet32"
  config.eval_batch_size = 500
  return config
