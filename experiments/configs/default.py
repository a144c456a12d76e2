"""The config schema, the one module every shipped config starts from: every field the trainer reads
with its default (`get_config`: values of the REWEIGHT reference recipe where it has one; the
reweighting start epoch is 0 here and deferred in the dataset configs), the ranges and choices of
those fields (`RANGES`, `CHOICES`), every method's sub-tree (its defaults, ranges and choices
registered by the method's module, `experiments.methods`, through the loss registry), and the one
check of a config (`validate`).

Each shipped config (digits_lt.py, cifar10_lt.py, ...) is `get_config()` here with the fields it
sets, and nothing else: one level of reuse, as big_vision's configs over their common module.
CLI overrides: `--config=experiments/configs/cifar10_lt.py --config.loss=mr2 --config.imbalance_factor=100`.
"""

import json
import pathlib
from collections.abc import Sequence

import jax
import ml_collections

from experiments.methods import registry
from experiments import models
from experiments.common.errors import INF
from experiments.common.errors import ConfigError
from experiments.common.errors import Range
from experiments.common.errors import field_value
from experiments.data import augmentations
from experiments.data import input_pipeline
from experiments.data import long_tail
from experiments.data import sources


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

  # Loss: a method of the loss registry (`experiments.methods.registry`); each reads its own sub-tree
  # (mr2, reweight, focal, class_balanced, ldam, logit_adjust, ib, ...: defaults, ranges and start
  # epochs declared by the method's module in experiments/methods/, all added here). Deferred
  # losses train as their `before` entry until their start epoch (reweight.start_epoch,
  # ldam.drw_epoch, ib.start_epoch). `<method>+inverse_reweight`: the inverse reweighting of any
  # method with a per-example loss.
  config.loss = "ce"
  for key, tree in registry.CONFIG_TREES.items():
    config[key] = ml_collections.ConfigDict(tree.defaults())

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


# ------------------------------------------------------------------------------------------------
# Ranges, choices and the check of a config
# ------------------------------------------------------------------------------------------------

PARALLEL = ("none", "jit", "pmap", "shard_map")
SCHEDULES = ("cosine", "step", "milelr")

RANGES = (
    ("num_epochs", (1, True), (INF, False)), ("batch_size", (1, True), (INF, False)),
    ("eval_batch_size", (1, True), (INF, False)), ("log_every_steps", (1, True), (INF, False)),
    ("checkpoint_every_steps", (1, True), (INF, False)),
    ("class_loss_every_epochs", (0, True), (INF, False)),
    ("test_every_epochs", (0, True), (INF, False)),
    ("keep_checkpoints", (1, True), (INF, False)), ("warmup_epochs", (0, True), (INF, False)),
    ("learning_rate", (0, False), (INF, False)), ("momentum", (0, True), (1, False)),
    ("weight_decay", (0, True), (INF, False)), ("cosine_scale", (0, False), (INF, False)),
    ("validation_fraction", (0, True), (1, False)), ("max_train_per_class", (0, True), (INF, False)),
    ("imbalance_factor", (1, True), (INF, False)), ("views", (1, True), (INF, False)),
    ("mixup_alpha", (0, True), (INF, False)), ("milelr_switch_epoch", (0, True), (INF, False)),
    ("data_workers", (0, True), (INF, False)), ("image_size", (1, True), (INF, False)),
    ("resize", (1, True), (INF, False)),
)
CHOICES = (("parallel", PARALLEL), ("schedule", SCHEDULES), ("head", models.HEADS),
           ("compute_dtype", models.COMPUTE_DTYPES),
           ("augmentation", augmentations.AUGMENTATIONS),
           ("lt_selection", long_tail.LT_SELECTIONS), ("input_pipeline", input_pipeline.PIPELINES))


