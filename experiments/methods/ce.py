"""Cross-entropy (ERM), the reference every method is compared with; of a mixup batch
λ·CE(z, y) + (1 − λ)·CE(z, y_π)."""

from __future__ import annotations

import reweight_jax
from experiments.methods.batch_means import mean_share
from experiments.methods.method import Method
from experiments.methods.method import PerExample


def cross_entropy(settings, logits, features, labels, state, info):
  """Mean CE; of a mixup batch λ·CE(z, y) + (1 − λ)·CE(z, y_π)."""
  del settings, features
  per_example = reweight_jax.cross_entropy_loss(logits, labels)
  if info.recipe.mix is not None:
    labels_b, lam = info.recipe.mix
    per_example = lam * per_example + (1 - lam) * reweight_jax.cross_entropy_loss(logits, labels_b)
  return mean_share(per_example, info.axis_name), state, {}


def per_example_cross_entropy(settings, logits, features, labels, state, info):
  """CE_i against the labels and, of a mixup batch, against the partner labels."""
  del settings, features
  mix = info.recipe.mix
  losses_b = None if mix is None else reweight_jax.cross_entropy_loss(logits, mix.labels_b)
  return PerExample(reweight_jax.cross_entropy_loss(logits, labels), losses_b, state, {})


METHODS = (Method("ce", cross_entropy, reads_mix=True, per_example=per_example_cross_entropy),)
