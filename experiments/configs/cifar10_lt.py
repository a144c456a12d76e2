"""CIFAR-10-LT IF 100, the reweighting paper's released recipe (PIPELINES spec §1): three views per
image in one forward pass — view 0 pad-4 crop + flip + AutoAugment (CIFAR-10 policy) + Cutout 16,
views 1 and 2 the SimCLR transform — with the loss on view 0 only (`views=3`,
`augmentation='released'`; `--config.views=1` is 3× cheaper and a deviation: BatchNorm then
normalises over view 0 alone); ResNet-32 (option A, d = 64) with the normalised linear head (cosine,
s = 30, no bias); SGD momentum 0.9, weight decay 5e-4, batch 256, 200 epochs, base rate 0.3 under
MiLeLR (warm-up 10 epochs, switch at 160, order a from the training counts); CE to epoch 159, the
inverse reweighting from 160 (`--config.loss=inverse_reweight`). Needs `--config.data_dir=DATA`, a
folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout). It is
`cifar10_lt_cosine.py` (the network, optimiser and deferred starts) with the released views,
augmentation and schedule.

The long-tailed subset is the LDAM seed-0 selection (`lt_selection='ldam'`). Deviations: MiLeLR is
laid on this trainer's epochs of ⌊N/B⌋ updates (the reference keeps the last partial batch: ⌈N/B⌉);
the normalisation std is the true CIFAR-10 one (0.247, 0.243, 0.261), not the release's (0.2023,
0.1994, 0.2010).
"""

from experiments.configs import cifar10_lt_cosine


def get_config():
  config = cifar10_lt_cosine.get_config()
  config.views = 3
  config.augmentation = "released"
  config.schedule = "milelr"
  config.milelr_switch_epoch = 160
  return config
