"""SupCon (COMPARISONS spec): the supervised contrastive loss on a projection head's outputs of two
augmented views per example, jointly with CE or alone (the pre-training stage)."""

from __future__ import annotations

import reweight_jax
from experiments.losses.batch_means import _global_mean
from experiments.losses.batch_means import mean_share
from experiments.losses.entry import recipe_output


def _supcon(config, logits, features, labels, state, info):
  """CE + λ·SupCon on the V·B views (joint), or λ·SupCon alone (`supcon.ce=False`, pre-training)."""
  del features
  sc = config.supcon
  contrastive, _ = reweight_jax.baselines.supcon_loss(
      recipe_output(info, "projection", "supcon"), labels, temperature=sc.temperature,
      base_temperature=sc.base_temperature, axis_name=info.axis_name, num_classes=logits.shape[1])
  loss = sc.lam * contrastive
  if sc.ce:
    loss = loss + mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name)
  return loss, state, {"supcon_loss": _global_mean(contrastive, info.axis_name)}

