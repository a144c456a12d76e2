"""The probe comparison's methods (COMPARISONS spec): their hyper-parameter grids, one run of a
method on cached features, and the tuning of each on a validation split of the training set.

`experiments.studies.probe_comparison` is the study (its commands and what each method changes);
its reports are `experiments.studies.probe_comparison_report`. Every method trains a loss-registry
entry with the linear probe's step (`experiments.probe.linear_head`): kind 'loss' the entry on the
linear head; 'jtt' an ERM stage 1 on that head, then the 'jtt' entry on the error set up-sampled as
the trainer's sampler does it (`experiments.methods.jtt.upsampled_sample`); 'lff' the 'lff'
entry on a biased and a debiased head (`experiments.probe.lff`); 'adapter' the 'supcon' entry (λ = 0:
'ce') on an MLP adapter and two views (`experiments.probe.adapter`).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import mr2_jax
import reweight_jax
from experiments.data import holdout
from experiments.probe import adapter
from experiments.probe import lff
from experiments.probe import linear_head
from experiments.probe.features import NUM_CLASSES
from experiments.probe.linear_head import ProbeSchedule
from experiments.methods import jtt

SETTING = "balanced"
TUNE_SEEDS = (0, 1)
VALIDATION_FRACTION = 0.1
# `config.jtt.stage1` names the trainer's stage-1 run, which its sampler reads (the entry's check
# asks for one); here stage 1 is trained in memory and the up-sampled epochs are `epoch_order`.
JTT_STAGE1 = "<the probe's stage-1 ERM head, in memory>"


@dataclasses.dataclass(frozen=True)
class Method:
  """kind: 'loss' (a loss-registry entry on the head), 'jtt', 'lff' or 'adapter'; `fixed` and each
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


def setting_of(name: str) -> str:
  return "adapter" if name in ADAPTER_METHODS else SETTING


def loss_key(method: Method, params: dict[str, Any]) -> tuple[str, tuple]:
  return method.loss, tuple(sorted(params.items()))


def class_accuracy(name: str, head, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """Per-class accuracy of a trained method's head (the adapter's for the adapter setting)."""
  if METHODS[name].kind != "adapter":
    return linear_head.class_accuracy(head, features, labels)
  return linear_head.class_accuracy(head, features, labels, adapter.ADAPTER_HEAD)


def train_method(name: str, params: dict[str, Any], features: np.ndarray, labels: np.ndarray,
                 schedule: ProbeSchedule, seed: int, flipped: np.ndarray | None = None
                 ) -> tuple[dict, list[float], dict[str, Any]]:
  """(head params, per-epoch training loss, method-specific record) of one run; `flipped`: the
  second view's features (adapter setting only)."""
  method = METHODS[name]
  if method.kind == "loss":
    state, epoch_losses = linear_head.train_probe(loss_key(method, params), features, labels,
                                                  schedule, seed)
    record = {}
    for field in ("group_dro_q", "fairdro_q"):
      if field in state.loss_state:
        record[field] = np.asarray(state.loss_state[field]).tolist()
    if "class_stats" in state.loss_state:
      record["mr2_gamma"] = np.asarray(mr2_jax.class_margins(
          state.loss_state["class_stats"], params.get("mr2.c_bar", 1.0))).tolist()
    return state.params, epoch_losses, record
  if method.kind == "jtt":
    stage1, _ = linear_head.train_probe("erm", features, labels,
                                        schedule._replace(epochs=params["jtt.stage1_epochs"]), seed)
    errors = np.asarray(reweight_jax.baselines.jtt_error_set(
        linear_head.logits_of(stage1.params, jnp.asarray(features)),
        jnp.asarray(labels, jnp.int32)))
    upweight = params["jtt.upweight"]

    def upsampled(epoch):  # a new shuffle of the up-sampled list each epoch
      return jtt.upsampled_sample(errors, labels, upweight, (seed, epoch), NUM_CLASSES)

    state, epoch_losses = linear_head.train_probe(
        ("jtt", (("jtt.stage1", JTT_STAGE1), ("jtt.upweight", upweight))), features, labels,
        schedule, seed, epoch_order=lambda epoch: upsampled(epoch)[0])
    return state.params, epoch_losses, upsampled(0)[1]
  if method.kind == "lff":
    head, epoch_losses, state = lff.train_lff(features, labels, schedule, seed, params["lff.q"],
                                              params["lff.alpha"])
    return head, epoch_losses, {"lff_visited": int(np.asarray(state.loss_state["lff"].seen).sum())}
  if method.kind == "adapter":
    if flipped is None:
      raise ValueError(f"{name}: the adapter setting needs the flipped view's features")
    head, epoch_losses = adapter.train_adapter(features, flipped, labels, schedule, seed,
                                               float(params["supcon.lam"]),
                                               float(params.get("supcon.temperature", 0.1)))
    return head, epoch_losses, {"adapter_width": adapter.ADAPTER_WIDTH}
  raise ValueError(f"{name}: unknown kind {method.kind!r}")


def tune(features: np.ndarray, labels: np.ndarray, schedule: ProbeSchedule,
         methods: Sequence[str], seeds: Sequence[int] = TUNE_SEEDS, log=print,
         flipped: np.ndarray | None = None) -> dict:
  """Every candidate of each method on a stratified (1 − VALIDATION_FRACTION) split of the training
  set, scored on the held-out rest: mean over `seeds` of the worst-class validation accuracy
  (ties: mean per-class accuracy). Returns the selection record."""
  fit, val = holdout.stratified_holdout(labels, NUM_CLASSES, VALIDATION_FRACTION, seed=0)
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
        head, _, _ = train_method(name, params, fit_features, fit_labels, schedule, seed,
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
