"""The frozen-feature probe of CIFAR-10: a linear head on EfficientNet-Lite0's ImageNet features of
the images at 128 px, cached once (`python -m experiments.studies.linear_probe features
--data_dir=DATA`; the 'features:lite0-r128' source, `experiments.data.cached_features`). One recipe for every method:
SGD momentum 0.9, lr 0.01 cosine to 0 over all steps (no warm-up), batch 256 (the remainder of
each epoch dropped), 30 epochs, no weight decay, W ~ N(0, 0.01²) (lr and epochs chosen on ERM's
validation accuracy, `python -m experiments.studies.linear_probe select`). Balanced; the
long-tailed setting is `--config.imbalance_factor=100`. Seconds per run on 2 CPU cores."""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "features:lite0-r128"
  config.model = "linear_head"
  config.augment = False
  config.num_epochs = 30
  config.batch_size = 256
  config.learning_rate = 0.01
  config.momentum = 0.9
  config.weight_decay = 0.0
  config.warmup_epochs = 0
  config.schedule = "cosine"
  config.log_every_steps = 200
  config.checkpoint_every_steps = 10_000
  config.eval_batch_size = 2_000
  config.nc_metrics = False
  config.progress_bar = False
  return config
