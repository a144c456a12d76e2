"""Study 2 pilot: MR2 on balanced CIFAR-10, a 500-per-class subset for a 2-core CPU.

`cifar10_balanced.py`'s data at 500 per class, with the small CNN and a linear head for 10
epochs; ERM, MR2 and its ablations share this recipe. Pass
`--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the
`cifar10_jpeg` layout).
"""

from experiments.configs import cifar10_balanced


def get_config():
  config = cifar10_balanced.get_config()
  config.max_train_per_class = 500
  config.model = "small_cnn"
  config.num_epochs = 10
  config.learning_rate = 0.05
  config.warmup_epochs = 1
  config.log_every_steps = 20
  config.checkpoint_every_steps = 400
  return config
