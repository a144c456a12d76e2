"""Study 7: the reweighting inside its reference pipelines, on CIFAR-10-LT IF 100 at a tenth of the
size for a 2-core CPU (n_max = 500: 1,236 images, the LDAM seed-0 selection), ResNet-32 for every
method (GLMC too: its width-64 network costs 16× here, a stated deviation), one short schedule for
all: SGD momentum 0.9, lr 0.05, weight decay 5e-4, batch 64, 2 warm-up epochs, cosine over 30
epochs, the reweighting from epoch 24 (the reference's 160 of 200). The pipelines differ only in
what defines them (`tools/run_studies.sh`, study 7): the released recipe's three views with
AutoAugment / Cutout / SimCLR views, ETF-DR's fixed ETF head, DR loss and mixup, GLMC's paired
batches and heads. Pass `--config.data_dir=DATA`, a folder holding CIFAR-10 as JPEG files in
`train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

import ml_collections

from experiments.configs import cifar10_lt_data


def get_config():
  config = cifar10_lt_data.get_config()
  config.max_train_per_class = 500
  config.head = "linear"
  config.num_epochs = 30
  config.batch_size = 64
  config.learning_rate = 0.05
  config.momentum = 0.9
  config.weight_decay = 5e-4
  config.warmup_epochs = 2
  config.schedule = "cosine"
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=24))
  config.log_every_steps = 20
  config.checkpoint_every_steps = 200
  config.class_loss_every_epochs = 3
  return config
