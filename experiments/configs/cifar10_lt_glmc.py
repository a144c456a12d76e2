"""GLMC on CIFAR-10-LT IF 100 (PIPELINES spec §3; Du et al. CVPR 2023): ResNet-32 at width 64
(d = 256) with the re-balanced head fc_cb (used for inference) and the instance-balanced fc,
projector and predictor (`methods.glmc.GLMCModel`); each step pairs the instance-balanced batch with
re-balanced rows (P(row) ∝ n_y^(−r), r = 0 for C10-LT IF 100: uniform), two crops (pad-4 crop +
flip) per row, global MixUp on the first and local CutMix on the second with one λ ~ Beta(1, 1);
L = α_e L_bal + (1 − α_e) L_reb + w_con L_con with α_e = 1 − (e/E)², ℓw = 1.2, w_con = 1; SGD momentum
0.9, lr 0.01, weight decay 5e-3, batch 64, 200 epochs, cosine, no warm-up. Needs
`--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the
`cifar10_jpeg` layout).

The long-tailed subset is the standard LDAM seed-0 selection; GLMC's own released splits are
`--config.lt_selection=glmc` (without replacement, the release's fix) and `glmc_paper` (with
replacement: the duplicated split behind the paper's numbers). Deviation: the cosine schedule
decays per step (the reference per epoch).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.model = "resnet32_w64"
  config.head = "linear"
  config.loss = "glmc"
  config.glmc = ml_collections.ConfigDict(dict(r=0.0, weight_exponent=1.2, w_con=1.0))
  config.batch_size = 64
  config.learning_rate = 0.01
  config.momentum = 0.9
  config.weight_decay = 5e-3
  config.warmup_epochs = 0
  config.schedule = "cosine"
  return config
