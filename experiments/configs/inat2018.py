"""iNaturalist 2018 (437,513 training images of 8,142 species, 1,000 to 2 per class; the 24,426
validation images, 3 per class, serve as the test set as is customary), ResNet-50 from scratch for
90 epochs with `imagenet_lt.py`'s recipe (batch 256, lr 0.1, weight decay 5e-4, cosine; the inverse
reweighting from epoch 72), the features reduced exactly over devices at K = 8,142.

Data: the iNaturalist 2018 images with `train2018.json` and `val2018.json` in one root (paths in the
JSON files are relative to it): `--config.data_dir=<root>`.

  python -m experiments.main --config=experiments/configs/inat2018.py \
      --config.data_dir=/data/inat2018 --workdir=workdirs/inat2018_ce
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "inat2018"
  config.imbalance_factor = 1.0    # the split lists are already long-tailed
  config.model = "resnet50"
  config.head = "linear"
  config.image_size = 224
  config.resize = 256
  config.augment = True
  config.augmentation = "inception"
  config.input_pipeline = "grain"
  config.data_workers = 8
  config.num_epochs = 90
  config.batch_size = 256
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 5e-4
  config.warmup_epochs = 5
  config.schedule = "cosine"
  config.reweight.start_epoch = 72
  config.ldam.drw_epoch = 72
  config.eval_batch_size = 500
  config.log_every_steps = 100
  config.checkpoint_every_steps = 1000
  config.class_loss_every_epochs = 0  # a pass over 115,846 images: at the end only
  return config
