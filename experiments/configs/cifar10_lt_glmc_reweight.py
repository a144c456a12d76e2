"""GLMC + the inverse reweighting + MiLeLR on CIFAR-10-LT IF 100 (PIPELINES spec §4, the reweighting
paper's strongest pipeline): `cifar10_lt_glmc.py` with ŵ in place of v in L_reb from epoch 160
(mixed-label per-class losses of fc_cb pooled over both passes, one counter update per step; L_bal
and L_con unchanged; GLMC's v before the switch) and MiLeLR instead of the cosine schedule (base
0.01, warm-up 10 epochs, switch at 160). Needs `--config.data_dir=DATA`, a folder holding CIFAR-10
as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

import ml_collections

from experiments.configs import cifar10_lt_glmc


def get_config():
  config = cifar10_lt_glmc.get_config()
  config.loss = "glmc+inverse_reweight"
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=160))
  config.warmup_epochs = 10
  config.schedule = "milelr"
  config.milelr_switch_epoch = 160
  return config
