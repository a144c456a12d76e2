"""The toy data and the per-class comparison table that the three examples share.

Two Gaussian toy sets made with NumPy (no download, milliseconds), each with a large held-out test
set of `TEST_COUNT` examples per class:

* balanced: 6 classes of 30 training examples, class k's inputs more spread out the larger k, so
  the classes differ in difficulty without any imbalance: MR2's setting (Zhu et al., ICLR 2026,
  arXiv 2602.00205);
* long-tailed: 200, 100, 50, 25, 12 and 6 training examples, one spread: the inverse reweighting's
  setting (Wang et al., ICML 2026, arXiv 2605.10047).

`difficulty_table` and `shot_table` compare each method's held-out accuracy with a CE baseline
trained the same way: overall, the worst class, three groups of classes, and each class;
`plot_table` draws such a table (it needs matplotlib, which the libraries do not).
"""

from typing import NamedTuple

import numpy as np

import mr2_jax

NUM_CLASSES, INPUT_DIM = 6, 32
BALANCED_COUNTS = (30,) * NUM_CLASSES
BALANCED_SPREADS = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6)
LONG_TAILED_COUNTS = (200, 100, 50, 25, 12, 6)
CLASS_SEPARATION = 0.6  # the class means' scale: the classes overlap, so there is something to gain
TEST_COUNT = 1000
BASELINE = "CE"


class Split(NamedTuple):
  """A training set and a held-out test set: float32 inputs [N, INPUT_DIM], int32 labels [N]."""
  train_inputs: np.ndarray
  train_labels: np.ndarray
  test_inputs: np.ndarray
  test_labels: np.ndarray


def gaussian_split(train_counts, spreads, seed: int) -> Split:
  """x = μ_y + σ_y·ε, with μ_k ~ N(0, CLASS_SEPARATION²·I) and ε ~ N(0, I) in INPUT_DIM dimensions.

  `train_counts` [K] training examples and TEST_COUNT test examples per class, spreads σ [K].
  """
  rng = np.random.default_rng(seed)
  means = CLASS_SEPARATION * rng.normal(size=(NUM_CLASSES, INPUT_DIM))

  def draw(counts):
    labels = np.repeat(np.arange(NUM_CLASSES), counts).astype(np.int32)
    noise = np.asarray(spreads)[labels, None] * rng.normal(size=(labels.size, INPUT_DIM))
    return (means[labels] + noise).astype(np.float32), labels

  return Split(*draw(train_counts), *draw([TEST_COUNT] * NUM_CLASSES))


def balanced_split(seed: int) -> Split:
  return gaussian_split(BALANCED_COUNTS, BALANCED_SPREADS, seed)


def long_tailed_split(seed: int) -> Split:
  return gaussian_split(LONG_TAILED_COUNTS, (1.0,) * NUM_CLASSES, seed)


def batch_indices(num_examples: int, batch_size: int, num_steps: int, seed: int) -> np.ndarray:
  """int [num_steps, batch_size], drawn uniformly with replacement: the same batches for every
  method of a seed, so that the CE baseline is trained the same way as the method."""
  return np.random.default_rng(seed).integers(0, num_examples, (num_steps, batch_size))


class Table(NamedTuple):
  """A comparison on held-out data, accuracies in %.

  Attributes:
    columns: 'overall', 'worst', the three group names, 'class 0' … 'class K−1'.
    rows: method name → [len(columns)], the baseline (CE) first.
    groups: int [K], each class's group (0, 1, 2 in the order of the group columns).
    claimed_group: the group whose accuracy the methods claim to raise.
    gains: method name → its accuracy on `claimed_group` minus the baseline's, in points.
    gained_examples: method name → its correctly classified held-out examples of `claimed_group`
      minus the baseline's.
    text: the table and one sentence per method, as printed.
  """
  columns: tuple
  rows: dict
  groups: np.ndarray
  claimed_group: str
  gains: dict
  gained_examples: dict
  text: str


def difficulty_table(title: str, predictions: dict, labels) -> Table:
  """Easy / Medium / Hard: tertiles of CE's per-class test accuracy, fixed from the baseline and
  reused for every method (Zhu et al., ICLR 2026, arXiv 2602.00205, evaluation protocol); MR2
  claims the Hard classes gain."""
  ce_accuracy = mr2_jax.per_class_accuracy(predictions[BASELINE], labels, NUM_CLASSES)
  return _table(title, predictions, labels, mr2_jax.difficulty_tertiles(ce_accuracy),
                ("Easy", "Medium", "Hard"))


def shot_table(title: str, predictions: dict, labels, train_counts) -> Table:
  """Many / Medium / Few: tertiles of the training counts, most first (`difficulty_tertiles` splits
  any per-class score so); the reweighting claims the Few classes gain (Wang et al., ICML 2026,
  arXiv 2605.10047)."""
  groups = mr2_jax.difficulty_tertiles(np.asarray(train_counts, np.float64))
  return _table(title, predictions, labels, groups, ("Many", "Medium", "Few"))


def _table(title, predictions, labels, groups, group_names) -> Table:
  """Overall accuracy, min_k acc_k, acc_g = mean_{k in g} acc_k and acc_k per method, in %."""
  labels = np.asarray(labels)
  columns = ("overall", "worst", *group_names, *(f"class {k}" for k in range(NUM_CLASSES)))
  rows = {}
  for method, predicted in predictions.items():  # a few methods, outside any training step
    class_accuracy = mr2_jax.per_class_accuracy(predicted, labels, NUM_CLASSES)
    overall = np.mean(np.asarray(predicted) == labels)
    rows[method] = 100 * np.array([overall, mr2_jax.worst_class_accuracy(class_accuracy),
                                   *mr2_jax.group_accuracy(class_accuracy, groups),
                                   *class_accuracy])
  claimed = columns.index(group_names[-1])
  gains = {m: float(row[claimed] - rows[BASELINE][claimed]) for m, row in rows.items()
           if m != BASELINE}
  in_claimed = np.isin(labels, np.flatnonzero(np.asarray(groups) == len(group_names) - 1))
  correct = {m: int(np.sum((np.asarray(p) == labels) & in_claimed)) for m, p in predictions.items()}
  gained = {m: correct[m] - correct[BASELINE] for m in gains}
  return Table(columns, rows, groups, group_names[-1], gains, gained,
               _format(title, columns, rows, groups, group_names, gains, gained))


