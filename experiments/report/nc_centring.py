"""The two centrings of the Neural-Collapse metrics in a report, with the floors of the sample one.

NC1–NC3 centre the class means on a global mean μ_G (`reweight_jax.nc_metrics`): the sample mean
(Papyan et al., PNAS 2020, arXiv 2008.08186; the runs' `neural_collapse`) or the mean of the class
means (`centring='class_balanced'`; the runs' `neural_collapse_balanced`). On long-tailed data the
sample mean sits towards the head classes, so even a perfect collapse scores above zero: the class
means at the vertices of a simplex ETF (centred on the mean of the class means) give NC2 > 0, and a
classifier equal to those vertices NC3 > 0. Those values are the convention's floor at the training
set's class counts (`simplex_floors`; on CIFAR-10-LT at IF 100, NC2 0.648 and NC3 0.151), and a
report states them beside the metrics. Under the class-balanced centring the floor is 0 at any
counts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from experiments.report import seed_stats


def simplex_floors(class_counts: Sequence[int]) -> tuple[float, float]:
  """(NC2, NC3) of a perfect collapse under the sample centring, in float64: class means at the K
  vertices of a simplex ETF, v_c = e_c − 1/K (in R^K), a classifier W = V, and
  μ_G = Σ_c n_c v_c / N. NC2 = ‖G/‖G‖_F − (I − 11ᵀ/K)/√(K−1)‖_F for G = M Mᵀ, M = V − μ_G;
  NC3 = ‖W/‖W‖_F − M/‖M‖_F‖_F². Classes with no examples are left out (as in the metrics)."""
  counts = np.asarray(class_counts, np.float64)
  counts = counts[counts > 0]
  k = counts.shape[0]
  if k < 2:
    return float("nan"), float("nan")
  vertices = np.eye(k) - 1.0 / k
  centred = vertices - counts @ vertices / counts.sum()
  gram = centred @ centred.T
  target = (np.eye(k) - 1.0 / k) / np.sqrt(k - 1)
  nc2 = float(np.linalg.norm(gram / np.linalg.norm(gram) - target))
  nc3 = float(np.linalg.norm(vertices / np.linalg.norm(vertices)
                             - centred / np.linalg.norm(centred)) ** 2)
  return nc2, nc3


def _balanced_spread(table: dict[str, dict], recorded: Sequence[str]) -> str:
  """Over how many seeds the class-balanced values are taken, and which seeds where some of a
  method's runs did not record them (runs from before they were recorded)."""
  counts = [len(table[m].get("neural_collapse_balanced_seeds", table[m]["seeds"])) for m in recorded]
  text = seed_stats.spread(counts)
  partial = [m for m in recorded if "neural_collapse_balanced_seeds" in table[m]
             and len(table[m]["neural_collapse_balanced_seeds"]) < len(table[m]["seeds"])]
  if partial:
    seeds = sorted({s for m in partial for s in table[m]["neural_collapse_balanced_seeds"]})
    text += (f"; only the runs of seed{'s' if len(seeds) > 1 else ''} "
             f"{', '.join(str(s) for s in seeds)} recorded them")
  return text


def centring_markdown(table: dict[str, dict], class_counts: Sequence[int]) -> str:
  """The report's note on the centrings (with the sample one's floors at `class_counts`), and the
  class-balanced NC1–NC3 of the methods whose runs recorded them; "" at equal class counts."""
  counts = np.asarray(class_counts)
  if np.all(counts[counts > 0] == counts.max()):
    return ""  # equal counts: the two centrings coincide, and the floor is 0
  nc2_floor, nc3_floor = simplex_floors(class_counts)
  methods = [m for m in table if not m.startswith("_")]
  recorded = [m for m in methods if "neural_collapse_balanced" in table[m]]
  lines = ["NC1–NC3 above centre the class means on the training set's sample mean (Papyan et al.). "
           f"At these class counts a perfect collapse scores NC2 = {nc2_floor:.3f} and NC3 = "
           f"{nc3_floor:.3f} under it (an exact simplex ETF of the class means, a classifier "
           "aligned with it): the convention's floor. Centred on the mean of the class means "
           "(class-balanced), that floor is 0 at any counts"
           + (f"; those values ({_balanced_spread(table, recorded)}):"
              if recorded else "; these runs did not record them.")]
  if recorded:
    lines.append("")
    rows = [[m] + [seed_stats.cell(*table[m]["neural_collapse_balanced"][k], fmt=".3g",
                                  std_fmt=".2g") for k in ("nc1", "nc2", "nc3")] for m in recorded]
    lines += seed_stats.markdown_table(["method", "NC1 (class-balanced)", "NC2 (class-balanced)",
                                       "NC3 (class-balanced)"], rows)
  return "\n".join(lines) + "\n"