def validate(config) -> None:
  """Raises ConfigError (one line, naming the field) before anything is written: the trainer's
  fields, every method's sub-tree (a config records them all, so a bad value is refused even where
  this loss does not read it), the method's own checks and its recipe's."""
  registry.get(config.loss)  # an unknown loss is named first
  for field, choices in CHOICES:
    check_choice(config, field, choices)
  if config.model not in models.MODELS:
    raise ConfigError(f"config.model: unknown model {config.model!r}; expected one of "
                      f"{sorted(models.MODELS)}")
  check_ranges(config, RANGES)
  validate_method(config)
  if config.warmup_epochs > config.num_epochs:
    raise ConfigError(f"config.warmup_epochs: {config.warmup_epochs} exceeds config.num_epochs "
                      f"{config.num_epochs}")
  if config.pretrained and config.frozen_encoder_from:
    raise ConfigError("config.pretrained and config.frozen_encoder_from both set: fine-tune from "
                      "the weights (pretrained) or probe them (frozen_encoder_from), not both")
  check_input_on_device(config)
  if config.reference_summary:
    path = pathlib.Path(config.reference_summary)
    if not path.is_file() or "per_class_accuracy" not in json.loads(path.read_text()):
      raise ConfigError(f"config.reference_summary: {path} is not a summary.json of a finished run")
  check_devices(config)


def validate_method(config) -> None:
  """The method's part of `validate`: every sub-tree's ranges and choices, the checks of the
  method (and of the one it trains as before its start), and mixup batches only for a method that
  takes them, single-view."""
  for key, tree in registry.CONFIG_TREES.items():
    check_ranges(config, [(f"{key}.{field}", low, high) for field, low, high in tree.ranges])
    for field, choices in tree.choices:
      check_choice(config, f"{key}.{field}", choices)
  for entry in registry.phases(config.loss):
    if entry.check is not None:
      entry.check(config)
  if config.get("mixup_alpha", 0) > 0 and not registry.takes_mixup(config.loss):
    raise ConfigError(f"config.mixup_alpha: the {config.loss!r} loss does not take mixup batches "
                      f"(entries that do: "
                      f"{[n for n in registry.REGISTRY if registry.takes_mixup(n)]})")
  if (config.get("mixup_alpha", 0) > 0
      and max(config.get("views", 1), registry.get(config.loss).recipe.views) > 1):
    raise ConfigError("config.mixup_alpha: mixup batches are single-view (config.views = 1 and a "
                      "loss with one view)")


def check_input_on_device(config) -> None:
  """`input_on_device` (crops cut on the device, `experiments.train.device_input`) takes what it
  reproduces bit for bit: 'crop_flip' or no augmentation, an in-memory split, the 'numpy'
  pipeline (grain's worker processes are for decoding, and the device decodes nothing)."""
  if not config.input_on_device:
    return
  if config.augment and config.augmentation != "crop_flip":
    raise ConfigError(f"config.input_on_device: cuts 'crop_flip' crops only, got "
                      f"augmentation={config.augmentation!r}")
  if config.input_pipeline != "numpy":
    raise ConfigError(f"config.input_on_device: draws the crops in the 'numpy' pipeline, got "
                      f"input_pipeline={config.input_pipeline!r}")
  if sources.is_lazy_source(config.dataset):
    raise ConfigError(f"config.input_on_device: copies the training split to the device, but "
                      f"{config.dataset!r} decodes its images on index (use an in-memory source: "
                      f"digits, mnist, cifar10_jpeg)")


def check_devices(config) -> None:
  """Batch sizes divisible by the devices of `config.parallel`; 'pmap' within one process."""
  devices = {"none": 1, "jit": jax.device_count(), "pmap": jax.device_count(),
             "shard_map": jax.device_count()}
  for field in ("batch_size", "eval_batch_size"):
    if config[field] % devices[config.parallel]:
      raise ConfigError(f"config.{field}: {config[field]} is not divisible by the "
                        f"{devices[config.parallel]} devices of config.parallel={config.parallel!r}")
  if config.parallel == "pmap" and jax.process_count() > 1:
    raise ConfigError("config.parallel: use 'shard_map' for multi-process runs ('pmap' spans "
                      "the devices of one process here)")


def check_ranges(config, ranges: Sequence[Range]) -> None:
  """Raises ConfigError naming the first field outside its interval (None values are skipped)."""
  for field, low, high in ranges:
    value = field_value(config, field)
    if value is None:
      continue
    if not (low[0] <= value if low[1] else low[0] < value) or not (
        value <= high[0] if high[1] else value < high[0]):
      interval = f"{'[' if low[1] else '('}{low[0]}, {high[0]}{']' if high[1] else ')'}"
      raise ConfigError(f"config.{field}: expected a value in {interval}, got {value}")


def check_choice(config, field: str, choices: Sequence[str]) -> None:
  """Raises ConfigError when a string field is not one of `choices`."""
  value = field_value(config, field)
  if value not in choices:
    raise ConfigError(f"config.{field}: expected one of {tuple(choices)}, got {value!r}")
