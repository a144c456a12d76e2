"""Study 2 pilot: MR2 on balanced CIFAR-10, a 500-per-class subset for a 2-core CPU.

Small CNN, linear head, 10 epochs; ERM, MR2 and its ablations share this recipe. Pass
`--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the
`cifar10_jpeg` layout).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 1.0
  config.max_train_per_class = 500
  config.augment = True
  config.model = "small_cnn"
  config.head = "linear"
  config.num_epochs = 10
  config.batch_size = 128
  config.learning_rate = 0.05
  config.warmup_epochs = 1
  config.log_every_steps = 20
  config.checkpoint_every_steps = 400
  config.eval_batch_size = 500
  return config
