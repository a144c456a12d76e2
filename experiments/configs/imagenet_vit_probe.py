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

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.dataset = "list:ImageNet_{split}.txt"
  config.imbalance_factor = 1.0    # the split lists are already long-tailed
  config.model = "vit_b16"
  config.head = "cosine"
  config.image_size = 224
  config.resize = 256
  config.augment = False
  config.augmentation = "inception"
  config.input_pipeline = "grain"
  config.data_workers = 8
  config.num_epochs = 10
  config.batch_size = 256
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 0.0
  config.warmup_epochs = 1
  config.schedule = "cosine"
  config.reweight.start_epoch = 8
  config.ldam.drw_epoch = 8
  config.eval_batch_size = 500
  config.log_every_steps = 100
  config.checkpoint_every_steps = 1000
  config.class_loss_every_epochs = 0  # a pass over 115,846 images: at the end only
  config.loss = "mr2"
  config.mr2.decay = 0.999
  config.cosine_scale = 30.0
  config.mr2.lam = 0.0
  config.mr2.p = 3.0
  return config
