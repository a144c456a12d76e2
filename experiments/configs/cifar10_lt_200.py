"""CIFAR-10-LT IF 100 at the LDAM-DRW release's 200-epoch recipe (Cao et al., NeurIPS 2019, the
schedule behind the standard published CIFAR-10-LT tables): the short recipe (`cifar10_lt_short.py`:
ResNet-32 with a linear head, SGD 0.1, momentum 0.9, weight decay 2e-4, batch 128, pad-4 crop +
flip, one view) on the LDAM seed-0 selection (12,406 images) for 200 epochs, with 5 linear warm-up
epochs and the rate ×0.01 from epoch 160 and ×0.0001 from 180; deferred methods (the reweighting,
DRW) from epoch 160, started from CE's epoch-160 checkpoint by `experiments.compare`. LDAM-DRW keeps
its released normalised head (`head=cosine`, scale 30, `ldam.scale=1`, `ldam.max_margin=15`:
tools/standard_size.sh). Every 20 epochs the per-class training loss L_c, ρ and NC1–NC4 are logged
(metrics.jsonl, class_history.jsonl; MR2's γ_k every 50 steps), for the terminal-phase claims. The
rate steps match the release's: its `adjust_learning_rate` counts epochs from 1 (`epoch + 1`) and
lowers the rate once that count passes 160 / 180, i.e. from its 161st / 181st epoch, as here. Needs
`--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the
`cifar10_jpeg` layout).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.head = "linear"
  config.num_epochs = 200
  config.batch_size = 128
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 2e-4
  config.warmup_epochs = 5
  config.schedule = "step"
  config.step_epochs = (160, 180)
  config.step_factor = 0.01  # ×0.01 at epoch 160, ×0.0001 at 180
  # The deferred methods from epoch 160 (the reweighting, LDAM-DRW, IB).
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=160))
  config.ldam = ml_collections.ConfigDict(dict(drw_epoch=160))
  config.ib = ml_collections.ConfigDict(dict(start_epoch=160))
  config.class_loss_every_epochs = 20
  config.checkpoint_every_steps = 500
  # The test set after every epoch, as the release evaluates it: the report's "best epoch (as the
  # LDAM-DRW release reports it)" column beside the final epoch (selects nothing). A reporting field:
  # runs started without it resume.
  config.test_every_epochs = 1
  return config
