"""Study 1 pilot: CIFAR-10-LT, imbalance factor 100, at a tenth of the size for a 2-core CPU.

n_max = 500 instead of 5000 (class counts 500, 299, 179, 107, 64, 38, 23, 13, 8, 5: 1,236 images),
small CNN with the reference's cosine head (s = 30), 40 epochs, reweighting and DRW deferred to
epoch 32 (the reference's 160 of 200). Same recipe for every method; pass `--config.data_dir=DATA`,
a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
LDAM on this head: the margin is on the cosine scale, so with logits already ×30 use `ldam.scale=1`
and `ldam.max_margin=15` (= 0.5 × 30).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.lt_selection = "seeded"  # the study's subset: the seed's, not LDAM's
  config.max_train_per_class = 500
  config.model = "small_cnn"
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.num_epochs = 40
  config.batch_size = 64
  config.learning_rate = 0.05
  config.warmup_epochs = 2
  config.weight_decay = 5e-4
  # The deferred methods: the reweighting and DRW from epoch 32, IB from 20.
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=32))
  config.ldam = ml_collections.ConfigDict(dict(drw_epoch=32))
  config.ib = ml_collections.ConfigDict(dict(start_epoch=20))
  config.log_every_steps = 20
  config.checkpoint_every_steps = 200
  config.class_loss_every_epochs = 1  # per-class training-set loss L_c and ρ over training
  return config
