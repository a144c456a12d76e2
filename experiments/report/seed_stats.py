"""The one definition of "mean ± std over seeds" and of the paired per-seed Δ, and the cells and
Markdown tables that show them, for every table and plot of experiments/ (`report.run_tables`,
`report.sweep_table`, `compare`, and the probe studies through `probe.summary`).

The spread over seeds is the *sample* standard deviation (ddof = 1, Bessel's correction):

    mean = (1/n) Σ_i x_i,    std = sqrt( Σ_i (x_i − mean)² / (n − 1) ),

in float64, over the n seeds of a method. With one seed it is undefined: NaN, printed "n/a". Every
table header states it with `spread(...)` ("mean ± sample std (ddof = 1) over n seeds").

Not to be confused with `mr2_jax.class_accuracy_std`, the spread *across classes* of one run's
per-class accuracy (population std over the K classes), a metric of its own ("std of classes").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Hashable, NamedTuple

import numpy as np

DDOF = 1
STD_NAME = "sample std (ddof = 1)"
MEAN_STD = f"mean ± {STD_NAME}"
PAIRED = f"{MEAN_STD} of the per-seed Δ, and seeds ahead / seeds paired (a tie is not ahead)"
NOT_AVAILABLE = "n/a"


def spread(num_seeds: int | Iterable[int]) -> str:
  """The header phrase of a table: "mean ± sample std (ddof = 1) over n seeds"; several counts (one
  per method) read "over n seeds" when equal, else "over 3–5 seeds"."""
  counts = sorted({int(num_seeds)} if isinstance(num_seeds, (int, np.integer)) else
                  {int(n) for n in num_seeds})
  if not counts:
    return MEAN_STD
  seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
  return f"{MEAN_STD} over {seeds} seed{'' if counts == [1] else 's'}"


def mean_std(values) -> tuple[float, float]:
  """(mean, sample std) of a 1-D sequence, float64: mean = Σ x / n, std = sqrt(Σ (x − mean)² /
  (n − 1)); std is NaN for a single value. An empty sequence is an error."""
  values = np.asarray(values, np.float64).reshape(-1)
  if values.size == 0:
    raise ValueError("mean_std of no values")
  std = float(np.std(values, ddof=DDOF)) if values.size > 1 else float("nan")
  return float(np.mean(values)), std


def mean_std_arrays(rows) -> tuple[np.ndarray, np.ndarray]:
  """Per column of `rows` ([seeds, ...], e.g. per-class accuracy per seed): the mean over seeds and
  the sample std over seeds (ddof = 1; NaN everywhere for one seed), float64 — the error bars of the
  per-class plots and the ρ-over-training band."""
  rows = np.asarray(rows, np.float64)
  if rows.ndim == 0 or rows.shape[0] == 0:
    raise ValueError("mean_std_arrays of no rows")
  std = (np.std(rows, axis=0, ddof=DDOF) if rows.shape[0] > 1
         else np.full(rows.shape[1:], np.nan))
  return np.mean(rows, axis=0), std


class PairedDelta(NamedTuple):
  """The paired per-seed comparison of a method against a reference: Δ_s = method_s − reference_s
  over the seeds both have; mean and sample std (ddof = 1) of Δ, seeds with Δ_s > 0 (a tie is not
  ahead), and the number of seeds paired."""
  mean: float
  std: float
  ahead: int
  paired: int


def paired_delta(method_by_seed: Mapping[Hashable, float],
                 reference_by_seed: Mapping[Hashable, float]) -> PairedDelta:
  """Δ_s = method[s] − reference[s] for the seeds s in both mappings (in sorted order);
  (mean Δ, sample std of Δ (ddof = 1; NaN for one seed), #{s: Δ_s > 0}, #seeds paired).
  No seed in common is an error."""
  seeds = sorted(set(method_by_seed) & set(reference_by_seed))
  if not seeds:
    raise ValueError(f"paired comparison without a common seed: {sorted(method_by_seed)} vs "
                     f"{sorted(reference_by_seed)}")
  deltas = np.array([float(method_by_seed[s]) - float(reference_by_seed[s]) for s in seeds],
                    np.float64)
  mean, std = mean_std(deltas)
  return PairedDelta(mean, std, int(np.sum(deltas > 0)), len(seeds))


def metric_spreads(per_seed: Mapping[Hashable, Mapping[str, float]]
                   ) -> dict[str, tuple[float, float]]:
  """{metric: (mean, sample std)} over the seeds of per-seed metrics {seed: {metric: value}}
  (`mean_std` of each metric the first seed has)."""
  names = list(next(iter(per_seed.values())))
  return {name: mean_std([metrics[name] for metrics in per_seed.values()]) for name in names}


def metric_deltas(per_seed: Mapping[Hashable, Mapping[str, float]],
                  reference_per_seed: Mapping[Hashable, Mapping[str, float]]
                  ) -> dict[str, PairedDelta]:
  """{metric: `paired_delta`} of a method's per-seed metrics {seed: {metric: value}} against a
  reference's, for each metric of the method's first seed (Δ_s = method_s − reference_s)."""
  names = list(next(iter(per_seed.values())))
  return {name: paired_delta({s: m[name] for s, m in per_seed.items()},
                             {s: m[name] for s, m in reference_per_seed.items()})
          for name in names}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
  """The lines of a Markdown table: the header, the separator, one line per row of cells."""
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
          + ["| " + " | ".join(row) + " |" for row in rows])


def _number(value: float, fmt: str) -> str:
  return NOT_AVAILABLE if value is None or np.isnan(value) else format(value, fmt)


def cell(mean: float, std: float, *, scale: float = 1.0, fmt: str = ".1f",
         std_fmt: str | None = None, signed: bool = False) -> str:
  """"mean ± std" of (scale · mean, scale · std), e.g. scale 100 for a fraction shown in percent;
  "n/a" for an undefined mean (an empty group), "mean ± n/a" for a single seed's undefined std."""
  if mean is None or np.isnan(mean):
    return NOT_AVAILABLE
  mean_fmt = ("+" if signed else "") + fmt
  return f"{format(scale * mean, mean_fmt)} ± {_number(scale * std, std_fmt or fmt)}"


def percent_cell(pair, digits: int = 1) -> str:
  """A (mean, std) pair of fractions as "mean ± std" in percent with `digits` decimals."""
  mean, std = pair[0], pair[1]
  return cell(mean, std, scale=100.0, fmt=f".{digits}f")


def delta_cell(delta, *, scale: float = 100.0, digits: int = 1) -> str:
  """A paired Δ [mean, std, ahead, paired] as "+1.6 ± 0.3 (5/5)" (scale 100: fractions → points)."""
  mean, std, ahead, paired = delta
  text = cell(mean, std, scale=scale, fmt=f".{digits}f", signed=True)
  return text if text == NOT_AVAILABLE else f"{text} ({int(ahead)}/{int(paired)})"


def error_bars(std) -> np.ndarray | None:
  """Error bars for a plot from sample stds: None when no std is defined (a single seed)."""
  std = np.asarray(std, np.float64)
  return None if std.size == 0 or np.all(np.isnan(std)) else np.nan_to_num(std)
