"""The probe comparison's methods (COMPARISONS spec): their hyper-parameter grids, one run of a
method, and the tuning of each on a validation split of the training set.

`experiments.studies.probe_comparison` is the study (its commands and what each method changes);
its reports are `experiments.studies.probe_comparison_report`. Every run is a run of the trainer
(`experiments.train.train_and_evaluate`) on the probe's config (`experiments/configs/
probe_cifar10.py`: cached features, the linear head) with the method's registry entry under its
registry name and its fields set. Two methods need more than their fields:
  jtt      its stage 1 is a trainer run of 'ce' for `jtt.stage1_epochs` epochs (the recipe's
           schedule over those epochs), read by the 'jtt' entry's sampler (`jtt.stage1`);
  setting 'adapter'  SupCon acts on an encoder, which the linear head does not have: the MLP
           adapter under the head ('mlp_adapter') on two views, the features and the flipped
           images' features ('features:<stem>+flip'); its reference is the same entry at λ = 0,
           cross-entropy on both views.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.studies import probe_runs

SETTING = "balanced"
TUNE_SEEDS = (0, 1)
VALIDATION_FRACTION = 0.1
STAGE1_EPOCHS = "jtt.stage1_epochs"  # JTT's stage-1 length: a field of this study, not the entry's


@dataclasses.dataclass(frozen=True)
class Method:
  """A registry entry (`loss`) with `fixed` fields and a `grid` to tune ({"tree.field": value}
  each, the registry's config fields, and JTT's `STAGE1_EPOCHS`), on the linear head or, in the
  'adapter' setting, on the MLP adapter and two views."""
  loss: str = "ce"
  fixed: tuple = ()
  grid: tuple = ()      # ((field, (values...)), ...)
  adapter: bool = False

  def candidates(self) -> list[dict[str, Any]]:
    names = [name for name, _ in self.grid]
    return [{**dict(self.fixed), **dict(zip(names, values))}
            for values in itertools.product(*(values for _, values in self.grid))]


METHODS = {
    "erm": Method("ce"),
    "mr2": Method("mr2", fixed=(("mr2.lam", 0.0), ("mr2.form", "paper"), ("mr2.decay", 0.9)),
                  grid=(("mr2.c_bar", (1.0, 1.5, 2.0, 3.0)),)),
    # MR2's control: the same margin cross-entropy with every γ_k = c̄ (a uniform temperature),
    # c̄ from the same grid — separates MR2's class-dependent γ from a global temperature.
    "uniform_gamma": Method("mr2", fixed=(("mr2.lam", 0.0), ("mr2.form", "paper"),
                                          ("mr2.decay", 0.9), ("mr2.uniform_margin", True)),
                            grid=(("mr2.c_bar", (1.0, 1.5, 2.0, 3.0)),)),
    "focal": Method("focal", grid=(("focal.gamma", (0.5, 1.0, 2.0)),)),
    # Linear logits are not cosines: LDAM's scale s is 1 and the margin is on the logits' scale.
    "ldam": Method("ldam", fixed=(("ldam.scale", 1.0),), grid=(("ldam.max_margin", (0.5, 2.0, 4.0)),)),
    "group_dro": Method("group_dro", grid=(("group_dro.eta", (0.001, 0.01, 0.1, 1.0)),)),
    "fairdro": Method("fairdro", grid=(("fairdro.rho", (0.03, 0.1, 0.5, 2.0)),)),
    # Balanced CIFAR-10 has f_k = 0.1: λ = 5e-3 makes no class rare (EQL = ERM); λ = 0.2 makes
    # every class rare (random dropout of negative logits, the spec's other regime).
    "eql": Method("eql", grid=(("eql.lam", (5e-3, 0.2)), ("eql.gamma", (0.5, 0.9)))),
    "jtt": Method("jtt", grid=((STAGE1_EPOCHS, (1, 5)), ("jtt.upweight", (1, 5, 20)))),
    "lff": Method("lff", fixed=(("lff.alpha", 0.7),), grid=(("lff.q", (0.3, 0.5, 0.7)),)),
    # Setting 'adapter' (a trainable MLP under the head, two views): ERM there, and SupCon.
    "erm_adapter": Method("supcon", fixed=(("supcon.lam", 0.0),), adapter=True),
    "supcon": Method("supcon", fixed=(("supcon.temperature", 0.1),),
                     grid=(("supcon.lam", (0.1, 0.5, 1.0)),), adapter=True),
}
ADAPTER_METHODS = tuple(name for name, method in METHODS.items() if method.adapter)


def setting_of(name: str) -> str:
  return "adapter" if METHODS[name].adapter else SETTING


def run_name(name: str, params: dict[str, Any], seed: int) -> str:
  """A workdir name that tells the run's method, fields and seed apart."""
  fields = "-".join(f"{k.split('.')[-1]}{v}" for k, v in sorted(params.items())
                    if k not in dict(METHODS[name].fixed))
  return f"{name}{'-' + fields if fields else ''}-seed{seed}"


