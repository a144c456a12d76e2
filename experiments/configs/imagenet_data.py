"""The 224 px image-file data of the ImageNet-scale recipes, the family's one data block (imagenet_lt,
imagenet_mr2, imagenet_vit_finetune, imagenet_vit_probe and, through imagenet_lt, inat2018 start
from it; each names its `dataset`): every image's shorter side resized to 256 and centre-cropped
to 224, Inception's random-resized crop + flip for training, decoded in 8 grain worker processes;
the split lists are long-tailed (or not) as they are; evaluation in batches of 500, metrics every
100 steps, a checkpoint every 1,000 and the per-class training loss at the end only (a pass over
the whole training set). SGD momentum 0.9, batch 256, cosine after the warm-up.
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.imbalance_factor = 1.0    # the split lists are already long-tailed
  config.image_size = 224
  config.resize = 256
  config.augment = True
  config.augmentation = "inception"
  config.input_pipeline = "grain"
  config.data_workers = 8
  config.batch_size = 256
  config.momentum = 0.9
  config.schedule = "cosine"
  config.eval_batch_size = 500
  config.log_every_steps = 100
  config.checkpoint_every_steps = 1000
  config.class_loss_every_epochs = 0  # a pass over the whole training set: at the end only
  return config
