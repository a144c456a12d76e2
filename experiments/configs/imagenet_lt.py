"""ImageNet-LT (Liu et al. 2019: the OLTR split lists, 115,846 training images of 1,000 classes, 1,280
to 5 per class; 20,000 validation and 50,000 test images, balanced), ResNet-50 from scratch for 90
epochs: SGD momentum 0.9, batch 256, learning rate 0.1, weight decay 5e-4, 5 warm-up epochs then
cosine; CE to epoch 71, the inverse reweighting from 72 (`--config.loss=inverse_reweight`; the
reference's 160 of 200 epochs at 90). Images are decoded in grain worker processes (shorter side
256, centre crop 224, then crop + flip), sent to the device as uint8. Many / Medium / Few: > 100,
20–100, < 20 training images.

Data: the ILSVRC-2012 images under one root with `ImageNet_LT_train.txt`, `ImageNet_LT_val.txt`,
`ImageNet_LT_test.txt` from the OLTR release beside them (paths in the lists are relative to the
root): `--config.data_dir=<root>`. Training augmentation: Inception's random-resized crop (area
8–100 %, aspect 3/4–4/3) + flip. Deviation: the crop is taken from the decoded 224 centre crop (of
the shorter side resized to 256), not from the full-resolution image.

  python -m experiments.main --config=experiments/configs/imagenet_lt.py \
      --config.data_dir=/data/imagenet --workdir=workdirs/imagenet_lt_ce
"""

import ml_collections

from experiments.configs import imagenet_data


def get_config():
  config = imagenet_data.get_config()
  config.dataset = "imagenet_lt"
  config.model = "resnet50"
  config.head = "linear"
  config.num_epochs = 90
  config.learning_rate = 0.1
  config.weight_decay = 5e-4
  config.warmup_epochs = 5
  # The deferred methods from epoch 72 (the reweighting, LDAM-DRW).
  config.reweight = ml_collections.ConfigDict(dict(start_epoch=72))
  config.ldam = ml_collections.ConfigDict(dict(drw_epoch=72))
  return config
