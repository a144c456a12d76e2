"""GLMC + the inverse reweighting + MiLeLR on CIFAR-10-LT IF 100 (PIPELINES spec §4, the reweighting
paper's strongest pipeline): `cifar10_lt_glmc.py` with ŵ in place of v in L_reb from epoch 160
(mixed-label per-class losses of fc_cb pooled over both passes, one counter update per step; L_bal
and L_con unchanged; GLMC's v before the switch) and MiLeLR instead of the cosine schedule (base
0.01, warm-up 10 epochs, switch at 160). Needs `--config.data_dir=DATA`, a folder holding CIFAR-10
as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 100.0
  config.lt_selection = "ldam"
  config.augment = True
  config.model = "resnet32_w64"
  config.num_epochs = 200
  config.reweight.start_epoch = 160
  config.ldam.drw_epoch = 160
  config.eval_batch_size = 500
  config.head = "linear"
  config.loss = "glmc+inverse_reweight"
  config.glmc.r = 0.0
  config.glmc.weight_exponent = 1.2
  config.glmc.w_con = 1.0
  config.batch_size = 64
  config.learning_rate = 0.01
  config.momentum = 0.9
  config.weight_decay = 5e-3
  config.warmup_epochs = 10
  config.schedule = "milelr"
  config.milelr_switch_epoch = 160
  return config
