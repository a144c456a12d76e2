"""MR2 as a linear probe of a pretrained ViT-B/16 on balanced ImageNet (the MR2 spec: "for linear
probing on frozen features, only ℓ_γ,ce", `mr2.lam=0`): the encoder from timm's
`vit_base_patch16_224` weights (`--config.frozen_encoder_from=<file>.safetensors`, read without
executing code; frozen, inference mode), a cosine head (s = 30) trained alone. On L2-normalised
features A_k + V_k is the same for every class at p = 2, so MR2's statistics use p = 3 (the paper's;
`--config.mr2.form=released` is the release's p = 5). SGD momentum 0.9, batch 256, lr 0.1, no weight
decay, 10 epochs, cosine after 1 warm-up epoch. ERM: `--config.loss=ce`.

Data: `imagenet_mr2.py`'s (`ImageNet_{train,test}.txt` in the image root). Weights: e.g.
`model.safetensors` of timm's `vit_base_patch16_224.augreg2_in21k_ft_in1k` (its 1000-way head is
left out).

  python -m experiments.main --config=experiments/configs/imagenet_vit_probe.py \
      --config.data_dir=/data/imagenet --config.frozen_encoder_from=/weights/vit_b16.safetensors \
      --workdir=workdirs/imagenet_vit_probe_mr2
"""

import ml_collections

from experiments.configs import imagenet_data


def get_config():
  config = imagenet_data.get_config()
  config.dataset = "list:ImageNet_{split}.txt"
  config.augment = False  # the frozen encoder's features of the centre crop
  config.model = "vit_b16"
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.num_epochs = 10
  config.learning_rate = 0.1
  config.weight_decay = 0.0
  config.warmup_epochs = 1
  config.loss = "mr2"
  config.mr2 = ml_collections.ConfigDict(dict(decay=0.999, lam=0.0, p=3.0))
  return config
