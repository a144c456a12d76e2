"""Balanced ImageNet (ILSVRC-2012, 1,281,167 training images of 1,000 classes; the 50,000 validation
images as the test set), ResNet-50 from scratch for 90 epochs with MR2 (its spec's ImageNet row:
71.7 → 74.2 overall, Hard 52.6 → 55.9): SGD momentum 0.9, batch 256, lr 0.1, weight decay 1e-4,
5 warm-up epochs then cosine; MR2's statistics decay 0.999 (the spec's ImageNet setting). ERM is the
same config with `--config.loss=ce`; Easy / Medium / Hard come from the ERM run.

Data: the images under one root and two lists in OLTR's format beside them, `ImageNet_train.txt`
and `ImageNet_test.txt` (`<relative path> <label>` per line; e.g. written from the class folders
with the labels in sorted wnid order): `--config.data_dir=<root>`.

  python -m experiments.main --config=experiments/configs/imagenet_mr2.py \
      --config.data_dir=/data/imagenet --workdir=workdirs/imagenet_mr2
"""

import ml_collections

from experiments.configs import imagenet_data


def get_config():
  config = imagenet_data.get_config()
  config.dataset = "list:ImageNet_{split}.txt"
  config.model = "resnet50"
  config.head = "linear"
  config.num_epochs = 90
  config.learning_rate = 0.1
  config.weight_decay = 1e-4
  config.warmup_epochs = 5
  config.loss = "mr2"
  config.mr2 = ml_collections.ConfigDict(dict(decay=0.999))
  return config
