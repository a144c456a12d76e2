"""Study 1 pilot: CIFAR-10-LT, imbalance factor 100, at a tenth of the size for a 2-core CPU.

n_max = 500 instead of 5000 (class counts 500, 299, 179, 107, 64, 38, 23, 13, 8, 5: 1,236 images),
small CNN with the reference's cosine head (s = 30), 40 epochs, reweighting and DRW deferred to
epoch 32 (the reference's 160 of 200). Same recipe for every method; pass `--config.data_dir=DATA`,
a folder holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
LDAM on this head: the margin is on the cosine scale, so with logits already ×30 use `ldam.scale=1`
and `ldam.max_margin=15` (= 0.5 × 30).
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "cifar10_jpeg"
  config.imbalance_factor = 100.0
  config.max_train_per_class = 500
  config.augment = True
  config.model = "small_cnn"
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.num_epochs = 40
  config.batch_size = 64
  config.learning_rate = 0.05
  config.warmup_epochs = 2
  config.weight_decay = 5e-4
  config.reweight.start_epoch = 32
  config.ldam.drw_epoch = 32
  config.ib.start_epoch = 20
  config.log_every_steps = 20
  config.checkpoint_every_steps = 200
  config.eval_batch_size = 500
  config.class_loss_every_epochs = 1  # per-class training-set loss L_c and ρ over training
  return config
