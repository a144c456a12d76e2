"""Float64 NumPy reference of FairDRO with classes as groups, written as explicit loops from
../shared/specs/COMPARISONS.md, 'FairDRO, classes as groups'.

Classes without a loss (`present` False) are left out of L̄, the norm and K', and get q*_c = 0.
"""

from __future__ import annotations

import math

import numpy as np


def best_response(class_losses, rho, present=None, clip=False):
  """q*_c = 1/K' + √(2ρ/K')·(L_c − L̄)/‖L − L̄‖ over the K' present classes, 0 elsewhere."""
  num_classes = len(class_losses)
  if present is None:
    present = [True] * num_classes
  members = [c for c in range(num_classes) if present[c]]
  if not members:
    return np.full(num_classes, 1.0 / num_classes)
  k = len(members)
  mean = sum(float(class_losses[c]) for c in members) / k
  norm = math.sqrt(sum((float(class_losses[c]) - mean) ** 2 for c in members))
  constant = all(float(class_losses[c]) == float(class_losses[members[0]]) for c in members)
  q = np.zeros(num_classes)
  for c in members:
    step = 0.0 if constant else math.sqrt(2 * rho / k) * (float(class_losses[c]) - mean) / norm
    q[c] = 1.0 / k + step
  if clip:
    for c in range(num_classes):
      q[c] = max(q[c], 0.0)
    total = sum(q)
    for c in range(num_classes):
      q[c] = q[c] / total
  return q


def step_size(epoch, num_epochs, schedule):
  if schedule == "linear":
    return 1.0 - epoch / num_epochs
  return 0.5 * (1.0 + math.cos(math.pi * epoch / num_epochs))


def update(q, q_star, epoch, num_epochs, schedule):
  alpha = step_size(epoch, num_epochs, schedule)
  return np.array([float(q[c]) + alpha * (float(q_star[c]) - float(q[c])) for c in range(len(q))])


def step_loss(per_example, labels, q, where=None):
  """(Σ_c q_c g_c, g): g_c the mean loss of the (unpadded) batch samples of class c, 0 if absent."""
  num_classes = len(q)
  g = np.zeros(num_classes)
  for c in range(num_classes):
    members = [float(per_example[i]) for i in range(len(labels))
               if labels[i] == c and (where is None or where[i])]
    g[c] = sum(members) / len(members) if members else 0.0
  return sum(float(q[c]) * g[c] for c in range(num_classes)), g
