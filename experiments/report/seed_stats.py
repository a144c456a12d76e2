"""The one definition of "mean ± std over seeds" and of the paired per-seed Δ, and the cells and
Markdown tables that show them, for every table and plot of experiments/ (`report.run_tables`,
`report.sweep_table`, `compare`, and the probe studies through `studies.probe_tables`).

The spread over seeds is the *sample* standard deviation (ddof = 1, Bessel's correction):

    mean = (1/n) Σ_i x_i,    std = sqrt( Σ_i (x_i − mean)² / (n − 1) ),

in float64, over the n seeds of a method. With one seed it is undefined (NaN): a cell shows the
value alone and the table's header says "one seed" once. Every table header states it with
`spread(...)` ("mean ± sample std (ddof = 1) over n seeds").

A paired Δ (`PairedDelta`) carries its per-seed values, a 95 % Student-t interval of its mean and the
exact two-sided sign-test p; `experiments.report.claims` reads a verdict from the interval alone.

Not to be confused with `mr2_reweight_core.metrics.class_accuracy_std`, the spread *across classes*
of one run's per-class accuracy (population std over the K classes), a metric of its own ("std of
classes").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Hashable, NamedTuple

import numpy as np
from scipy import stats

DDOF = 1
STD_NAME = "sample std (ddof = 1)"
MEAN_STD = f"mean ± {STD_NAME}"
PAIRED = ("mean of the per-seed Δ [its 95 % t-interval over seeds] (seeds ahead / seeds paired; a tie "
          "is not ahead)")
ONE_SEED = "one seed: no interval"
NOT_AVAILABLE = "n/a"


def spread(num_seeds: int | Iterable[int]) -> str:
  """The header phrase of a table: "mean ± sample std (ddof = 1) over n seeds"; several counts (one
  per method) read "over n seeds" when equal, else "over 3–5 seeds" ("a one-seed cell is its value
  alone" added when one of them is 1); one seed everywhere is "one seed"."""
  counts = sorted({int(num_seeds)} if isinstance(num_seeds, (int, np.integer)) else
                  {int(n) for n in num_seeds})
  if not counts:
    return MEAN_STD
  if counts == [1]:
    return "one seed"
  seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
  alone = "; a one-seed cell is its value alone" if counts[0] == 1 else ""
  return f"{MEAN_STD} over {seeds} seeds{alone}"


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


CONFIDENCE = 0.95  # the paired Δ's interval: a 95 % Student-t interval over seeds


def t_interval(mean: float, std: float, n: int, confidence: float = CONFIDENCE
               ) -> tuple[float, float]:
  """The two-sided Student-t confidence interval of a mean over n paired seeds:

      mean ± t_{(1 + confidence)/2, n − 1} · std / sqrt(n),

  std the sample std (ddof = 1). Undefined (NaN, NaN) for n < 2. With std = 0 (every seed moved by
  the same amount, as whole-image steps on a small test set do) it has no width: read it with the
  sign test (`sign_test_p`), not as a precise effect."""
  if n < 2 or np.isnan(std):
    return float("nan"), float("nan")
  half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / np.sqrt(n)
  return float(mean - half), float(mean + half)


def sign_test_p(ahead: int, behind: int) -> float:
  """The exact two-sided sign test of "ahead as often as behind": ties dropped, m = ahead + behind,
  p = min(1, 2 · Σ_{i ≤ min(ahead, behind)} C(m, i) / 2^m); 1 with no untied seed. Three of three
  seeds ahead is p = 0.25: no seed count below six can reach p < 0.05."""
  m = ahead + behind
  if m == 0:
    return 1.0
  tail = sum(math.comb(m, i) for i in range(min(ahead, behind) + 1))
  return min(1.0, 2.0 * tail / 2.0 ** m)


class PairedDelta(NamedTuple):
  """The paired per-seed comparison of a method against a reference: Δ_s = method_s − reference_s
  over the seeds both have (`deltas`, in seed order); mean and sample std (ddof = 1) of Δ; seeds
  with Δ_s > 0 (`ahead`) and Δ_s < 0 (`behind`; a tie is neither); the number of seeds paired; the
  95 % t-interval of the mean (`t_interval`; NaN for one seed) and the exact two-sided sign-test p
  (`sign_test_p`)."""
  mean: float
  std: float
  ahead: int
  paired: int
  behind: int
  low: float
  high: float
  sign_p: float
  deltas: tuple[float, ...]

  @classmethod
  def of(cls, deltas) -> "PairedDelta":
    """The statistics of per-seed Δs (a 1-D sequence, seed order)."""
    deltas = np.asarray(deltas, np.float64).reshape(-1)
    mean, std = mean_std(deltas)
    ahead, behind = int(np.sum(deltas > 0)), int(np.sum(deltas < 0))
    low, high = t_interval(mean, std, deltas.size)
    return cls(mean, std, ahead, int(deltas.size), behind, low, high, sign_test_p(ahead, behind),
               tuple(float(d) for d in deltas))

  def to_json(self) -> dict:
    """The JSON object a report's comparison.json holds (NaN as null)."""
    return {k: (None if isinstance(v, float) and np.isnan(v) else
                list(v) if isinstance(v, tuple) else v) for k, v in self._asdict().items()}

  @classmethod
  def from_json(cls, value) -> "PairedDelta":
    """Back from `to_json`'s object (or a PairedDelta). A report written before the interval (a
    list [mean, std, ahead, paired]) is refused: rebuild it from its runs."""
    if isinstance(value, PairedDelta):
      return value
    if not isinstance(value, dict):
      raise ValueError(f"a paired Δ without its per-seed values ({value!r}): rebuild the report "
                       "with experiments.report.run_tables or "
                       "python -m experiments.studies.regenerate_reports")
    nan = float("nan")
    return cls(**{k: (nan if value[k] is None else tuple(value[k]) if k == "deltas" else value[k])
                  for k in cls._fields})


def paired_delta(method_by_seed: Mapping[Hashable, float],
                 reference_by_seed: Mapping[Hashable, float]) -> PairedDelta:
  """Δ_s = method[s] − reference[s] for the seeds s in both mappings (in sorted order), and their
  `PairedDelta` statistics. No seed in common is an error."""
  seeds = sorted(set(method_by_seed) & set(reference_by_seed))
  if not seeds:
    raise ValueError(f"paired comparison without a common seed: {sorted(method_by_seed)} vs "
                     f"{sorted(reference_by_seed)}")
  return PairedDelta.of([float(method_by_seed[s]) - float(reference_by_seed[s]) for s in seeds])


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
  "n/a" for an undefined mean (an empty group); the mean alone for a single seed's undefined std
  (the table's header says "one seed" once, `spread`)."""
  if mean is None or np.isnan(mean):
    return NOT_AVAILABLE
  mean_fmt = ("+" if signed else "") + fmt
  if std is None or np.isnan(std):
    return format(scale * mean, mean_fmt)
  return f"{format(scale * mean, mean_fmt)} ± {format(scale * std, std_fmt or fmt)}"


def percent_cell(pair, digits: int = 1) -> str:
  """A (mean, std) pair of fractions as "mean ± std" in percent with `digits` decimals."""
  mean, std = pair[0], pair[1]
  return cell(mean, std, scale=100.0, fmt=f".{digits}f")


def _bound_text(value: float, digits: int) -> str:
  """An interval bound with `digits` decimals, or as many more (up to 3) as it takes for a bound
  that is not 0 to print as not 0: whether an interval excludes 0 shows in its text ("+0.04",
  never "+0.0", for a lower bound just above 0)."""
  for more in range(4):
    text = format(value, f"+.{digits + more}f")
    if value == 0 or float(text) != 0:
      return text
  return text


def interval_text(delta: PairedDelta, *, scale: float = 100.0, digits: int = 1) -> str:
  """The 95 % t-interval of a paired Δ as "[−0.3, +3.5]" (scale 100: fractions → points); a bound
  that rounds to 0 without being 0 gets the decimals that show its sign (`_bound_text`)."""
  return f"[{_bound_text(scale * delta.low, digits)}, {_bound_text(scale * delta.high, digits)}]"


def delta_cell(delta, *, scale: float = 100.0, digits: int = 1) -> str:
  """A paired Δ (`PairedDelta` or its JSON) as "+1.6 [−0.3, +3.5] (3/3)": the mean Δ, its 95 %
  t-interval and seeds ahead / seeds paired; one seed: "+1.6" alone (scale 100: fractions →
  points)."""
  delta = PairedDelta.from_json(delta)
  if delta.mean is None or np.isnan(delta.mean):
    return NOT_AVAILABLE
  text = format(scale * delta.mean, f"+.{digits}f")
  if delta.paired < 2:
    return text
  return f"{text} {interval_text(delta, scale=scale, digits=digits)} ({delta.ahead}/{delta.paired})"


def error_bars(std) -> np.ndarray | None:
  """Error bars for a plot from sample stds: None when no std is defined (a single seed)."""
  std = np.asarray(std, np.float64)
  return None if std.size == 0 or np.all(np.isnan(std)) else np.nan_to_num(std)
