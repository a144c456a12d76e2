"""The plots of a comparison report (`experiments.report.run_tables`): per-class test accuracy,
the per-class quantities a run logs over training (loss, weight, γ), and ρ and NC1–NC4 of the
training set over training, with ±1 sample std (ddof = 1) over seeds where there is more than one
seed, and no error-bar wording where there is one."""

from __future__ import annotations

import pathlib

import numpy as np

from experiments.report import seed_stats


PLOTTED_HISTORY = (("class_loss", "per-class batch loss L_c"),
                   ("train_class_ce", "per-class cross-entropy L_c on the training set"),
                   ("class_weight", "per-class weight ŵ_c"),
                   ("gamma", "per-class margin γ_c"))


def plot_per_class_accuracy(table: dict[str, dict], path: pathlib.Path) -> None:
  """Per-class accuracy of each method, classes sorted by the first method's accuracy; error bars
  ±1 sample std (ddof = 1) over seeds."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  methods = [m for m in table if not m.startswith("_")]
  order = np.argsort(table[methods[0]]["per_class_mean"])[::-1]
  fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(order)), 4))
  for m in methods:
    mean = np.asarray(table[m]["per_class_mean"])[order]
    std = seed_stats.error_bars(np.asarray(table[m]["per_class_std"], np.float64)[order])
    ax.errorbar(np.arange(len(order)), 100 * mean, yerr=None if std is None else 100 * std,
                marker="o", capsize=2, label=m)
  ax.set_xticks(np.arange(len(order)), [str(k) for k in order])
  ax.set_xlabel(f"class (sorted by {methods[0]} accuracy)")
  ax.set_ylabel("test accuracy (%)")
  seeds = {len(table[m]["seeds"]) for m in methods}
  ax.set_title("one seed" if seeds == {1} else f"bars: ±1 {seed_stats.STD_NAME} over "
               f"{seed_stats.spread(seeds).split(' over ')[1]}", fontsize=9)
  ax.legend()
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_class_history(records: list[dict], path_prefix: pathlib.Path) -> list[pathlib.Path]:
  """One PNG per logged per-class quantity (loss, weight, γ) over training steps."""
  if not records:
    return []
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  written = []
  for key, title in PLOTTED_HISTORY:
    rows = [(r["step"], r[key]) for r in records if key in r]
    if not rows:
      continue
    steps = np.array([s for s, _ in rows])
    values = np.array([v for _, v in rows], np.float64)
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in range(values.shape[1]):
      ax.plot(steps, values[:, k], label=str(k), lw=1)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.legend(ncol=2, fontsize=7, title="class")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = pathlib.Path(f"{path_prefix}_{key}.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    written.append(out)
  return written


def plot_nc_history(nc_histories: dict[str, dict[str, dict]], metrics: tuple[tuple[str, str], ...],
                    path: pathlib.Path) -> None:
  """NC1–NC4 of the training set against epochs, one panel per metric and row (log scale), one line
  per method with a band of ±1 sample std (ddof = 1) over seeds (none, and no band wording, for one
  seed)."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  # One panel per row, full page width: four side by side were unreadable at 1280 px.
  fig, axes = plt.subplots(len(metrics), 1, figsize=(8, 3.2 * len(metrics)),
                           sharex=True)
  for ax, (key, label) in zip(axes, metrics):
    for name, histories in nc_histories.items():
      if key not in histories:
        continue
      epoch, mean, std = (np.asarray(histories[key][k]) for k in ("epoch", "mean", "std"))
      ax.plot(epoch, mean, label=name, lw=1.2)
      band = seed_stats.error_bars(std)
      if band is not None:
        ax.fill_between(epoch, np.maximum(mean - band, 1e-6), mean + band, alpha=0.15)
    ax.set_yscale("log")
    ax.set_ylabel(label)
    ax.set_title(f"{label} (training set)", fontsize=10)
    ax.grid(alpha=0.3)
  axes[-1].set_xlabel("epoch")
  axes[0].legend(fontsize=8, ncol=2)
  seeds = {h["seeds"] for histories in nc_histories.values() for h in histories.values()}
  fig.suptitle("Neural Collapse over training" + (" (one seed)" if seeds == {1} else
               f" (band: ±1 {seed_stats.STD_NAME} over seeds)"), fontsize=11)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_rho_history(histories: dict[str, dict], path: pathlib.Path) -> None:
  """ρ on the training set against epochs, one line per method with a band of ±1 sample std
  (ddof = 1) over seeds."""
  # optional: plots only; matplotlib is imported when a plot is drawn
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # optional: plots only; pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4))
  for name, history in histories.items():
    epoch, mean, std = (np.asarray(history[k]) for k in ("epoch", "mean", "std"))
    ax.plot(epoch, mean, label=name, lw=1.2)
    band = seed_stats.error_bars(std)
    if band is not None:
      ax.fill_between(epoch, mean - band, mean + band, alpha=0.15)
  ax.set_xlabel("epoch")
  ax.set_ylabel("ρ (training set)")
  seeds = {h["seeds"] for h in histories.values()}
  ax.set_title("per-class loss spread ρ = std_c L_c / mean_c L_c\n" + ("(one seed)" if seeds == {1}
               else f"(band: ±1 {seed_stats.STD_NAME} over seeds)"), fontsize=10)
  ax.legend(fontsize=7, ncol=2)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
