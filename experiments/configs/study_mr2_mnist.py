"""Study 2 on MNIST (issue 6): MR2 on balanced MNIST, a 1,000-per-class subset for a 2-core CPU.

Small CNN, linear head, 5 epochs, no augmentation (flips would change digits); ERM, MR2 and its
ablations share this recipe. Pass `--config.data_dir=../shared/data/mnist`.
"""

from experiments.configs import study_mr2_cifar10


def get_config():
  config = study_mr2_cifar10.get_config()
  config.dataset = "mnist"
  config.max_train_per_class = 1000
  config.augment = False
  config.num_epochs = 5
  return config
