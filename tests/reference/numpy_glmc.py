"""Float64 NumPy references of GLMC, written as explicit loops from ../shared/specs/PIPELINES.md §3
('GLMC'). Independent of the library: plain Python arithmetic per row and per class, log-sum-exp by
hand, gradients in closed form (∂ce/∂z = softmax(z)·Σ_k t_k − t; ∂(−cos(p, z))/∂p with z fixed)."""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-8  # the cosine's norm clamp


def rebalanced_probabilities(labels, class_counts, r):
  """P(i) = n_{y_i}^(−r) / Σ_j n_{y_j}^(−r), float64 [N]."""
  weights = [float(class_counts[int(y)]) ** (-r) for y in labels]
  total = sum(weights)
  return np.array([w / total for w in weights])


def class_frequencies(labels, class_counts, r):
  """P(class c) under the re-balanced sampler: Σ_{i: y_i = c} P(i)."""
  probabilities = rebalanced_probabilities(labels, class_counts, r)
  freq = [0.0] * len(class_counts)
  for y, p in zip(labels, probabilities):
    freq[int(y)] += p
  return np.array(freq)


def cutmix_box(lam, height, width, centre_y, centre_x):
  """(y0, y1, x0, x1) for a given centre: half sizes ⌊⌈S·√(1 − λ)⌉/2⌋, clipped to the image."""
  half_h = math.ceil(height * math.sqrt(1 - lam)) // 2
  half_w = math.ceil(width * math.sqrt(1 - lam)) // 2
  return (max(centre_y - half_h, 0), min(centre_y + half_h, height),
          max(centre_x - half_w, 0), min(centre_x + half_w, width))


def cutmix(images_a, images_b, box):
  """images_a with every pixel (y, x) inside the box taken from images_b (loops over pixels)."""
  y0, y1, x0, x1 = box
  out = np.array(images_a, np.float64)
  batch, height, width, _ = out.shape
  for i in range(batch):
    for y in range(height):
      for x in range(width):
        if y0 <= y < y1 and x0 <= x < x1:
          out[i, y, x, :] = images_b[i, y, x, :]
  return out


def mix_images(images_a, images_b, lam):
  return lam * np.asarray(images_a, np.float64) + (1 - lam) * np.asarray(images_b, np.float64)


def _log_softmax(z):
  z = [float(v) for v in z]
  m = max(z)
  log_sum = math.log(sum(math.exp(v - m) for v in z))
  return [(v - m) - log_sum for v in z]


def _softmax(z):
  return [math.exp(v) for v in _log_softmax(z)]


def soft_cross_entropy(logits, targets):
  """−Σ_k t_ik log softmax(z_i)_k per row."""
  out = np.zeros(len(logits))
  for i in range(len(logits)):
    log_p = _log_softmax(logits[i])
    out[i] = -sum(float(targets[i][k]) * log_p[k] for k in range(len(log_p))
                  if float(targets[i][k]) != 0.0)
  return out


def soft_cross_entropy_grad(logits, targets):
  """∂ce_i/∂z_i = softmax(z_i)·Σ_k t_ik − t_i, [B, K]."""
  grad = np.zeros(np.shape(logits))
  for i in range(len(logits)):
    p = _softmax(logits[i])
    total = sum(float(t) for t in targets[i])
    for k in range(len(p)):
      grad[i, k] = p[k] * total - float(targets[i][k])
  return grad


def class_weights(class_counts, exponent):
  """v_c = n_c^(−ℓw) / mean over classes with n > 0; 0 for n_c = 0."""
  raw = [float(n) ** (-exponent) if n > 0 else 0.0 for n in class_counts]
  present = sum(1 for n in class_counts if n > 0)
  mean = sum(raw) / present
  return np.array([v / mean for v in raw])


