"""MR2 fine-tuning a pretrained ViT-B/16 on balanced ImageNet: every variable but the head from timm's
`vit_base_patch16_224` weights (`--config.pretrained=<file>.safetensors`), everything trained, a
cosine head (s = 30), MR2 with both terms (λ = 0.1) and p = 3 statistics on the L2-normalised
features (the paper's cosine path; `--config.mr2.form=released` for p = 5); SGD momentum 0.9,
batch 256, lr 0.01, weight decay 1e-4, 10 epochs, cosine after 1 warm-up epoch; bf16 blocks
(`compute_dtype`), f32 parameters, class statistics and losses. ERM: `--config.loss=ce`.

  python -m experiments.main --config=experiments/configs/imagenet_vit_finetune.py \
      --config.data_dir=/data/imagenet --config.pretrained=/weights/vit_b16.safetensors \
      --workdir=workdirs/imagenet_vit_finetune_mr2
"""

import ml_collections

from experiments.configs import imagenet_data


def get_config():
  config = imagenet_data.get_config()
  config.dataset = "list:ImageNet_{split}.txt"
  config.model = "vit_b16"
  config.head = "cosine"
  config.cosine_scale = 30.0
  config.compute_dtype = "bfloat16"
  config.num_epochs = 10
  config.learning_rate = 0.01
  config.weight_decay = 1e-4
  config.warmup_epochs = 1
  config.loss = "mr2"
  config.mr2 = ml_collections.ConfigDict(dict(decay=0.999, lam=0.1, p=3.0))
  return config
