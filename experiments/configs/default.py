"""The shared fields of every config, with their defaults and documentation (`get_config`: values
of the REWEIGHT reference recipe where it has one): what every shipped config starts from. It
imports `ml_collections` alone, so a config file is read without the harness: the methods'
sub-trees (their defaults, ranges and choices) are declared by each method's module and added to
a run's config by the one check, `experiments.configs.schema` (`complete`, `validate`), with the
shared fields' ranges and choices.

Each shipped config (digits_lt.py, cifar10_lt.py, ...) is `get_config()` here with the fields it
sets, and the fields of the sub-trees of the methods its runs train: one level of reuse, as
big_vision's configs over their common module (a recipe family's data block is a function of its
own, `cifar10_lt_data.py`). CLI overrides: `--config=experiments/configs/cifar10_lt.py
--config.loss=mr2 --config.mr2.lam=0`.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # Data. dataset: 'digits' (embedded), 'mnist', 'cifar10_jpeg' (data_dir) or 'tfds:<name>'.
  config.dataset = "digits"
  config.data_dir = ml_collections.config_dict.placeholder(str)
  config.imbalance_factor = 1.0     # n_i = n_max · IF^(−i/(K−1)); 1 keeps the set balanced.
  # Which examples a long-tailed subset keeps: 'seeded' (per `seed`), 'ldam' (the standard seed-0
  # CIFAR-LT selection of Cao et al.), 'glmc' / 'glmc_paper' (GLMC's, without / with replacement).
  config.lt_selection = "seeded"
  config.max_train_per_class = 0    # n_max of the subset (0: the largest class's count).
  config.validation_fraction = 0.0  # stratified hold-out from the training set (model selection).
  config.augment = False            # Augment the training images at all; how: `augmentation`.
  # 'crop_flip' (CIFAR pad-4 random crop + horizontal flip), 'released' (the reweighting paper's
  # recipe: view 0 crop + flip + AutoAugment + Cutout, further views SimCLR), 'simclr' or
  # 'inception' (random-resized crop, area 8–100 %, + flip; the 224 px configs): data.AUGMENTATION_FNS.
  config.augmentation = "crop_flip"
  # Views per example in the forward pass (at least the loss's own: SupCon 2). Views past the
  # loss's own enter BatchNorm statistics only (the released recipe: 3, the loss on view 0; 1 is
  # 3× cheaper and a deviation: BatchNorm then normalises over view 0 alone).
  config.views = 1
  # > 0: mixup batches (one λ ~ Beta(α, α) and one permutation of the global batch per step), for
  # losses that take them (ce, etf_dr; ETF-DR's recipe: 1.0).
  config.mixup_alpha = 0.0
  # The training input (`experiments.data.input_pipeline`): 'numpy' (a host thread, or `data_workers`
  # threads; float32 normalised on the host; fastest for in-memory data) or 'grain' (grain over
  # the run's steps, decode and augmentation in `data_workers` worker processes, uint8 to the
  # device, normalised there; its iterator state is checkpointed with the train state). Both give
  # the same batches, whatever data_workers is.
  config.input_pipeline = "numpy"
  config.data_workers = 0  # 'numpy': threads; 'grain': worker processes (0: one host thread /
                           # this process)
  # True: the training split is copied to the device once, and each step's crop + flip is cut
  # there from the offsets the host draws (`experiments.train.device_input`): the same images
  # bit for bit, the host freed of pixel work (accelerators). 'crop_flip' or no augmentation,
  # in-memory data sets, the 'numpy' pipeline.
  config.input_on_device = False
  # Image-file sources (imagenet_lt, places_lt, inat2018, list:...): each image's shorter side
  # resized to `resize`, then centre-cropped to image_size² (torchvision's Resize + CenterCrop).
  config.image_size = 224
  config.resize = 256

  # Model: 'small_cnn', 'resnet32', 'wrn28_10'; head 'linear' or 'cosine'.
  config.model = "small_cnn"
  config.head = "linear"
  config.cosine_scale = 30.0
  # Compute dtype of the body, 'float32' or 'bfloat16' (parameters, features, head, losses: f32).
  config.compute_dtype = "float32"

  # Loss: a method of the loss registry (`experiments.methods.registry`). Each method reads its own
  # sub-tree (mr2, reweight, focal, class_balanced, ldam, logit_adjust, ib, ...), whose defaults,
  # ranges and start epochs its module in experiments/methods/ declares: a config sets the fields
  # it changes (`config.mr2 = ml_collections.ConfigDict(dict(lam=0.0))`), and the run's config
  # (`schema.complete`) holds the sub-trees of the methods it trains, the rest at their defaults.
  # Deferred losses train as their `before` entry until their start epoch (reweight.start_epoch,
  # ldam.drw_epoch, ib.start_epoch). `<method>+inverse_reweight`: the inverse reweighting of any
  # method with a per-example loss.
  config.loss = "ce"

  # Optimisation: SGD + momentum + weight decay, linear warm-up then cosine or step decay.
  config.num_epochs = 200
  config.batch_size = 128           # global batch size (all devices).
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 5e-4
  config.warmup_epochs = 5
  # 'cosine', 'step' or 'milelr' (the reweighting recipe's Mittag-Leffler schedule; its order a from
  # the training class counts, its switch at `milelr_switch_epoch`, 0 for none).
  config.schedule = "cosine"
  config.milelr_switch_epoch = 160
  config.step_epochs = (160, 180)   # 'step': lr × 0.01 after the first, × 0.0001 after the second.
  config.step_factor = 0.01

  # Parallelism: 'none' (jit on one device), 'jit' (jit over a batch sharded on every device of
  # every process; automatic partitioning, multi-host), 'pmap' (the devices of this process) or
  # 'shard_map' (jit + shard_map over every device of every process; multi-host).
  # See docs/guides/distributed.md.
  config.parallel = "none"

  # Bookkeeping.
  config.seed = 0
  config.log_every_steps = 50
  config.checkpoint_every_steps = 500
  config.keep_checkpoints = 2
  config.eval_batch_size = 256
  config.progress_bar = True
  config.nc_metrics = True          # NC1–NC4 and ρ on the training set at the end.
  # > 0: every this many epochs, the per-class cross-entropy L_c on the whole training set (no
  # augmentation) and ρ = std_c L_c / mean_c L_c, in class_history.jsonl / metrics.jsonl; with
  # nc_metrics also NC1–NC4 of that pass (metrics.jsonl: train_nc1 … train_nc4).
  config.class_loss_every_epochs = 0
  # > 0: every this many epochs, the test accuracy (overall, metrics.jsonl 'test_accuracy'; per
  # class, class_history.jsonl 'test_class_accuracy'), to report the best epoch beside the final one
  # as the LDAM-DRW release reports its `best_acc1`. Logged only: nothing is selected by it.
  config.test_every_epochs = 0
  config.reference_summary = ml_collections.config_dict.placeholder(str)  # ERM summary.json.
  # '<workdir>:<epoch>': start from another run's checkpoint at the end of `epoch` — a deferred loss
  # (reweighting, DRW, IB) from the run of its `before` loss, which it equals until its start. Every
  # run keeps its checkpoints at the deferred start epochs of its config for this.
  config.init_from = ml_collections.config_dict.placeholder(str)
  # A run's workdir: load every parameter but the head (and the BatchNorm statistics) from its
  # latest checkpoint, run that encoder in inference mode and train the head only — the linear
  # stage of a two-stage method (SupCon pre-training with supcon.ce=False, then loss='ce'). Or a
  # PyTorch weight file (.safetensors / .pth / .pt / .bin) of config.model (resnet50: torchvision,
  # vit_b16: timm): a linear probe of a pretrained network (`experiments.models.pretrained.weights`).
  config.frozen_encoder_from = ml_collections.config_dict.placeholder(str)
  # A PyTorch weight file of config.model: every variable but the head starts from it, and
  # everything trains (fine-tuning). The head starts from the model's own initialisation.
  config.pretrained = ml_collections.config_dict.placeholder(str)
  return config
