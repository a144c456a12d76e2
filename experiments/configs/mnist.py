"""Balanced MNIST with the small CNN (MR2 study): `--config.data_dir=DATA`, a folder holding MNIST
as `train.npz` / `test.npz` (`images` uint8 [N, 28, 28], `labels`)."""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "mnist"
  config.model = "small_cnn"
  config.num_epochs = 5
  config.batch_size = 128
  config.learning_rate = 0.05
  config.warmup_epochs = 1
  config.loss = "mr2"
  return config
