"""Study 2 on MNIST: MR2 on balanced MNIST, a 1,000-per-class subset for a 2-core CPU.

Small CNN, linear head, 5 epochs, no augmentation (flips would change digits); ERM, MR2 and its
ablations share this recipe. Pass `--config.data_dir=DATA`, a folder holding MNIST as `train.npz` /
`test.npz` (`images` uint8 [N, 28, 28], `labels`).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "mnist"
  config.imbalance_factor = 1.0
  config.max_train_per_class = 1000
  config.augment = False
  config.model = "small_cnn"
  config.head = "linear"
  config.num_epochs = 5
  config.batch_size = 128
  config.learning_rate = 0.05
  config.warmup_epochs = 1
  config.log_every_steps = 20
  config.checkpoint_every_steps = 400
  config.eval_batch_size = 500
  return config