def _format(title, columns, rows, groups, group_names, gains, gained) -> str:
  """The printed table: one row per method, a row naming each class's group, one sentence per
  method on the claimed (last) group. One seed gives no interval, so the sentence reads no effect
  into the difference, whatever its sign (the harness's main job compares seeds with 95 %
  intervals)."""
  width = max(len(m) for m in rows) + 2
  header = "".join(f"{c.replace('class ', 'c'):>8}" for c in columns)
  lines = [title, f"{'method':<{width}}{header}"]
  lines += [f"{m:<{width}}" + "".join(f"{v:8.1f}" for v in row) for m, row in rows.items()]
  lines.append(f"{'group':<{width}}" + " " * 8 * (len(columns) - NUM_CLASSES)
               + "".join(f"{group_names[g]:>8}" for g in groups))
  for method, gain in gains.items():
    lines.append(f"{method} vs {BASELINE} on the {group_names[-1]} classes: {gain:+.1f} points "
                 f"({gained[method]:+d} held-out examples), one seed: no interval, so no effect "
                 "is shown either way.")
  return "\n".join(lines)


def plot_table(table: Table):
  """The table as a figure: each class's held-out accuracy per method, the class's group under its
  number (left), and each method's difference from the baseline on overall, worst and the three
  groups, in points (right). One seed: no error bars, and the differences carry no interval.

  Returns a `matplotlib.figure.Figure`, made without pyplot (a notebook shows it; a script writes
  it with `figure.savefig(path)`).
  """
  from matplotlib.figure import Figure  # plots only: not a dependency of the libraries

  methods = list(table.rows)
  summary = table.columns[:len(table.columns) - NUM_CLASSES]  # overall, worst, the three groups
  group_names = summary[2:]
  colors = {m: f"C{i}" for i, m in enumerate(methods)}
  figure = Figure(figsize=(10, 3.8), layout="constrained")
  per_class, differences = figure.subplots(1, 2, width_ratios=(3, 2))

  width = 0.8 / len(methods)
  for i, method in enumerate(methods):
    offsets = np.arange(NUM_CLASSES) + (i - (len(methods) - 1) / 2) * width
    per_class.bar(offsets, table.rows[method][len(summary):], width, label=method,
                  color=colors[method])
  per_class.set_xticks(np.arange(NUM_CLASSES),
                       [f"class {k}\n{group_names[g]}" for k, g in enumerate(table.groups)])
  per_class.set_ylim(0, 100)
  per_class.set_ylabel("held-out accuracy (%)")
  per_class.set_title("Each class")
  figure.legend(loc="outside upper center", ncols=len(methods), frameon=False)

  others = methods[1:]
  width = 0.8 / len(others)
  for i, method in enumerate(others):
    offsets = np.arange(len(summary)) + (i - (len(others) - 1) / 2) * width
    gains = table.rows[method][:len(summary)] - table.rows[BASELINE][:len(summary)]
    bars = differences.bar(offsets, gains, width, color=colors[method])
    # A difference that rounds to zero reads 0.0, not -0.0.
    differences.bar_label(bars, [f"{g:+.1f}" if round(g, 1) else "0.0" for g in gains],
                          fontsize="x-small", padding=2)
  differences.axhline(0, color="black", linewidth=0.8)
  differences.set_xticks(np.arange(len(summary)), summary)
  differences.margins(y=0.15)
  differences.set_ylabel(f"minus {BASELINE} (points)")
  differences.set_title(f"Difference from {BASELINE} (one seed: no interval)")
  return figure


def compare(fit, predict, seed: int = 0) -> dict:
  """Every run of both settings and their tables, for an example's `fit(split, method, lam=...)`
  (its training, on the shared batches) and `predict(run, inputs)`: CE, MR2 λ = 0.1 and MR2 λ = 0
  on the balanced set, CE and the reweighting on the long-tailed one. Returns {'runs': {setting:
  {method: run}}, 'tables': {setting: Table}}, the settings 'balanced' and 'long_tailed'."""
  balanced, long_tailed = balanced_split(seed), long_tailed_split(seed)
  runs = {"balanced": {"CE": fit(balanced, "ce"), "MR2 λ=0.1": fit(balanced, "mr2", lam=0.1),
                       "MR2 λ=0": fit(balanced, "mr2", lam=0.0)},
          "long_tailed": {"CE": fit(long_tailed, "ce"),
                          "reweighting": fit(long_tailed, "reweighting")}}
  tables = {
      "balanced": difficulty_table(
          "Balanced toy set, held-out accuracy (%); Easy/Medium/Hard from CE:",
          {m: predict(run, balanced.test_inputs) for m, run in runs["balanced"].items()},
          balanced.test_labels),
      "long_tailed": shot_table(
          "Long-tailed toy set, held-out accuracy (%); Many/Medium/Few by training count:",
          {m: predict(run, long_tailed.test_inputs) for m, run in runs["long_tailed"].items()},
          long_tailed.test_labels, LONG_TAILED_COUNTS)}
  return {"runs": runs, "tables": tables}
