"""Float64 NumPy references, written as explicit loops from ../shared/specs/COMPARISONS.md."""

from __future__ import annotations

import math

import numpy as np


def group_dro_step(per_example, labels, q, eta, adjustment=None, normalize=False):
  """One class-level Group DRO step: (loss, new_q, g). Loops over classes and examples."""
  num_classes = len(q)
  g = np.zeros(num_classes)
  for c in range(num_classes):
    members = [float(per_example[i]) for i in range(len(labels)) if labels[i] == c]
    g[c] = sum(members) / len(members) if members else 0.0
  adjusted = g.copy()
  if adjustment is not None:
    adjusted = adjusted + np.asarray(adjustment, np.float64)
  if normalize:
    total = sum(adjusted)
    adjusted = adjusted / total if total > 0 else adjusted
  new_q = np.array([float(q[c]) * math.exp(eta * adjusted[c]) for c in range(num_classes)])
  new_q = new_q / sum(new_q)
  loss = sum(new_q[c] * g[c] for c in range(num_classes))
  return loss, new_q, g


def eql_loss(logits, labels, rare, dropped):
  """Per-example softmax EQL and its gradient with respect to the logits (w̃ as in the spec)."""
  logits = np.asarray(logits, np.float64)
  batch, num_classes = logits.shape
  losses, grads = np.zeros(batch), np.zeros((batch, num_classes))
  for i in range(batch):
    y = int(labels[i])
    weights = [1.0 - float(dropped[i][k]) * float(rare[k]) * (0.0 if k == y else 1.0)
               for k in range(num_classes)]
    m = max(logits[i][k] for k in range(num_classes) if weights[k] > 0)
    # w̃ = 0 terms are left out (not 0 · exp(z − m), which overflows for a dropped logit above m)
    total = sum(weights[k] * math.exp(logits[i][k] - m) for k in range(num_classes)
                if weights[k] > 0)
    losses[i] = -logits[i][y] + m + math.log(total)
    for k in range(num_classes):
      kept = weights[k] * math.exp(logits[i][k] - m) / total if weights[k] > 0 else 0.0
      grads[i][k] = kept - (1.0 if k == y else 0.0)
  return losses, grads
