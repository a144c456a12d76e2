"""ETF-DR on CIFAR-10-LT IF 100 (PIPELINES spec §2; Yang et al. NeurIPS 2022): ResNet-32 (d = 64),
the fixed simplex-ETF head (`head='etf'`: BatchNorm + L2 normalisation, M seeded by `seed`, in the
checkpoint, never updated), the dot-regression loss with GivenEw, mixup α = 1; SGD 0.1, momentum
0.9, weight decay 2e-4, batch 128, crop + flip, 200 epochs, 5 warm-up epochs, ×0.1 at 160 and ×0.01
at 180. Needs `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` /
`test.npz` (the `cifar10_jpeg` layout).

Deviation: the warm-up is linear per step here; the reference's is per epoch, lr·(e + 1)/5.
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.head = "etf"
  config.loss = "etf_dr"
  config.mixup_alpha = 1.0
  # SGD 0.1, momentum 0.9, batch 128, 5 warm-up epochs: the defaults; ×0.1 at 160 and again at 180.
  config.weight_decay = 2e-4
  config.schedule = "step"
  config.step_factor = 0.1
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=160))  # ETF-DR + reweighting
  return config
