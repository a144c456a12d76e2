"""ETF-DR on CIFAR-10-LT IF 100 (PIPELINES spec §2; Yang et al. NeurIPS 2022): ResNet-32 (d = 64),
the fixed simplex-ETF head (`head='etf'`: BatchNorm + L2 normalisation, M seeded by `seed`, in the
checkpoint, never updated), the dot-regression loss with GivenEw, mixup α = 1; SGD 0.1, momentum
0.9, weight decay 2e-4, batch 128, crop + flip, 200 epochs, 5 warm-up epochs, ×0.1 at 160 and ×0.01
at 180. Needs `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` /
`test.npz` (the `cifar10_jpeg` layout).

Deviation: the warm-up is linear per step here; the reference's is per epoch, lr·(e + 1)/5.
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 100.0
  config.lt_selection = "ldam"
  config.augment = True
  config.model = "resnet32"
  config.num_epochs = 200
  config.reweight.start_epoch = 160
  config.ldam.drw_epoch = 160
  config.eval_batch_size = 500
  config.head = "etf"
  config.loss = "etf_dr"
  config.mixup_alpha = 1.0
  config.batch_size = 128
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 2e-4
  config.warmup_epochs = 5
  config.schedule = "step"
  config.step_epochs = (160, 180)
  config.step_factor = 0.1
  return config