def mixed_targets(labels_a, labels_b, lam, num_classes, weights=None):
  """λ v_a e_a + (1 − λ) v_b e_b per row (v ≡ 1 without weights)."""
  out = np.zeros((len(labels_a), num_classes))
  for i, (a, b) in enumerate(zip(labels_a, labels_b)):
    v_a = 1.0 if weights is None else float(weights[int(a)])
    v_b = 1.0 if weights is None else float(weights[int(b)])
    out[i, int(a)] += lam * v_a
    out[i, int(b)] += (1 - lam) * v_b
  return out


def _norm(x):
  return math.sqrt(sum(float(v) ** 2 for v in x))


def _cos(p, z):
  return sum(float(a) * float(b) for a, b in zip(p, z)) / (max(_norm(p), EPS) * max(_norm(z), EPS))


def _neg_cos_grad(p, z):
  """∂(−cos(p, z))/∂p with z a constant, for ‖p‖, ‖z‖ > ε: −z/(‖p‖‖z‖) + (p·z)p/(‖p‖³‖z‖)."""
  p_norm, z_norm = _norm(p), _norm(z)
  dot = sum(float(a) * float(b) for a, b in zip(p, z))
  return np.array([-float(zk) / (p_norm * z_norm) + dot * float(pk) / (p_norm ** 3 * z_norm)
                   for pk, zk in zip(p, z)])


def consistency(pred_g, proj_g, pred_l, proj_l):
  """−cos(p_g, z_l) − cos(p_l, z_g) per row."""
  return np.array([-_cos(pred_g[i], proj_l[i]) - _cos(pred_l[i], proj_g[i])
                   for i in range(len(pred_g))])


def consistency_grads(pred_g, proj_g, pred_l, proj_l):
  """(∂/∂pred_g, ∂/∂pred_l) of Σ_i consistency_i with the projections constant, [B, D] each."""
  return (np.array([_neg_cos_grad(pred_g[i], proj_l[i]) for i in range(len(pred_g))]),
          np.array([_neg_cos_grad(pred_l[i], proj_g[i]) for i in range(len(pred_l))]))


def alpha(epoch, num_epochs):
  return 1.0 - (epoch / num_epochs) ** 2


def glmc_loss(logits_fc_g, logits_fc_l, logits_cb_g, logits_cb_l, pred_g, proj_g, pred_l, proj_l,
              labels_a, labels_b, lam, weights, alpha_, w_con):
  """(L, L_bal, L_reb, L_con, gradients) on the real rows; gradients: a dict of [B, ·] arrays
  with respect to the four logits and the two predictions."""
  batch = len(labels_a)
  num_classes = np.shape(logits_fc_g)[1]
  targets = mixed_targets(labels_a, labels_b, lam, num_classes)
  targets_w = mixed_targets(labels_a, labels_b, lam, num_classes, weights)
  balanced = (sum(soft_cross_entropy(logits_fc_g, targets)) / batch
              + sum(soft_cross_entropy(logits_fc_l, targets)) / batch)
  rebalanced = (sum(soft_cross_entropy(logits_cb_g, targets_w)) / batch
                + sum(soft_cross_entropy(logits_cb_l, targets_w)) / batch)
  con = sum(consistency(pred_g, proj_g, pred_l, proj_l)) / batch
  loss = alpha_ * balanced + (1 - alpha_) * rebalanced + w_con * con
  grads = {
      "logits_fc_g": alpha_ / batch * soft_cross_entropy_grad(logits_fc_g, targets),
      "logits_fc_l": alpha_ / batch * soft_cross_entropy_grad(logits_fc_l, targets),
      "logits_cb_g": (1 - alpha_) / batch * soft_cross_entropy_grad(logits_cb_g, targets_w),
      "logits_cb_l": (1 - alpha_) / batch * soft_cross_entropy_grad(logits_cb_l, targets_w),
      "pred_g": np.array([w_con / batch * _neg_cos_grad(pred_g[i], proj_l[i])
                          for i in range(batch)]),
      "pred_l": np.array([w_con / batch * _neg_cos_grad(pred_l[i], proj_g[i])
                          for i in range(batch)]),
  }
  return loss, balanced, rebalanced, con, grads
