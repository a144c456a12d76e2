"""iNaturalist 2018 (437,513 training images of 8,142 species, 1,000 to 2 per class; the 24,426
validation images, 3 per class, serve as the test set as is customary), ResNet-50 from scratch for
90 epochs with `imagenet_lt.py`'s recipe (batch 256, lr 0.1, weight decay 5e-4, cosine; the inverse
reweighting from epoch 72), the features reduced exactly over devices at K = 8,142.

Data: the iNaturalist 2018 images with `train2018.json` and `val2018.json` in one root (paths in the
JSON files are relative to it): `--config.data_dir=<root>`.

  python -m experiments.main --config=experiments/configs/inat2018.py \
      --config.data_dir=/data/inat2018 --workdir=workdirs/inat2018_ce
"""

from experiments.configs import imagenet_lt


def get_config():
  config = imagenet_lt.get_config()  # the recipe, on iNaturalist 2018
  config.dataset = "inat2018"
  return config
