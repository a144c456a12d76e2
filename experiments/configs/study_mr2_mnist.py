"""Study 2 on MNIST: MR2 on balanced MNIST, a 1,000-per-class subset for a 2-core CPU.

Small CNN, linear head, 5 epochs, no augmentation (flips would change digits); ERM, MR2 and its
ablations share this recipe. Pass `--config.data_dir=DATA`, a folder holding MNIST as `train.npz` /
`test.npz` (`images` uint8 [N, 28, 28], `labels`).
"""

from experiments.configs import mnist


def get_config():
  config = mnist.get_config()  # the small CNN, 5 epochs
  config.loss = "ce"  # the study's reference; MR2 and its ablations are its method specs
  config.max_train_per_class = 1000
  config.log_every_steps = 20
  config.checkpoint_every_steps = 400
  config.eval_batch_size = 500
  return config
