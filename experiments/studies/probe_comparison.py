"""MR2's comparison methods on the frozen-feature probe (COMPARISONS spec; MR2 spec, 'Evaluation').

ERM, MR2 (ℓ_γ,ce: on frozen features ℓ_s̄ has no parameter to act on), focal, LDAM, class-level
Group DRO, FairDRO, EQL, JTT and LfF, each on a linear head over the cached EfficientNet-Lite0
features of balanced CIFAR-10 (`experiments.probe.linear_probe`: same features, head, optimiser and
recipe — lr 0.01, 30 epochs, batch 256, SGD momentum 0.9, cosine). SupCon's loss acts on the
encoder, which a linear probe does not train (with the encoder frozen, SupCon's joint form gives the
linear classifier exactly ERM's gradient and its two-stage form trains the classifier by ERM), so it
runs in a second setting, 'adapter': a trainable MLP adapter (1280 → 256, ReLU) under the linear
classifier, two views per image (the image and its horizontal flip, both through the frozen
backbone: `linear_probe features --splits train-flip`), cross-entropy on both views, and the
joint objective CE + λ·SupCon on the adapter's features through SupCon's projection head
(`mr2_jax.SupConProjection`, τ = 0.1, τ_b = 0.07); its paired reference is ERM on the same
adapter and views (`erm_adapter`, λ = 0).

    python -m experiments.studies.probe_comparison tune  --out=experiments/studies/results/probe_comparison
    python -m experiments.studies.probe_comparison study --out=experiments/studies/results/probe_comparison
    python -m experiments.studies.probe_comparison report --out=experiments/studies/results/probe_comparison

`tune` trains every candidate of each method's grid (`METHODS`) on a stratified 90 % of the training
set with seeds 0 and 1 and scores it on the held-out 10 % (never on test): the highest mean
worst-class validation accuracy wins (ties: mean per-class validation accuracy); `selection.json`
records every candidate's scores and the choice. `study` trains each method with its chosen
hyper-parameters on the full training set for every seed and writes `runs/<method>-seed<s>.json`
(per-class test accuracy, the hyper-parameters, method-specific state), `results.json`,
`tables.md` (mean ± sample std over seeds; paired Δ vs ERM with seeds ahead; Easy / Medium / Hard
fixed from ERM's mean per-class test accuracy), `per_class.png` and `tradeoff.png` (Hard-class Δ
against Easy-class Δ per method). `report` rebuilds the last four from `runs/` without training.

Methods outside the loss registry, by what they change:
  jtt  stage 1: ERM for `stage1_epochs` (the recipe's schedule over those epochs); error set E from
       an eval pass over the training set (`reweight_jax.jtt_error_set`); stage 2: a fresh head
       trained by ERM for the recipe's epochs on the up-sampled set (each example of E 1 + λ_up
       times, `reweight_jax.jtt_upsampled_indices`, a new order per epoch): the epoch grows.
  lff  a biased and a debiased head trained together on the same batches with one optimiser
       (`reweight_jax.lff_loss`: GCE on the biased head, the relative-difficulty weight W on the
       debiased head's CE, per-example EMAs indexed by dataset position); the debiased head is
       evaluated.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

import mr2_jax
import reweight_jax
from experiments.data import datasets as data
from experiments.probe import linear_probe as lp
from experiments.report import seed_stats as reporting
from experiments.common import xla_cpu

SETTING = "balanced"
NUM_CLASSES = lp.NUM_CLASSES
TUNE_SEEDS = (0, 1)
VALIDATION_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class Method:
  """kind: 'loss' (a loss-registry entry on the head), 'jtt' or 'lff'; `fixed` and each
  candidate of `grid` are {"tree.field": value} (registry config fields, or the kind's own)."""
  kind: str
  loss: str = "ce"
  fixed: tuple = ()
  grid: tuple = ()      # ((field, (values...)), ...)

  def candidates(self) -> list[dict[str, Any]]:
    names = [name for name, _ in self.grid]
    return [{**dict(self.fixed), **dict(zip(names, values))}
            for values in itertools.product(*(values for _, values in self.grid))]


METHODS = {
    "erm": Method("loss", "ce"),
    "mr2": Method("loss", "mr2", fixed=(("mr2.lam", 0.0), ("mr2.form", "paper"),
                                        ("mr2.decay", 0.9)),
                  grid=(("mr2.c_bar", (1.0, 1.5, 2.0, 3.0)),)),
    # MR2's control: the same margin cross-entropy with every γ_k = c̄ (a uniform temperature),
    # c̄ from the same grid — separates MR2's class-dependent γ from a global temperature.
    "uniform_gamma": Method("loss", "mr2", fixed=(("mr2.lam", 0.0), ("mr2.form", "paper"),
                                                  ("mr2.decay", 0.9), ("mr2.uniform_margin", True)),
                            grid=(("mr2.c_bar", (1.0, 1.5, 2.0, 3.0)),)),
    "focal": Method("loss", "focal", grid=(("focal.gamma", (0.5, 1.0, 2.0)),)),
    # Linear logits are not cosines: LDAM's scale s is 1 and the margin is on the logits' scale.
    "ldam": Method("loss", "ldam", fixed=(("ldam.scale", 1.0),),
                   grid=(("ldam.max_margin", (0.5, 2.0, 4.0)),)),
    "group_dro": Method("loss", "group_dro",
                        grid=(("group_dro.eta", (0.001, 0.01, 0.1, 1.0)),)),
    "fairdro": Method("loss", "fairdro", grid=(("fairdro.rho", (0.03, 0.1, 0.5, 2.0)),)),
    # Balanced CIFAR-10 has f_k = 0.1: λ = 5e-3 makes no class rare (EQL = ERM); λ = 0.2 makes
    # every class rare (random dropout of negative logits, the spec's other regime).
    "eql": Method("loss", "eql", grid=(("eql.lam", (5e-3, 0.2)), ("eql.gamma", (0.5, 0.9)))),
    "jtt": Method("jtt", grid=(("jtt.stage1_epochs", (1, 5)), ("jtt.upweight", (1, 5, 20)))),
    "lff": Method("lff", fixed=(("lff.alpha", 0.7),), grid=(("lff.q", (0.3, 0.5, 0.7)),)),
    # Setting 'adapter' (a trainable MLP under the head, two views): ERM there, and SupCon.
    "erm_adapter": Method("adapter", fixed=(("supcon.lam", 0.0),)),
    "supcon": Method("adapter", fixed=(("supcon.temperature", 0.1),),
                     grid=(("supcon.lam", (0.1, 0.5, 1.0)),)),
}
ADAPTER_METHODS = ("erm_adapter", "supcon")
ADAPTER_WIDTH = 256


def setting_of(name: str) -> str:
  return "adapter" if name in ADAPTER_METHODS else SETTING


def loss_key(method: Method, params: dict[str, Any]) -> tuple[str, tuple]:
  return method.loss, tuple(sorted(params.items()))


# ----------------------------------------------------------------------------------------------
# Training one method.


class LfFProbeState(NamedTuple):
  params: dict[str, dict[str, jax.Array]]   # {"biased": head, "debiased": head}
  opt_state: Any
  lff: reweight_jax.LfFState


@functools.lru_cache(maxsize=None)
def make_lff_epoch(recipe: lp.Recipe, steps_per_epoch: int, q: float, alpha: float):
  """jit(state, features, labels, batch_indices) → (state, mean loss): one LfF epoch (both heads,
  one backward, one optimiser over both)."""
  optimizer = lp.make_optimizer(recipe, steps_per_epoch)

  @jax.jit
  def train_epoch(state: LfFProbeState, features, labels, batch_indices):
    def step(state: LfFProbeState, indices):
      def objective(params):
        x = features[indices]
        loss, lff_state, _ = reweight_jax.lff_loss(
            lp.logits_of(params["biased"], x), lp.logits_of(params["debiased"], x),
            labels[indices], indices, state.lff, labels, q=q, alpha=alpha)
        return loss, lff_state

      (loss, lff_state), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      return LfFProbeState(optax.apply_updates(state.params, updates), opt_state, lff_state), loss

    state, step_losses = jax.lax.scan(step, state, batch_indices)
    return state, jnp.mean(step_losses)

  return train_epoch


def train_lff(features: np.ndarray, labels: np.ndarray, recipe: lp.Recipe, seed: int, q: float,
              alpha: float):
  """The debiased head's params (initialised as ERM's head of the seed), losses, final state."""
  steps = len(labels) // recipe.batch_size
  optimizer = lp.make_optimizer(recipe, steps)
  key = jax.random.key(seed)
  params = {"debiased": lp.init_params(key, features.shape[1], NUM_CLASSES, recipe.init_std),
            "biased": lp.init_params(jax.random.fold_in(key, 1), features.shape[1], NUM_CLASSES,
                                     recipe.init_std)}
  state = LfFProbeState(params, optimizer.init(params), reweight_jax.init_lff_state(len(labels)))
  train_epoch = make_lff_epoch(recipe, steps, q, alpha)
  x, y = jnp.asarray(features), jnp.asarray(labels, jnp.int32)
  epoch_losses = []
  for epoch in range(recipe.epochs):
    state, loss = train_epoch(state, x, y, lp.epoch_batches(len(labels), recipe.batch_size, seed,
                                                            epoch))
    epoch_losses.append(float(loss))
  return state.params["debiased"], epoch_losses, state


class Adapter(nn.Module):
  """features → h = ReLU(Dense(width)) → (logits = Dense(K)(h), SupCon projection of h)."""
  width: int = ADAPTER_WIDTH
  num_classes: int = NUM_CLASSES

  @nn.compact
  def __call__(self, x):
    hidden = nn.relu(nn.Dense(self.width, name="adapter")(x))
    return nn.Dense(self.num_classes, name="head")(hidden), mr2_jax.SupConProjection(
        name="projection")(hidden)


class AdapterState(NamedTuple):
  params: Any
  opt_state: Any


@functools.lru_cache(maxsize=None)
def make_adapter_epoch(recipe: lp.Recipe, steps_per_epoch: int, lam: float, temperature: float):
  """jit(state, features, flipped, labels, batch_indices) → (state, mean loss): one epoch of
  CE on both views + λ·SupCon over the 2B views (λ = 0: ERM on the same adapter and views)."""
  optimizer = lp.make_optimizer(recipe, steps_per_epoch)
  model = Adapter()

  @jax.jit
  def train_epoch(state: AdapterState, features, flipped, labels, batch_indices):
    def step(state: AdapterState, indices):
      def objective(params):
        x = jnp.concatenate([features[indices], flipped[indices]])  # view-major, 2B rows
        y = jnp.concatenate([labels[indices], labels[indices]])
        logits, projections = model.apply({"params": params}, x)
        loss = jnp.mean(reweight_jax.cross_entropy_loss(logits, y))
        if lam:
          loss = loss + lam * mr2_jax.supcon_loss(projections, y, temperature=temperature,
                                                  num_classes=NUM_CLASSES)[0]
        return loss

      loss, grads = jax.value_and_grad(objective)(state.params)
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      return AdapterState(optax.apply_updates(state.params, updates), opt_state), loss

    state, step_losses = jax.lax.scan(step, state, batch_indices)
    return state, jnp.mean(step_losses)

  return train_epoch


@jax.jit
def _adapter_predict(params, features):
  return jnp.argmax(Adapter().apply({"params": params}, features)[0], axis=-1)


def class_accuracy(name: str, head, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """Per-class accuracy of a trained method's head (the adapter's for the adapter setting)."""
  if METHODS[name].kind != "adapter":
    return lp.class_accuracy(head, features, labels)
  predictions = _adapter_predict(head, jnp.asarray(features))
  return mr2_jax.per_class_accuracy(predictions, jnp.asarray(labels, jnp.int32), NUM_CLASSES)


def train_method(name: str, params: dict[str, Any], features: np.ndarray, labels: np.ndarray,
                 recipe: lp.Recipe, seed: int, flipped: np.ndarray | None = None
                 ) -> tuple[dict, list[float], dict[str, Any]]:
  """(head params, per-epoch training loss, method-specific record) of one run; `flipped`: the
  second view's features (adapter setting only)."""
  method = METHODS[name]
  if method.kind == "loss":
    state, epoch_losses = lp.train_probe(loss_key(method, params), features, labels, recipe, seed)
    record = {}
    for field in ("group_dro_q", "fairdro_q"):
      if field in state.loss_state:
        record[field] = np.asarray(state.loss_state[field]).tolist()
    if "class_stats" in state.loss_state:
      record["mr2_gamma"] = np.asarray(mr2_jax.class_margins(
          state.loss_state["class_stats"], params.get("mr2.c_bar", 1.0))).tolist()
    return state.params, epoch_losses, record
  if method.kind == "jtt":
    stage1, _ = lp.train_probe("erm", features, labels,
                               recipe._replace(epochs=params["jtt.stage1_epochs"]), seed)
    errors = np.asarray(reweight_jax.jtt_error_set(
        lp.logits_of(stage1.params, jnp.asarray(features)), jnp.asarray(labels, jnp.int32)))
    upweight = params["jtt.upweight"]
    state, epoch_losses = lp.train_probe(
        "erm", features, labels, recipe, seed,
        epoch_order=lambda e: reweight_jax.jtt_upsampled_indices(errors, upweight,
                                                                 seed=(seed, e)))
    return state.params, epoch_losses, {
        "jtt_error_set_size": int(errors.sum()),
        "jtt_error_set_per_class": np.bincount(labels[errors], minlength=NUM_CLASSES).tolist(),
        "jtt_epoch_length": reweight_jax.jtt_epoch_length(errors, upweight)}
  if method.kind == "lff":
    head, epoch_losses, state = train_lff(features, labels, recipe, seed, params["lff.q"],
                                          params["lff.alpha"])
    return head, epoch_losses, {"lff_visited": int(np.asarray(state.lff.seen).sum())}
  if method.kind == "adapter":
    if flipped is None:
      raise ValueError(f"{name}: the adapter setting needs the flipped view's features")
    steps = len(labels) // recipe.batch_size
    model_params = Adapter().init(jax.random.key(seed), jnp.zeros((1, features.shape[1])))["params"]
    optimizer = lp.make_optimizer(recipe, steps)
    state = AdapterState(model_params, optimizer.init(model_params))
    train_epoch = make_adapter_epoch(recipe, steps, float(params["supcon.lam"]),
                                     float(params.get("supcon.temperature", 0.1)))
    x, x2, y = jnp.asarray(features), jnp.asarray(flipped), jnp.asarray(labels, jnp.int32)
    epoch_losses = []
    for epoch in range(recipe.epochs):
      state, loss = train_epoch(state, x, x2, y, lp.epoch_batches(len(labels), recipe.batch_size,
                                                                  seed, epoch))
      epoch_losses.append(float(loss))
    return state.params, epoch_losses, {"adapter_width": ADAPTER_WIDTH}
  raise ValueError(f"{name}: unknown kind {method.kind!r}")


# ----------------------------------------------------------------------------------------------
# Tuning on a validation split.


def tune(features: np.ndarray, labels: np.ndarray, recipe: lp.Recipe,
         methods: Sequence[str], seeds: Sequence[int] = TUNE_SEEDS, log=print,
         flipped: np.ndarray | None = None) -> dict:
  """Every candidate of each method on a stratified (1 − VALIDATION_FRACTION) split of the training
  set, scored on the held-out rest: mean over `seeds` of the worst-class validation accuracy
  (ties: mean per-class accuracy). Returns the selection record."""
  fit, val = data.stratified_holdout(labels, NUM_CLASSES, VALIDATION_FRACTION, seed=0)
  fit_features, fit_labels, val_features, val_labels = (features[fit], labels[fit], features[val],
                                                        labels[val])
  fit_flipped = None if flipped is None else flipped[fit]
  record = {"criterion": "mean over seeds of the worst-class accuracy on a stratified "
                         f"{VALIDATION_FRACTION:.0%} validation split of the training set "
                         "(ties: mean per-class accuracy); never the test set",
            "seeds": list(seeds), "validation_size": int(len(val)), "methods": {}}
  for name in methods:
    scored = []
    for params in METHODS[name].candidates():
      worst, mean = [], []
      start = time.perf_counter()
      for seed in seeds:
        head, _, _ = train_method(name, params, fit_features, fit_labels, recipe, seed,
                                  flipped=fit_flipped)
        acc = class_accuracy(name, head, val_features, val_labels)
        worst.append(float(np.min(acc)))
        mean.append(float(np.mean(acc)))
      scored.append({"params": params, "val_worst_class": float(np.mean(worst)),
                     "val_mean_class": float(np.mean(mean)), "wall_s": time.perf_counter() - start})
      log(f"tune {name} {params}: worst class {100 * np.mean(worst):.2f} %, mean "
          f"{100 * np.mean(mean):.2f} %")
    best = max(scored, key=lambda s: (s["val_worst_class"], s["val_mean_class"]))
    record["methods"][name] = {"chosen": best["params"], "candidates": scored}
  return record


# ----------------------------------------------------------------------------------------------
# Reports.


def tradeoff_plot(summary: dict, path: pathlib.Path) -> None:
  """Paired Δ vs ERM of the Hard classes against that of the Easy classes, per method (mean ± sample
  std of the per-seed Δ)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 5))
  for method, row in summary["methods"].items():
    if method == "erm":
      continue
    x, y = row["delta_mean"]["easy"], row["delta_mean"]["hard"]
    ax.errorbar(x, y, xerr=row["delta_std"]["easy"], yerr=row["delta_std"]["hard"], fmt="o",
                capsize=3)
    ax.annotate(method, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9)
  ax.axhline(0, color="grey", lw=0.8)
  ax.axvline(0, color="grey", lw=0.8)
  ax.set_xlabel("Δ Easy classes vs ERM (points)")
  ax.set_ylabel("Δ Hard classes vs ERM (points)")
  ax.set_title("Trade-off: Hard-class gain against Easy-class change\n(paired per seed; bars ±1 "
               f"{reporting.STD_NAME} of Δ)", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def paired_against_control(runs: list[dict], method: str, control: str,
                           difficulty: Sequence[int]) -> str:
  """A Markdown row set: `method` − `control` per seed (paired Δ, seeds ahead) on the groups of
  `difficulty` (ERM's), for the columns of the probe tables."""
  by = {(r["method"], r["seed"]): r for r in runs}
  seeds = sorted(s for m, s in by if m == method and (control, s) in by)
  metrics = {m: {s: lp.group_metrics(np.asarray(by[m, s]["class_accuracy"]),
                                     np.asarray(difficulty), None) for s in seeds}
             for m in (method, control)}
  cells = [reporting.delta_cell(tuple(reporting.paired_delta(
      {s: metrics[method][s][k] for s in seeds}, {s: metrics[control][s][k] for s in seeds})),
      scale=1.0, digits=2) for k, _ in lp.COLUMNS]
  return ("| Method − control | " + " | ".join(t for _, t in lp.COLUMNS) + " |\n"
          + "|---" * (len(lp.COLUMNS) + 1) + "|\n"
          + f"| {method} − {control} | " + " | ".join(cells) + " |\n")


SETTING_TITLES = {
    SETTING: "linear head on frozen Lite0 features (ERM = `erm`)",
    "adapter": (f"trainable MLP adapter ({ADAPTER_WIDTH} units) on frozen Lite0 features, image + "
                "flipped view (ERM = `erm_adapter`, SupCon's paired reference)"),
}


def write_reports(runs: list[dict], out: pathlib.Path, results: dict) -> str:
  """tables.md, results.json, per_class[_adapter].png and tradeoff[_adapter].png, per setting
  (Easy / Medium / Hard from the setting's own ERM)."""
  class_names = data.CIFAR10_CLASS_NAMES
  lines = ["# MR2's comparison methods on the Lite0 frozen-feature probe, balanced CIFAR-10\n"]
  summaries, chosen = {}, {}
  for setting in (SETTING, "adapter"):
    names = [m for m in METHODS if setting_of(m) == setting and any(r["method"] == m for r in runs)]
    if not names:
      continue
    reference = "erm" if setting == SETTING else "erm_adapter"
    # `summarise` reads the reference method as "erm".
    renamed = [{**r, "method": "erm" if r["method"] == reference else r["method"]}
               for r in runs if r["method"] in names]
    summary = lp.summarise(renamed, setting, methods=["erm" if m == reference else m
                                                      for m in names], long_tailed=False)
    summaries[setting] = summary
    chosen.update({m: next(r["params"] for r in runs if r["method"] == m) for m in names})
    suffix = "" if setting == SETTING else f"_{setting}"
    lines += [f"## {SETTING_TITLES[setting]}\n",
              lp.markdown_tables(summary, setting, class_names, long_tailed=False)]
    if setting == SETTING and {"mr2", "uniform_gamma"} <= set(names):
      lines += ["MR2 against its uniform-γ control (same c̄ grid; paired per seed, ERM's groups):",
                "", paired_against_control(runs, "mr2", "uniform_gamma",
                                           summary["difficulty_groups"])]
    lp.plot_sorted_class_accuracy(summary, setting, class_names, out / f"per_class{suffix}.png",
                                  title="Lite0 probe, comparison methods")
    tradeoff_plot(summary, out / f"tradeoff{suffix}.png")
  lines += ["Hyper-parameters (chosen on the validation split, `selection.json`):", "",
            "| Method | hyper-parameters |", "|---|---|"]
  lines += [f"| {m} | {', '.join(f'{k} = {v}' for k, v in p.items()) or '—'} |"
            for m, p in chosen.items()]
  text = "\n".join(lines) + "\n"
  (out / "tables.md").write_text(text)
  (out / "results.json").write_text(json.dumps({**results, "summaries": summaries,
                                                "hyper_parameters": chosen}, indent=1))
  return text


# ----------------------------------------------------------------------------------------------
# Commands.


def flipped_features(args, methods: Sequence[str]) -> np.ndarray | None:
  """The flipped view's training features when an adapter-setting method is among `methods`."""
  if not any(m in ADAPTER_METHODS for m in methods):
    return None
  return lp.load_features(args.resolution, "train-flip", args.cache_dir)[0]


def tune_command(args: argparse.Namespace) -> None:
  features, labels = lp.load_features(args.resolution, "train", args.cache_dir)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  record = tune(features, labels, lp.RECIPE, args.methods,
                flipped=flipped_features(args, args.methods))
  record.update(recipe=lp.RECIPE._asdict(), resolution=args.resolution,
                wall_s=time.perf_counter() - start)
  path = out / "selection.json"
  if path.exists():  # keep the other methods' choices
    previous = json.loads(path.read_text())
    record["methods"] = {**previous.get("methods", {}), **record["methods"]}
  path.write_text(json.dumps(record, indent=1))
  print(f"wrote {path} ({record['wall_s']:.0f} s)")


def study_command(args: argparse.Namespace) -> None:
  out = pathlib.Path(args.out)
  selection = json.loads((out / "selection.json").read_text())
  (out / "runs").mkdir(parents=True, exist_ok=True)
  train_features, train_labels = lp.load_features(args.resolution, "train", args.cache_dir)
  test_features, test_labels = lp.load_features(args.resolution, "test", args.cache_dir)
  flipped = flipped_features(args, args.methods)
  start_all = time.perf_counter()
  for seed in args.seeds:
    for name in args.methods:
      path = out / "runs" / f"{name}-seed{seed}.json"
      if path.exists():
        continue
      params = selection["methods"][name]["chosen"]
      start = time.perf_counter()
      head, epoch_losses, record = train_method(name, params, train_features, train_labels,
                                                lp.RECIPE, seed, flipped=flipped)
      class_acc = class_accuracy(name, head, test_features, test_labels)
      run = {"setting": setting_of(name), "method": name, "seed": seed, "params": params,
             "recipe": lp.RECIPE._asdict(), "resolution": args.resolution,
             "class_accuracy": class_acc.tolist(), "final_train_loss": epoch_losses[-1],
             "wall_s": time.perf_counter() - start, **record}
      path.write_text(json.dumps(run, indent=1))
      print(f"seed {seed} {name}: mean class acc {100 * np.mean(class_acc):.2f} %, worst "
            f"{100 * np.min(class_acc):.1f} %, {run['wall_s']:.1f} s", flush=True)
  print(f"study wall time {time.perf_counter() - start_all:.0f} s")
  report_command(args)


def report_command(args: argparse.Namespace) -> None:
  out = pathlib.Path(args.out)
  runs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
  if not runs:
    raise SystemExit(f"error: {out / 'runs'}: no run files (the study command writes them)")
  runs.sort(key=lambda r: (r["seed"], list(METHODS).index(r["method"])))
  results = {"recipe": runs[0]["recipe"], "resolution": runs[0]["resolution"],
             "seeds": sorted({r["seed"] for r in runs}),
             "study_wall_s": sum(r["wall_s"] for r in runs)}
  print(write_reports(runs, out, results))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m experiments.studies.probe_comparison",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--no_xla_cpu_tuning", action="store_true")
  commands = parser.add_subparsers(dest="command", required=True)
  for command in ("tune", "study", "report"):
    sub = commands.add_parser(command)
    sub.add_argument("--out", default="experiments/studies/results/probe_comparison")
    sub.add_argument("--resolution", type=int, default=lp.RESOLUTION)
    sub.add_argument("--cache_dir", type=pathlib.Path, default=None)
    sub.add_argument("--methods", nargs="+", choices=list(METHODS),
                     default=[m for m in METHODS if m not in ADAPTER_METHODS],
                     help="default: the linear-head setting's methods; the adapter setting's "
                          f"{ADAPTER_METHODS} need the flipped view's features")
    if command == "study":
      sub.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  xla_cpu.configure(not args.no_xla_cpu_tuning)
  {"tune": tune_command, "study": study_command, "report": report_command}[args.command](args)


if __name__ == "__main__":
  main()