def run_method(name: str, params: dict[str, Any], seed: int, root: pathlib.Path, *,
               data_dir=None, validation_fraction: float = 0.0) -> dict[str, Any]:
  """The summary of one run of `name` with `params` under `root` (`probe_runs.train`). JTT first
  trains (or finds) its stage-1 run, 'ce' for `STAGE1_EPOCHS` epochs, under root/stage1."""
  method = METHODS[name]
  fields = {k: v for k, v in params.items() if k != STAGE1_EPOCHS}
  common = dict(adapter=method.adapter, data_dir=data_dir, validation_fraction=validation_fraction)
  if method.loss == "jtt":
    epochs = int(params[STAGE1_EPOCHS])
    stage1 = probe_runs.probe_config("ce", {"num_epochs": epochs}, seed, **common)
    stage1_dir = root / "stage1" / f"ce-epochs{epochs}-seed{seed}"
    probe_runs.train(stage1, stage1_dir)
    fields["jtt.stage1"] = str(stage1_dir.resolve())
  config = probe_runs.probe_config(method.loss, fields, seed, **common)
  return probe_runs.train(config, root / run_name(name, params, seed))


def tune(methods: Sequence[str], root: pathlib.Path, seeds: Sequence[int] = TUNE_SEEDS, log=print,
         data_dir=None) -> dict:
  """Every candidate of each method trained on a stratified (1 − VALIDATION_FRACTION) split of
  the training set (the trainer's `validation_fraction`, drawn with the run's seed) and scored on
  the held-out rest: mean over `seeds` of the worst-class validation accuracy (ties: mean
  per-class accuracy). Returns the selection record."""
  record = {"criterion": "mean over seeds of the worst-class accuracy on a stratified "
                         f"{VALIDATION_FRACTION:.0%} validation split of the training set "
                         "(ties: mean per-class accuracy); never the test set",
            "seeds": list(seeds), "methods": {}}
  for name in methods:
    scored = []
    for params in METHODS[name].candidates():
      worst, mean = [], []
      start = time.perf_counter()
      for seed in seeds:
        summary = run_method(name, params, seed, root, data_dir=data_dir,
                             validation_fraction=VALIDATION_FRACTION)
        accuracy = np.asarray(summary["validation_class_accuracy"], np.float64)
        worst.append(float(np.min(accuracy)))
        mean.append(float(np.mean(accuracy)))
      scored.append({"params": params, "val_worst_class": float(np.mean(worst)),
                     "val_mean_class": float(np.mean(mean)), "wall_s": time.perf_counter() - start})
      log(f"tune {name} {params}: worst class {100 * np.mean(worst):.2f} %, mean "
          f"{100 * np.mean(mean):.2f} %")
    best = max(scored, key=lambda s: (s["val_worst_class"], s["val_mean_class"]))
    record["methods"][name] = {"chosen": best["params"], "candidates": scored}
  return record


# What a run file keeps of its summary besides the per-class accuracy: the methods' final state
# (`Method.state_summary`: Group DRO's and FairDRO's q, MR2's margins γ_k) and JTT's error set
# (its sampler's record).
SUMMARY_FIELDS = ("group_dro_q", "fairdro_q", "class_margins", "jtt_error_set_size",
                  "jtt_error_set_per_class", "jtt_epoch_length")


def run_record(name: str, params: dict[str, Any], seed: int, summary: dict[str, Any],
               wall_s: float) -> dict[str, Any]:
  """The study's run file (`runs/<method>-seed<s>.json`) from a run's summary."""
  method = METHODS[name]
  config = probe_runs.probe_config(method.loss, {}, seed, adapter=method.adapter)
  return {"setting": setting_of(name), "method": name, "loss": method.loss, "seed": seed,
          "params": params, "recipe": probe_runs.recipe_record(config),
          "class_accuracy": summary["per_class_accuracy"],
          "test_class_counts": summary["test_class_counts"], "wall_s": wall_s,
          **{field: summary[field] for field in SUMMARY_FIELDS if field in summary}}
