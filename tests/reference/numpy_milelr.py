"""float64 NumPy transcription of MiLeLR (PIPELINES spec, §1 'MiLeLR'), written from the spec."""

import math

import numpy as np


def order(counts):
  counts = np.asarray(counts, np.float64)
  p = counts / counts.sum()
  h = -sum(pc * math.log(pc) for pc in p if pc > 0) / math.log(len(counts))
  return 0.25 + 0.75 * h


def ml_neg(z, a):
  """E_a(−z) as coded: z < 1: max(0, Σ_{k<32} (−z)^k/Γ(ak+1)); z ≥ 1: max(0, 1/(z·Γ(1−a)))."""
  if z < 1:
    return max(0.0, sum((-z) ** k / math.gamma(a * k + 1) for k in range(32)))
  return max(0.0, 1.0 / (z * math.gamma(1 - a)))


def factor(k, counts, batch, epochs=200, warmup_epochs=10, switch_epoch=160, eps=1e-6,
           steps_per_epoch=None):
  a = order(counts)
  se = math.ceil(sum(counts) / batch) if steps_per_epoch is None else steps_per_epoch
  u, t_total = warmup_epochs * se, epochs * se - warmup_epochs * se
  s = None if switch_epoch is None else switch_epoch * se - u
  if k < u:
    return (k + 1) / u
  t = k - u
  if s is None or s <= 0 or s >= t_total:
    sn = min(t / t_total, 1 - eps)
    return ml_neg(sn / (1 - sn), a)
  if t < s:
    return ml_neg((1 - eps) * t / s, a)
  s2 = min((t - s) / (t_total - s), 1 - eps)
  z2 = 1 + s2 / (1 - s2 + eps)
  return 1 / (z2 * math.gamma(1 - a))
