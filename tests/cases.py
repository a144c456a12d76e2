"""Random and adversarial label/feature cases shared by the numerics tests."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import mr2_jax

# (name, batch, num_classes, dim, label pattern)
CASES = (
    ("random", 24, 5, 7, "random"),
    ("k_greater_than_b", 6, 13, 4, "random"),
    ("absent_classes", 20, 8, 3, "absent"),
    ("one_sample_classes", 9, 12, 5, "singletons"),
    ("one_class_batch", 10, 4, 6, "one_class"),
    ("large_k_small_b", 8, 300, 3, "random"),
)


def make_labels(rng: np.random.Generator, batch: int, num_classes: int, pattern: str) -> np.ndarray:
  if pattern == "random":
    labels = rng.integers(0, num_classes, batch)
  elif pattern == "absent":
    labels = rng.choice(np.arange(0, num_classes, 2), batch)  # odd classes absent
  elif pattern == "singletons":
    labels = rng.permutation(num_classes)[:batch]  # every class at most once
  elif pattern == "one_class":
    labels = np.full(batch, num_classes - 1)
  else:
    raise ValueError(pattern)
  return labels.astype(np.int32)


def make_case(seed: int, batch: int, num_classes: int, dim: int, pattern: str, scale: float = 1.0):
  rng = np.random.default_rng(seed)
  labels = make_labels(rng, batch, num_classes, pattern)
  features = (scale * (rng.normal(size=(batch, dim)) + rng.normal(size=(num_classes, dim))[labels]))
  logits = rng.normal(size=(batch, num_classes)) * 3.0
  return features.astype(np.float32), labels, logits.astype(np.float32)


def random_stats(rng: np.random.Generator, num_classes: int, seen_fraction: float = 0.6):
  seen = rng.random(num_classes) < seen_fraction
  a = np.where(seen, rng.gamma(2.0, 1.0, num_classes), 0.0)
  v = np.where(seen, rng.gamma(2.0, 1.0, num_classes), 0.0)
  return a.astype(np.float32), v.astype(np.float32), seen


def class_stats(a, v, seen) -> mr2_jax.ClassStats:
  """ClassStats from NumPy arrays A [K], V [K], seen [K] (float32)."""
  return mr2_jax.ClassStats(sq_mean_norm=jnp.asarray(a, jnp.float32),
                            mean_sq_deviation=jnp.asarray(v, jnp.float32), seen=jnp.asarray(seen))
