"""Embedded balanced digits (scikit-learn, 8×8, 10 classes), small CNN: MR2's setting (balanced data,
class-wise disparity) for the main job. Seconds per run on 2 CPU cores."""

import ml_collections

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "digits"
  config.imbalance_factor = 1.0
  config.model = "small_cnn"
  config.num_epochs = 30
  config.batch_size = 64
  config.learning_rate = 0.05
  config.warmup_epochs = 2
  config.log_every_steps = 20
  config.checkpoint_every_steps = 100
  config.eval_batch_size = 128
  # Deferred like the reference (160 of 200 epochs): the reweighting and DRW from 20, IB from 15.
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=20))
  config.ldam = ml_collections.ConfigDict(dict(drw_epoch=20))
  config.ib = ml_collections.ConfigDict(dict(start_epoch=15))
  return config
