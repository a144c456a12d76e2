"""Float64 NumPy references for JTT and LfF, explicit loops, from ../shared/specs/COMPARISONS.md."""

from __future__ import annotations

import math

import numpy as np


def jtt_error_set(logits, labels, where=None):
  """E_i = 1[first index of the largest logit ≠ y_i], False for padding rows."""
  errors = np.zeros(len(labels), bool)
  for i in range(len(labels)):
    if where is not None and not where[i]:
      continue
    best = 0
    for k in range(1, len(logits[i])):
      if logits[i][k] > logits[i][best]:
        best = k
    errors[i] = best != int(labels[i])
  return errors


def _log_softmax_at(z, y):
  z = [float(v) for v in z]
  m = max(z)
  return (z[y] - m) - math.log(sum(math.exp(v - m) for v in z))


def _softmax(z):
  z = [float(v) for v in z]
  m = max(z)
  e = [math.exp(v - m) for v in z]
  return [v / sum(e) for v in e]


def gce(logits, labels, q):
  """Per-example q·p_y^q·CE and its logit gradient q·p_y^q·(softmax − onehot)."""
  batch, num_classes = np.shape(logits)
  values, grads = np.zeros(batch), np.zeros((batch, num_classes))
  for i in range(batch):
    y = int(labels[i])
    log_p = _log_softmax_at(logits[i], y)
    weight = q * math.exp(q * log_p)
    values[i] = weight * -log_p
    p = _softmax(logits[i])
    for k in range(num_classes):
      grads[i][k] = weight * (p[k] - (1.0 if k == y else 0.0))
  return values, grads


class LfFReference:
  """LfF's EMAs over N examples and one step at a time (`alinlab/LfF` `train.py`, `util.py`)."""

  def __init__(self, dataset_labels, num_classes, q=0.7, alpha=0.7):
    self.dataset_labels = [int(y) for y in dataset_labels]
    self.num_classes = num_classes
    self.q, self.alpha = q, alpha
    n = len(self.dataset_labels)
    self.ema_biased, self.ema_debiased, self.seen = np.zeros(n), np.zeros(n), np.zeros(n, bool)

  def _class_max(self, ema, c):
    best = 0.0
    for j in range(len(ema)):
      if self.dataset_labels[j] == c and ema[j] > best:
        best = ema[j]
    return best

  def step(self, logits_biased, logits_debiased, labels, indices):
    """(loss, weights, grad wrt logits_biased, grad wrt logits_debiased) of one batch; updates the
    state. Repeated indices: each reads the old EMA, the later row's write stands."""
    batch, num_classes = np.shape(logits_biased)
    ce_b = [-_log_softmax_at(logits_biased[i], int(labels[i])) for i in range(batch)]
    ce_d = [-_log_softmax_at(logits_debiased[i], int(labels[i])) for i in range(batch)]
    old_b, old_d, old_seen = self.ema_biased.copy(), self.ema_debiased.copy(), self.seen.copy()
    for i in range(batch):
      j = int(indices[i])
      if old_seen[j]:
        self.ema_biased[j] = self.alpha * old_b[j] + (1 - self.alpha) * ce_b[i]
        self.ema_debiased[j] = self.alpha * old_d[j] + (1 - self.alpha) * ce_d[i]
      else:
        self.ema_biased[j] = ce_b[i]
        self.ema_debiased[j] = ce_d[i]
      self.seen[j] = True
    weights = np.zeros(batch)
    for i in range(batch):
      j, y = int(indices[i]), int(labels[i])
      max_b, max_d = self._class_max(self.ema_biased, y), self._class_max(self.ema_debiased, y)
      norm_b = self.ema_biased[j] / max_b if max_b > 0 else 0.0
      norm_d = self.ema_debiased[j] / max_d if max_d > 0 else 0.0
      weights[i] = norm_b / (norm_b + norm_d + 1e-8)
    gce_values, gce_grads = gce(logits_biased, labels, self.q)
    loss = sum(gce_values) / batch + sum(weights[i] * ce_d[i] for i in range(batch)) / batch
    grad_b = gce_grads / batch
    grad_d = np.zeros((batch, num_classes))
    for i in range(batch):
      p = _softmax(logits_debiased[i])
      for k in range(num_classes):
        grad_d[i][k] = weights[i] * (p[k] - (1.0 if k == int(labels[i]) else 0.0)) / batch
    return loss, weights, grad_b, grad_d
