"""Float64 NumPy references for SupCon, written as explicit loops from the spec
(../shared/specs/COMPARISONS.md, 'SupCon'). Independent of the JAX implementation: one Python loop
per anchor, no vectorised trick.

Shapes: z [N, D] view embeddings (views stacked), labels int [N] (repeated per view), where bool [N]
(optional; False rows are dropped before anything else).
"""

from __future__ import annotations

import math

import numpy as np


def _dot(u, v):
  return sum(float(a) * float(b) for a, b in zip(u, v))


def supcon_per_anchor(z, labels, temperature=0.1, base_temperature=0.07, where=None):
  """ℓ_i for every row (0 for masked rows), and the mean L over the kept rows.

      ℓ_i = −(τ/τ_b)·(1/|P(i)|)·Σ_{p∈P(i)} log[exp(z_i·z_p/τ) / Σ_{a∈A(i)} exp(z_i·z_a/τ)]

  A(i): every other kept row; P(i): those with the label of i. No positive: ℓ_i = 0, still counted.
  """
  z = np.asarray(z, np.float64)
  n = len(labels)
  keep = [True] * n if where is None else [bool(w) for w in where]
  kept = [i for i in range(n) if keep[i]]
  losses = np.zeros(n)
  for i in kept:
    others = [a for a in kept if a != i]
    positives = [p for p in others if labels[p] == labels[i]]
    if not positives:
      continue
    sims = {a: _dot(z[i], z[a]) / temperature for a in others}
    top = max(sims.values())
    log_denominator = top + math.log(sum(math.exp(sims[a] - top) for a in others))
    total = 0.0
    for p in positives:
      total += sims[p] - log_denominator
    losses[i] = -(temperature / base_temperature) * total / len(positives)
  mean = sum(losses[i] for i in kept) / max(len(kept), 1)
  return losses, mean


def supcon_mean(z, labels, temperature=0.1, base_temperature=0.07, where=None):
  return supcon_per_anchor(z, labels, temperature, base_temperature, where)[1]


def numerical_gradient(fn, z, step=1e-6):
  """Central differences of a scalar fn of z [N, D], entry by entry, in float64."""
  z = np.asarray(z, np.float64)
  grad = np.zeros_like(z)
  for r in range(z.shape[0]):
    for c in range(z.shape[1]):
      plus, minus = z.copy(), z.copy()
      plus[r, c] += step
      minus[r, c] -= step
      grad[r, c] = (fn(plus) - fn(minus)) / (2 * step)
  return grad


def nt_xent(z, partner, temperature=0.1, base_temperature=0.07):
  """SimCLR's NT-Xent, times τ/τ_b: row i's one positive is row partner[i].

      ℓ_i = −(τ/τ_b)·log[exp(s_{i,j}/τ) / Σ_{k≠i} exp(s_{ik}/τ)],  j = partner[i],  mean over i.
  """
  z = np.asarray(z, np.float64)
  n = z.shape[0]
  total = 0.0
  for i in range(n):
    numerator = math.exp(_dot(z[i], z[partner[i]]) / temperature)
    denominator = 0.0
    for k in range(n):
      if k != i:
        denominator += math.exp(_dot(z[i], z[k]) / temperature)
    total += -(temperature / base_temperature) * math.log(numerator / denominator)
  return total / n
