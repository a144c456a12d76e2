"""Float64 NumPy references of ETF-DR, written as explicit loops from ../shared/specs/PIPELINES.md
§2 ('ETF-DR'). Independent of the library: the QR is modified Gram–Schmidt (diag(R) > 0), the
gradient is a central finite difference of the loss with the norms frozen."""

from __future__ import annotations

import math

import numpy as np


def etf_classifier(num_classes, dim, seed):
  """M [d, K] = √(K/(K−1))·P(I − 11ᵀ/K), P the Q of A = PR (Gram–Schmidt), A iid U[0, 1)."""
  draws = np.random.default_rng(seed).random((dim, num_classes))
  basis = []
  for k in range(num_classes):
    v = [float(draws[j, k]) for j in range(dim)]
    for q in basis:  # modified Gram–Schmidt: project out against the updated v
      dot = sum(q[j] * v[j] for j in range(dim))
      v = [v[j] - dot * q[j] for j in range(dim)]
    norm = math.sqrt(sum(x * x for x in v))
    basis.append([x / norm for x in v])
  scale = math.sqrt(num_classes / (num_classes - 1))
  etf = np.zeros((dim, num_classes))
  for j in range(dim):
    for k in range(num_classes):
      centred = sum(basis[c][j] * ((1.0 if c == k else 0.0) - 1.0 / num_classes)
                    for c in range(num_classes))
      etf[j, k] = scale * centred
  return etf


def given_ew(labels, num_classes):
  """E [K]: √(B/(C_b·n_c)) for a class in the batch, 1 otherwise (labels: the real rows only)."""
  counts = [0] * num_classes
  for y in labels:
    counts[int(y)] += 1
  batch = len(labels)
  present = sum(1 for n in counts if n > 0)
  return np.array([math.sqrt(batch / (present * n)) if n > 0 else 1.0 for n in counts])


def _example_loss(h, w, h_norm, w_norm):
  """½(hᵀw − ‖w‖‖h‖)²/‖h‖ with the two norms given (frozen)."""
  dot = sum(float(h[j]) * float(w[j]) for j in range(len(h)))
  return 0.5 * (dot - w_norm * h_norm) ** 2 / h_norm


def _norm(x):
  return math.sqrt(sum(float(v) ** 2 for v in x))


def dot_regression(features, labels, classifier, class_scale=None):
  """(mean loss, per-example ℓ [B]) on the real rows; w_i = E_{y_i}·classifier[:, y_i]."""
  features = np.asarray(features, np.float64)
  classifier = np.asarray(classifier, np.float64)
  batch, dim = features.shape
  per_example = np.zeros(batch)
  for i in range(batch):
    y = int(labels[i])
    scale = 1.0 if class_scale is None else float(class_scale[y])
    w = [scale * classifier[j, y] for j in range(dim)]
    per_example[i] = _example_loss(features[i], w, max(_norm(features[i]), 1e-8), _norm(w))
  return (sum(per_example) / batch if batch else 0.0), per_example


def dot_regression_grad(features, labels, classifier, class_scale=None, step=1e-6):
  """∂(mean loss)/∂features [B, d] with ‖h_i‖, ‖w_i‖ held at their values (central differences)."""
  features = np.asarray(features, np.float64)
  classifier = np.asarray(classifier, np.float64)
  batch, dim = features.shape
  grad = np.zeros((batch, dim))
  for i in range(batch):
    y = int(labels[i])
    scale = 1.0 if class_scale is None else float(class_scale[y])
    w = [scale * classifier[j, y] for j in range(dim)]
    h_norm, w_norm = max(_norm(features[i]), 1e-8), _norm(w)
    for j in range(dim):
      up, down = features[i].copy(), features[i].copy()
      up[j] += step
      down[j] -= step
      grad[i, j] = (_example_loss(up, w, h_norm, w_norm)
                    - _example_loss(down, w, h_norm, w_norm)) / (2 * step) / batch
  return grad


def mixup_dot_regression(features, labels, labels_b, lam, classifier, class_scale=None):
  """λ·DR(h, y) + (1 − λ)·DR(h, y_π) with the same E in both terms."""
  loss_a, _ = dot_regression(features, labels, classifier, class_scale)
  loss_b, _ = dot_regression(features, labels_b, classifier, class_scale)
  return lam * loss_a + (1 - lam) * loss_b


def class_balanced_cosine_loss(features, labels, classifier):
  """(1/C_b) Σ_c mean_{i: y_i = c} ½(1 − cos_i)², cos_i = cos(h_i, m_{y_i}): the spec's identity."""
  features = np.asarray(features, np.float64)
  classifier = np.asarray(classifier, np.float64)
  members = {}
  for i, y in enumerate(labels):
    h, m = features[i], classifier[:, int(y)]
    cos = sum(h[j] * m[j] for j in range(len(h))) / (_norm(h) * _norm(m))
    members.setdefault(int(y), []).append(0.5 * (1.0 - cos) ** 2)
  return sum(sum(v) / len(v) for v in members.values()) / len(members)
