"""Frozen-feature linear probe: ERM vs MR2 (ℓ_γ,ce only) vs inverse reweighting on a linear head.

MR2 spec, 'Objective' ("for linear probing on frozen features, only ℓ_γ,ce") and 'Evaluation
protocol'; REWEIGHT spec, 'Two levels'. The backbone is EfficientNet-Lite0 pretrained on ImageNet
(`experiments.models.pretrained`); its pooled 1280-d features of CIFAR-10 are extracted once and cached, then
every linear head is trained on the cached features, so many seeds are cheap.

Commands:
  python -m experiments.probe.linear_probe features --data_dir=../shared/data/cifar10_jpeg --resolution=128
  python -m experiments.probe.linear_probe select   # lr / epochs on a validation split carved from train
  python -m experiments.probe.linear_probe study --out=experiments/studies/results/linear_probe
  python -m experiments.probe.linear_probe report --out=experiments/studies/results/linear_probe  # tables again

Features: CIFAR-10 images (32 px) upsampled bilinearly to `resolution`, no augmentation (one view),
not normalised afterwards (neither standardised nor L2-normalised: raw pooled ReLU6 activations, as
the MoCo-v2 probe reads raw pooled features). Cached under `experiments.data.datasets.cache_dir()/linear_probe`.

The head: logits = φ W + b (W ~ N(0, 0.01²), b = 0, as MoCo's linear classifier), trained with the
same recipe for every method: SGD momentum 0.9, cosine decay to 0 over all steps, batch 256 (full
batches, the remainder of each epoch's permutation dropped), no weight decay. Learning rate and
number of epochs are chosen once by `select` (ERM, mean per-class accuracy on a stratified 10 %
validation split of the training set) and fixed in `RECIPE`; numbers are final-epoch test accuracy.

Methods (`METHODS`):
  erm             plain cross-entropy.
  mr2             ℓ_γ,ce with γ from EMA class statistics of the (unnormalised) features:
                  paper form, p = 2, decay 0.9, c̄ = 1 (`mr2_jax.mr2_loss(..., lam=0)`).
  reweight        inverse reweighting, α = 0, uniform prior, macro γ = 1 refreshed once per epoch,
                  clip 10, gradient through the weights (the authors' code), from the first step.
  reweight_sg     the same with `stop_gradient=True` (the weights are constants).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import mr2_jax
import reweight_jax
from experiments.data import datasets as data
from experiments.losses import registry as losses
from experiments.configs import default as default_config
from experiments.report import seed_stats as reporting
from experiments.common import xla_cpu

log = logging.getLogger(__name__)

DATASET = data.CIFAR10_JPEG
NUM_CLASSES = 10
FEATURE_BATCH = 128
# Measured on the 2-core CPU (batch 128, jit): 224 px 40 images/s, 160 px 77, 128 px 117, 96 px 228.
# 128 px extracts the 60,000 images in about 9 minutes, inside the 15-minute budget with margin.
RESOLUTION = 128


# ----------------------------------------------------------------------------------------------
# Features.


def feature_paths(cache: pathlib.Path, resolution: int, split: str) -> tuple[pathlib.Path, ...]:
  stem = cache / f"lite0-r{resolution}-{split}"
  return (stem.with_name(stem.name + "-features.npy"), stem.with_name(stem.name + "-labels.npy"))


def feature_cache() -> pathlib.Path:
  return data.cache_dir() / "linear_probe"


def extract_features(images_uint8: np.ndarray, resolution: int, batch_size: int = FEATURE_BATCH,
                     variables=None, report_every: int = 50) -> tuple[np.ndarray, float]:
  """Pooled Lite0 features float32 [N, 1280] of uint8 images [N, h, w, 3]; returns (features, img/s).

  The last batch is zero-padded to `batch_size` (one compiled shape) and the padding dropped.
  """
  from experiments.models.pretrained import efficientnet_lite
  if variables is None:
    variables = efficientnet_lite.load_lite0_params()
  model = efficientnet_lite.EfficientNetLite0()

  @jax.jit
  def features_of(images):
    return model.apply(variables, efficientnet_lite.preprocess(images, resolution))[1]

  num_images = len(images_uint8)
  out = np.empty((num_images, efficientnet_lite.FEATURE_DIM), np.float32)
  start = time.perf_counter()
  for b, first in enumerate(range(0, num_images, batch_size)):
    batch = images_uint8[first:first + batch_size]
    real = len(batch)
    if real < batch_size:
      batch = np.concatenate([batch, np.zeros((batch_size - real, *batch.shape[1:]), np.uint8)])
    out[first:first + real] = np.asarray(features_of(batch))[:real]
    if report_every and (b + 1) % report_every == 0:
      done = first + real
      print(f"  {done}/{num_images} images, {done / (time.perf_counter() - start):.1f} images/s",
            flush=True)
  return out, num_images / (time.perf_counter() - start)


def features_command(args: argparse.Namespace) -> None:
  cache = pathlib.Path(args.cache_dir) if args.cache_dir else feature_cache()
  cache.mkdir(parents=True, exist_ok=True)
  from experiments.models.pretrained import efficientnet_lite
  variables = efficientnet_lite.load_lite0_params()
  report = {"resolution": args.resolution, "batch_size": args.batch_size,
            "weights": str(efficientnet_lite.lite0_weights_path()), "splits": {}}
  for split in args.splits:
    # "<split>-flip": the horizontally flipped images (a second view, for SupCon's two views).
    base, flipped = split.removesuffix("-flip"), split.endswith("-flip")
    source = data.load_split(DATASET, base, args.data_dir)
    images = source.images[:, :, ::-1] if flipped else source.images
    start = time.perf_counter()
    features, images_per_s = extract_features(np.ascontiguousarray(images), args.resolution,
                                              args.batch_size, variables)
    wall = time.perf_counter() - start
    features_path, labels_path = feature_paths(cache, args.resolution, split)
    np.save(features_path, features)
    np.save(labels_path, source.labels)
    report["splits"][split] = {"images": len(source), "images_per_s": images_per_s,
                               "wall_s": wall, "path": str(features_path)}
    print(f"{split}: {len(source)} images in {wall:.0f} s, {images_per_s:.1f} images/s "
          f"(resolution {args.resolution}) -> {features_path}", flush=True)
  name = "extraction" if list(args.splits) == ["train", "test"] else "extraction-" + "-".join(
      args.splits)
  (cache / f"lite0-r{args.resolution}-{name}.json").write_text(json.dumps(report, indent=1))


def load_features(resolution: int, split: str, cache: pathlib.Path | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
  features_path, labels_path = feature_paths(cache or feature_cache(), resolution, split)
  if not features_path.is_file():
    raise SystemExit(f"no cached features at {features_path}; run `python -m experiments.probe.linear_probe "
                     f"features --data_dir=../shared/data/cifar10_jpeg --resolution={resolution}`")
  return np.load(features_path), np.load(labels_path)



# ----------------------------------------------------------------------------------------------
# Training a linear head.


class Recipe(NamedTuple):
  """The one optimisation recipe of every method (chosen by `select` on ERM's validation accuracy)."""
  learning_rate: float
  epochs: int
  batch_size: int = 256
  momentum: float = 0.9
  weight_decay: float = 0.0
  init_std: float = 0.01


# From `python -m experiments.probe.linear_probe select` (experiments/studies/results/linear_probe/selection.json).
RECIPE = Recipe(learning_rate=0.01, epochs=30)
METHODS = ("erm", "mr2", "reweight", "reweight_sg")
# Setting name → (imbalance factor, methods). Reweighting's stop-gradient ablation only on LT.
SETTINGS = {"balanced": (1.0, ("erm", "mr2", "reweight")),
            "lt100": (100.0, ("erm", "mr2", "reweight", "reweight_sg"))}
# Method → (loss registry entry, config overrides): the trainer's losses, on a linear head.
METHOD_LOSSES = {
    "erm": ("ce", {}),
    "mr2": ("mr2", {"mr2.lam": 0.0, "mr2.c_bar": 1.0, "mr2.decay": 0.9, "mr2.form": "paper"}),
    "reweight": ("inverse_reweight", {"reweight.alpha": 0.0, "reweight.prior": "uniform",
                                      "reweight.gamma": 1.0, "reweight.max_weight": 10.0,
                                      "reweight.macro": True, "reweight.refresh": "epoch",
                                      "reweight.start_epoch": 0}),
}
METHOD_LOSSES["reweight_sg"] = ("inverse_reweight",
                                {**METHOD_LOSSES["reweight"][1], "reweight.stop_gradient": True})


def method_config(method: str):
  """The config (experiments/configs/default.py) whose loss is `method`'s registry entry."""
  if method not in METHOD_LOSSES:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  return loss_config(*METHOD_LOSSES[method])


def loss_config(loss: str, overrides: dict[str, Any] | tuple = ()):
  """The default config with `config.loss = loss` and `overrides` {"tree.field": value} applied,
  validated by the registry."""
  config = default_config.get_config()
  config.loss = loss
  for field, value in dict(overrides).items():
    head, tail = field.split(".")
    config[head][tail] = value
  losses.validate(config)
  return config


def method_key(method: str) -> tuple[str, tuple]:
  """(loss, sorted overrides): the hashable key of a method's loss config."""
  loss, overrides = METHOD_LOSSES[method]
  return loss, tuple(sorted(overrides.items()))


class ProbeState(NamedTuple):
  """Everything a step changes: head parameters, optimiser, and the loss's per-class state."""
  params: dict[str, jax.Array]
  opt_state: Any
  loss_state: dict[str, Any]


def make_optimizer(recipe: Recipe, steps_per_epoch: int) -> optax.GradientTransformation:
  schedule = optax.cosine_decay_schedule(recipe.learning_rate, recipe.epochs * steps_per_epoch)
  return optax.chain(optax.add_decayed_weights(recipe.weight_decay),
                     optax.sgd(schedule, momentum=recipe.momentum))


def init_params(key: jax.Array, feature_dim: int, num_classes: int, init_std: float
                ) -> dict[str, jax.Array]:
  return {"kernel": init_std * jax.random.normal(key, (feature_dim, num_classes)),
          "bias": jnp.zeros((num_classes,))}


def init_state(key: jax.Array, feature_dim: int, num_classes: int,
               optimizer: optax.GradientTransformation, init_std: float,
               method: str | tuple = "erm") -> ProbeState:
  """`method`: a name of METHODS or a `method_key` (loss, overrides)."""
  params = init_params(key, feature_dim, num_classes, init_std)
  config = loss_config(*(method_key(method) if isinstance(method, str) else method))
  return ProbeState(params=params, opt_state=optimizer.init(params),
                    loss_state=losses.init_loss_state(config, num_classes))


def logits_of(params: dict[str, jax.Array], features: jax.Array) -> jax.Array:
  return features @ params["kernel"] + params["bias"]


@functools.lru_cache(maxsize=None)
def make_train_epoch(method: str | tuple, recipe: Recipe, steps_per_epoch: int):
  """jit(state, features [N, d], labels [N], batch_indices [S, B], epoch, rng) → (state, mean
  loss): one epoch, the steps under `lax.scan`; β of the reweighting is refreshed at the first step
  of each epoch; step s draws from fold_in(rng, s) (EQL). `method`: a METHODS name or a
  `method_key`. Cached, so the seeds of one (method, recipe, data size) share one compilation."""
  optimizer = make_optimizer(recipe, steps_per_epoch)
  loss_fn = losses.make_loss_fn(loss_config(*(method_key(method) if isinstance(method, str)
                                              else method)))

  @jax.jit
  def train_epoch(state, features, labels, batch_indices, epoch, rng):
    class_counts = jnp.zeros((state.params["bias"].shape[0],), jnp.float32).at[labels].add(1.0)

    def step(state: ProbeState, inputs):
      step_in_epoch, indices = inputs
      info = losses.StepInfo(epoch=epoch, step_in_epoch=step_in_epoch, class_counts=class_counts,
                             rng=jax.random.fold_in(rng, step_in_epoch))

      def objective(params):
        batch_features = features[indices]
        logits = logits_of(params, batch_features)
        loss, loss_state, _ = loss_fn(logits, batch_features, labels[indices], state.loss_state,
                                      info)
        return loss, loss_state

      (loss, loss_state), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      params = optax.apply_updates(state.params, updates)
      return ProbeState(params, opt_state, loss_state), loss

    state, step_losses = jax.lax.scan(step, state,
                                      (jnp.arange(batch_indices.shape[0]), batch_indices))
    return state, jnp.mean(step_losses)

  return train_epoch


def epoch_batches(num_examples: int, batch_size: int, seed: int, epoch: int,
                  order: np.ndarray | None = None) -> np.ndarray:
  """int32 [steps, batch]: `order` (default `experiments.data.datasets.epoch_permutation`) cut into full
  batches."""
  if order is None:
    order = data.epoch_permutation(num_examples, seed, epoch)
  steps = len(order) // batch_size
  if steps == 0:
    raise ValueError(f"{len(order)} examples do not fill one batch of {batch_size}")
  return np.asarray(order[:steps * batch_size]).reshape(steps, batch_size).astype(np.int32)


@functools.partial(jax.jit, static_argnames="num_classes")
def class_loss_sums(params, features, labels, num_classes: int) -> losses.EpochPass:
  """Per-class Σ CE, correct and counts of a full pass (FairDRO's epoch-end pass)."""
  logits = logits_of(params, features)
  ce = reweight_jax.cross_entropy_loss(logits, labels)
  k = num_classes
  return losses.EpochPass(
      loss_sums=jnp.zeros((k,), jnp.float32).at[labels].add(ce),
      correct=jnp.zeros((k,), jnp.float32).at[labels].add(
          (jnp.argmax(logits, -1) == labels).astype(jnp.float32)),
      counts=jnp.zeros((k,), jnp.float32).at[labels].add(1.0))


@jax.jit
def predict(params: dict[str, jax.Array], features: jax.Array) -> jax.Array:
  return jnp.argmax(logits_of(params, features), axis=-1)


def train_probe(method: str | tuple, train_features: np.ndarray, train_labels: np.ndarray,
                recipe: Recipe, seed: int, num_classes: int = NUM_CLASSES,
                epoch_order=None) -> tuple[ProbeState, list[float]]:
  """Trains one linear head; returns the final state and the per-epoch mean training loss.

  `method`: a METHODS name or a `method_key` (loss, overrides). `epoch_order(epoch)` gives the
  dataset positions of an epoch (default: a permutation of all; JTT's up-sampled list); every epoch
  must have the same length. An entry with an epoch-end hook (FairDRO) gets a pass over the training
  set after every epoch."""
  key = method_key(method) if isinstance(method, str) else method
  order = (epoch_order or (lambda e: data.epoch_permutation(len(train_labels), seed, e)))
  steps = len(order(0)) // recipe.batch_size
  optimizer = make_optimizer(recipe, steps)
  state = init_state(jax.random.key(seed), train_features.shape[1], num_classes, optimizer,
                     recipe.init_std, key)
  train_epoch = make_train_epoch(key, recipe, steps)
  config = loss_config(*key)
  epoch_end = losses.get(config.loss).epoch_end
  features, labels = jnp.asarray(train_features), jnp.asarray(train_labels, jnp.int32)
  epoch_losses = []
  for epoch in range(recipe.epochs):
    state, loss = train_epoch(state, features, labels,
                              epoch_batches(len(train_labels), recipe.batch_size, seed, epoch,
                                            order(epoch)),
                              jnp.asarray(epoch), jax.random.fold_in(jax.random.key(seed), epoch))
    if epoch_end is not None:
      state = state._replace(loss_state=epoch_end(
          config, state.loss_state, class_loss_sums(state.params, features, labels, num_classes),
          epoch, recipe.epochs))
    epoch_losses.append(float(loss))
  return state, epoch_losses


# ----------------------------------------------------------------------------------------------
# Data of a setting, validation split, evaluation.


def setting_train_indices(train_labels: np.ndarray, imbalance_factor: float, seed: int) -> np.ndarray:
  """All training examples (balanced) or the CIFAR-10-LT subset drawn with `seed`."""
  if imbalance_factor == 1.0:
    return np.arange(len(train_labels))
  return data.long_tail_indices(train_labels, NUM_CLASSES, imbalance_factor, seed)


def class_accuracy(params, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
  predictions = predict(params, jnp.asarray(features))
  return mr2_jax.per_class_accuracy(predictions, jnp.asarray(labels, jnp.int32), NUM_CLASSES)


def group_metrics(class_acc: np.ndarray, difficulty: np.ndarray,
                  shot_groups: np.ndarray | None) -> dict[str, float]:
  """Overall (mean per class; the test set is balanced), Easy/Medium/Hard, worst class, class std,
  and Many/Medium/Few shot (NaN for an empty group) — all in percent."""
  easy, medium, hard = mr2_jax.group_accuracy(class_acc, difficulty)
  metrics = {"overall": float(np.mean(class_acc)), "easy": easy, "medium": medium, "hard": hard,
             "worst": mr2_jax.worst_class_accuracy(class_acc),
             "class_std": mr2_jax.class_accuracy_std(class_acc)}
  if shot_groups is not None:
    for name, group in (("many", data.MANY), ("medium_shot", data.MEDIUM), ("few", data.FEW)):
      members = shot_groups == group
      metrics[name] = float(np.mean(class_acc[members])) if members.any() else float("nan")
  return {k: 100.0 * float(v) for k, v in metrics.items()}


def summarise(runs: list[dict], setting: str, methods: Sequence[str] = METHODS,
              long_tailed: bool | None = None) -> dict:
  """Groups from ERM's mean per-class test accuracy; per method mean ± sample std (ddof = 1) over
  seeds (`reporting.mean_std`) and the paired per-seed Δ vs ERM (`reporting.paired_delta`: mean,
  sample std, seeds ahead)."""
  runs = [r for r in runs if r["setting"] == setting]
  methods = [m for m in methods if any(r["method"] == m for r in runs)]
  by_method = {m: {r["seed"]: r for r in runs if r["method"] == m} for m in methods}
  erm_mean = np.mean([r["class_accuracy"] for r in by_method["erm"].values()], axis=0)
  difficulty = mr2_jax.difficulty_tertiles(erm_mean)
  lt = SETTINGS[setting][0] > 1 if long_tailed is None else long_tailed

  def metrics(run: dict) -> dict[str, float]:
    return group_metrics(np.asarray(run["class_accuracy"]), difficulty,
                         np.asarray(run["shot_groups"]) if lt else None)

  erm = {seed: metrics(r) for seed, r in by_method["erm"].items()}
  table = {}
  for method in methods:
    per_seed = {seed: metrics(r) for seed, r in sorted(by_method[method].items())}
    names = list(next(iter(per_seed.values())))
    spread = {n: reporting.mean_std([m[n] for m in per_seed.values()]) for n in names}
    delta = {n: reporting.paired_delta({s: m[n] for s, m in per_seed.items()},
                                       {s: m[n] for s, m in erm.items()}) for n in names}
    class_mean, class_std = reporting.mean_std_arrays(
        [r["class_accuracy"] for _, r in sorted(by_method[method].items())])
    table[method] = {
        "seeds": sorted(per_seed),
        "mean": {n: spread[n][0] for n in names},
        "std": {n: spread[n][1] for n in names},
        "delta_mean": {n: delta[n].mean for n in names},
        "delta_std": {n: delta[n].std for n in names},
        "delta_wins": {n: delta[n].ahead for n in names},
        "delta_seeds": {n: delta[n].paired for n in names},
        "class_accuracy_mean": class_mean.tolist(),
        "class_accuracy_std": class_std.tolist() if len(per_seed) > 1 else None,
    }
  return {"difficulty_groups": difficulty.tolist(), "erm_class_accuracy_mean": erm_mean.tolist(),
          "seed_spread": reporting.STD_NAME, "methods": table}


COLUMNS = (("overall", "Overall"), ("easy", "Easy"), ("medium", "Medium"), ("hard", "Hard"),
           ("worst", "Worst class"), ("class_std", "Class std"))
SHOT_COLUMNS = (("many", "Many"), ("medium_shot", "Medium-shot"), ("few", "Few"))


def _cell(mean: float, std: float) -> str:
  """"mean ± std" (already in percent) with two decimals; "n/a" for an empty group."""
  return reporting.cell(mean, std, fmt=".2f")


def markdown_tables(summary: dict, setting: str, class_names: Sequence[str],
                    long_tailed: bool | None = None) -> str:
  """Two tables: mean ± sample std (ddof = 1) over seeds, and the paired per-seed Δ vs ERM (mean ±
  sample std of Δ, seeds ahead / seeds paired)."""
  lt = SETTINGS[setting][0] > 1 if long_tailed is None else long_tailed
  columns = COLUMNS + (SHOT_COLUMNS if lt else ())
  methods = summary["methods"]
  num_seeds = len(methods["erm"]["seeds"])
  groups = summary["difficulty_groups"]
  group_text = "; ".join(
      f"{name}: " + ", ".join(class_names[k] for k in range(len(groups)) if groups[k] == g)
      for g, name in enumerate(("Easy", "Medium", "Hard")))
  lines = [f"Test accuracy (%), final epoch, {reporting.spread(num_seeds)}. Groups fixed from "
           f"ERM's mean per-class test accuracy ({group_text}).", "",
           "| Method | " + " | ".join(title for _, title in columns) + " |",
           "|---" * (len(columns) + 1) + "|"]
  for method, row in methods.items():
    lines.append(f"| {method} | " + " | ".join(_cell(row["mean"][k], row["std"][k])
                                               for k, _ in columns) + " |")
  lines += ["", f"Paired Δ vs ERM (same seed, same data): {reporting.PAIRED}.",
            "", "| Method | " + " | ".join(title for _, title in columns) + " |",
            "|---" * (len(columns) + 1) + "|"]
  for method, row in methods.items():
    if method == "erm":
      continue
    paired = row.get("delta_seeds", {})
    cells = [reporting.delta_cell((row["delta_mean"][k], row["delta_std"][k], row["delta_wins"][k],
                                   paired.get(k, len(row["seeds"]))), scale=1.0, digits=2)
             for k, _ in columns]
    lines.append(f"| {method} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def plot_sorted_class_accuracy(summary: dict, setting: str, class_names: Sequence[str],
                               path: pathlib.Path, title: str = "Lite0 linear probe") -> None:
  """Per-class test accuracy, classes sorted by ERM's mean accuracy (descending), bars ±1 sample
  std (ddof = 1) over seeds."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  order = np.argsort(-np.asarray(summary["erm_class_accuracy_mean"]), kind="stable")
  fig, ax = plt.subplots(figsize=(8, 4))
  methods = summary["methods"]
  width = 0.8 / len(methods)
  for i, (method, row) in enumerate(methods.items()):
    mean = 100 * np.asarray(row["class_accuracy_mean"])[order]
    std = reporting.error_bars(np.asarray(row["class_accuracy_std"] or [], np.float64))
    std = None if std is None else 100 * std[order]
    ax.bar(np.arange(len(order)) + (i - (len(methods) - 1) / 2) * width, mean, width, yerr=std,
           label=method, capsize=2)
  ax.set_xticks(np.arange(len(order)), [class_names[k] for k in order], rotation=30)
  ax.set_ylabel("test accuracy (%)")
  lowest = min(100 * min(r["class_accuracy_mean"]) for r in methods.values())
  ax.set_ylim(max(0, lowest - 10), 100)
  ax.set_title(f"{title}, {setting}: per-class accuracy, sorted by ERM\n"
               f"(bars: ±1 {reporting.STD_NAME} over seeds)", fontsize=10)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Commands: select and study.


def select_command(args: argparse.Namespace) -> None:
  """ERM on a 10 % stratified validation split of each setting's training set (seed 0), for each
  (learning rate, epochs); the recipe with the best mean over settings of mean per-class validation
  accuracy is the one to put in RECIPE."""
  features, labels = load_features(args.resolution, "train")
  results = []
  for setting, (imbalance_factor, _) in SETTINGS.items():
    subset = setting_train_indices(labels, imbalance_factor, seed=0)
    fit, val = data.stratified_holdout(labels[subset], NUM_CLASSES, 0.1, seed=0)
    fit, val = subset[fit], subset[val]
    for learning_rate in args.learning_rates:
      for epochs in args.epochs_grid:
        recipe = Recipe(learning_rate=learning_rate, epochs=epochs)
        start = time.perf_counter()
        state, losses = train_probe("erm", features[fit], labels[fit], recipe, seed=0)
        val_acc = class_accuracy(state.params, features[val], labels[val])
        results.append({"setting": setting, "learning_rate": learning_rate, "epochs": epochs,
                        "val_mean_class_accuracy": float(np.mean(val_acc)),
                        "val_class_accuracy": val_acc.tolist(), "final_train_loss": losses[-1],
                        "wall_s": time.perf_counter() - start})
        print(f"{setting} lr={learning_rate} epochs={epochs}: val mean-class acc "
              f"{100 * np.mean(val_acc):.2f} %, train loss {losses[-1]:.3f}", flush=True)
  scores = {}
  for r in results:
    scores.setdefault((r["learning_rate"], r["epochs"]), []).append(r["val_mean_class_accuracy"])
  best = max(scores, key=lambda key: (np.mean(scores[key]), -key[1]))
  print(f"best: learning_rate={best[0]} epochs={best[1]} "
        f"(mean over settings {100 * np.mean(scores[best]):.2f} %)")
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "selection.json").write_text(json.dumps(
      {"criterion": "ERM, seed 0, mean per-class accuracy on a stratified 10 % validation split of "
                    "each setting's training set, averaged over settings",
       "best": {"learning_rate": best[0], "epochs": best[1]}, "runs": results}, indent=1))


def study_command(args: argparse.Namespace) -> None:
  recipe = RECIPE._replace(**{k: v for k, v in (("learning_rate", args.learning_rate),
                                                ("epochs", args.epochs)) if v is not None})
  out = pathlib.Path(args.out)
  (out / "runs").mkdir(parents=True, exist_ok=True)
  train_features, train_labels = load_features(args.resolution, "train")
  test_features, test_labels = load_features(args.resolution, "test")
  start_all = time.perf_counter()
  runs = []
  for setting in args.settings:
    imbalance_factor, methods = SETTINGS[setting]
    for seed in args.seeds:
      subset = setting_train_indices(train_labels, imbalance_factor, seed)
      counts = np.bincount(train_labels[subset], minlength=NUM_CLASSES)
      for method in methods:
        start = time.perf_counter()
        state, losses = train_probe(method, train_features[subset], train_labels[subset], recipe,
                                    seed)
        class_acc = class_accuracy(state.params, test_features, test_labels)
        run = {"setting": setting, "imbalance_factor": imbalance_factor, "method": method,
               "seed": seed, "recipe": recipe._asdict(), "resolution": args.resolution,
               "train_class_counts": counts.tolist(),
               "shot_groups": data.many_medium_few(counts).tolist(),
               "class_accuracy": class_acc.tolist(),
               "test_accuracy": float(np.mean(predict(state.params, jnp.asarray(test_features))
                                              == test_labels)),
               "final_train_loss": losses[-1], "wall_s": time.perf_counter() - start}
        if "class_stats" in state.loss_state:
          run["mr2_gamma"] = np.asarray(mr2_jax.class_margins(
              state.loss_state["class_stats"], method_config(method).mr2.c_bar)).tolist()
        if "reweight" in state.loss_state:
          run["reweight_batch_counts"] = np.asarray(
              state.loss_state["reweight"].batch_counts).tolist()
          run["reweight_beta"] = np.asarray(state.loss_state["reweight"].beta).tolist()
        (out / "runs" / f"{setting}-{method}-seed{seed}.json").write_text(json.dumps(run, indent=1))
        runs.append(run)
        print(f"{setting} seed {seed} {method}: test acc {100 * run['test_accuracy']:.2f} %, "
              f"worst class {100 * np.min(class_acc):.1f} %, {run['wall_s']:.1f} s", flush=True)
  wall = time.perf_counter() - start_all
  results = {"recipe": recipe._asdict(), "resolution": args.resolution, "seeds": list(args.seeds),
             "study_wall_s": wall}
  print(write_reports(runs, args.settings, results, out))
  print(f"study wall time {wall:.0f} s")


def write_reports(runs: list[dict], settings: Sequence[str], results: dict,
                  out: pathlib.Path) -> str:
  """results.json (`results` plus a `summarise` per setting), tables.md and per_class_<setting>.png
  in `out`; returns the tables' Markdown."""
  class_names = data.CIFAR10_CLASS_NAMES
  results = {**results, "settings": {}}
  tables = [f"# Lite0 linear probe on CIFAR-10 (features at {results['resolution']} px)\n"]
  for setting in settings:
    summary = summarise(runs, setting)
    results["settings"][setting] = summary
    tables += [f"## {setting}\n", markdown_tables(summary, setting, class_names)]
    plot_sorted_class_accuracy(summary, setting, class_names, out / f"per_class_{setting}.png")
  (out / "results.json").write_text(json.dumps(results, indent=1))
  (out / "tables.md").write_text("\n".join(tables))
  return "\n".join(tables)


def report_command(args: argparse.Namespace) -> None:
  """results.json, tables.md and the plots again from the committed runs/*.json of a study (no
  training, no features): the study's recipe, resolution, seeds and wall time are kept from its
  results.json."""
  out = pathlib.Path(args.out)
  paths = sorted((out / "runs").glob("*.json"))
  if not paths:
    raise SystemExit(f"error: {out / 'runs'}: no run files (python -m experiments.probe.linear_probe "
                     "study writes them)")
  runs = sorted((json.loads(p.read_text()) for p in paths),
                key=lambda r: (list(SETTINGS).index(r["setting"]), r["seed"],
                               METHODS.index(r["method"])))
  previous = out / "results.json"
  results = json.loads(previous.read_text()) if previous.exists() else {}
  results = {k: v for k, v in results.items() if k != "settings"}
  if not results:
    results = {"recipe": runs[0]["recipe"], "resolution": runs[0]["resolution"],
               "seeds": sorted({r["seed"] for r in runs})}
  settings = [s for s in SETTINGS if any(r["setting"] == s for r in runs)]
  text = write_reports(runs, settings, results, out)
  if not args.quiet:
    print(text)


# ----------------------------------------------------------------------------------------------
# Command line.


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m experiments.probe.linear_probe",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--no_xla_cpu_tuning", action="store_true",
                      help="leave XLA_FLAGS as they are (see experiments.common.xla_cpu)")
  commands = parser.add_subparsers(dest="command", required=True)
  features = commands.add_parser("features", help="extract and cache Lite0 features of CIFAR-10")
  features.add_argument("--data_dir", default="../shared/data/cifar10_jpeg")
  features.add_argument("--resolution", type=int, default=RESOLUTION)
  features.add_argument("--batch_size", type=int, default=FEATURE_BATCH)
  features.add_argument("--cache_dir", default=None, help="default: experiments.data.datasets.cache_dir()")
  features.add_argument("--splits", nargs="+", default=["train", "test"],
                        choices=["train", "test", "train-flip", "test-flip"],
                        help="'<split>-flip': the horizontally flipped images")
  select = commands.add_parser("select", help="choose lr / epochs on a validation split (ERM)")
  select.add_argument("--resolution", type=int, default=RESOLUTION)
  select.add_argument("--learning_rates", type=float, nargs="+", default=[0.003, 0.01, 0.03, 0.1, 0.3])
  select.add_argument("--epochs_grid", type=int, nargs="+", default=[10, 30, 100])
  select.add_argument("--out", default="experiments/studies/results/linear_probe")
  study = commands.add_parser("study", help="train all heads on cached features, write results")
  study.add_argument("--out", default="experiments/studies/results/linear_probe")
  study.add_argument("--resolution", type=int, default=RESOLUTION)
  study.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
  study.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
  study.add_argument("--learning_rate", type=float, default=None, help="default: RECIPE")
  study.add_argument("--epochs", type=int, default=None, help="default: RECIPE")
  report = commands.add_parser("report", help="rebuild results.json, tables.md and the plots from "
                                              "<out>/runs/*.json, without training")
  report.add_argument("--out", default="experiments/studies/results/linear_probe")
  report.add_argument("--quiet", action="store_true", help="do not print the tables")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  args = parse_args(sys.argv[1:] if argv is None else argv)
  xla_cpu.configure(not args.no_xla_cpu_tuning)
  {"features": features_command, "select": select_command,
   "study": study_command, "report": report_command}[args.command](args)


if __name__ == "__main__":
  main()
