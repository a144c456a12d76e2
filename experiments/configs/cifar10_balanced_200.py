"""Balanced CIFAR-10, 1,000 images per class, at 200 epochs: the `cifar10_balanced` recipe
(ResNet-32, linear head, SGD 0.1, momentum 0.9, weight decay 5e-4, batch 128, crop + flip, 2 warm-up
epochs) with the cosine decay laid over 200 epochs, and every 20 epochs the per-class training loss,
ρ and NC1–NC4 (metrics.jsonl, class_history.jsonl; MR2's γ_k every 50 steps). Methods: ERM, MR2's
released form (`mr2.form=released`), the paper form. Needs `--config.data_dir=DATA`, a folder
holding CIFAR-10 as JPEG files in `train.npz` / `test.npz` (the `cifar10_jpeg` layout).
"""

from experiments.configs import cifar10_balanced


def get_config():
  config = cifar10_balanced.get_config()
  config.num_epochs = 200
  config.class_loss_every_epochs = 20
  return config
