"""Full CIFAR-10-LT, IF 100 (all 12,406 training images), ResNet-32 with a linear head: the short
recipe of the standard-size study for every method. SGD 0.1, momentum 0.9, weight decay 2e-4, batch
128, pad-4 crop + flip, 2 warm-up epochs, ×0.1 at 80 % and ×0.01 at 90 % of 30 epochs; deferred
methods (reweighting, DRW) from 80 % (epoch 24), where they start from CE's checkpoint
(`experiments.compare` does this by itself). LDAM-DRW keeps its released head, the normalised one
(`head=cosine`, scale 30, `ldam.scale=1`, `ldam.max_margin=15`: tools/standard_size.sh); on the
linear head its s = 30 would multiply unnormalised logits. Needs `--config.data_dir=DATA`, a folder
holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.lt_selection = "seeded"  # the study's subset: the seed's, not LDAM's
  config.head = "linear"
  config.num_epochs = 30
  config.batch_size = 128
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 2e-4
  config.warmup_epochs = 2
  config.schedule = "step"
  config.step_epochs = (24, 27)
  config.step_factor = 0.1  # ×0.1 at epoch 24, ×0.01 at 27
  # The deferred methods from epoch 24 (the reweighting, LDAM-DRW, IB).
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=24))
  config.ldam = ml_collections.ConfigDict(dict(drw_epoch=24))
  config.ib = ml_collections.ConfigDict(dict(start_epoch=24))
  config.class_loss_every_epochs = 3
  config.checkpoint_every_steps = 500
  return config
