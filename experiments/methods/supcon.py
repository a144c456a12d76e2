"""SupCon (Khosla et al., NeurIPS 2020; COMPARISONS spec): the supervised contrastive loss on a
projection head's outputs of two augmented views per example, jointly with CE or alone (the
pre-training stage of the two-stage recipe, `supcon.ce=False`, whose linear stage is `loss=ce`
with `config.frozen_encoder_from`)."""

from __future__ import annotations

import flax.linen as nn
import jax

import reweight_jax
from experiments.common.errors import INF
from experiments.methods.batch_means import global_mean
from experiments.methods.batch_means import mean_share
from experiments.common.errors import ConfigError
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import POSITIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import Recipe
from experiments.models import Outputs
from mr2_jax.linen import SupConProjection

# λ (joint CE + λ·SupCon; ce=False the pre-training stage; λ = 0 with ce=True: the CE term alone
# on every view, SupCon's paired reference on the same views), τ, τ_b, the head's width.
TREE = ConfigTree(lambda: dict(lam=1.0, ce=True, temperature=0.1, base_temperature=0.07,
                               projection_dim=128),
                  ranges=(("lam", *NON_NEGATIVE), ("temperature", *POSITIVE),
                          ("base_temperature", *POSITIVE),
                          ("projection_dim", (1, True), (INF, False))))


class WithProjection(nn.Module):
  """The base model plus SupCon's projection head (`mr2_jax.SupConProjection`, under 'projection')
  on its features: the per-row output 'projection', z [B, `features`] (L2-normalised)."""
  base: nn.Module
  features: int = 128

  def setup(self):
    nn.share_scope(self, self.base)
    self.projection = SupConProjection(self.features)

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not (train or self.is_initializing()):
      return logits, features
    projection = self.projection(features)
    return Outputs(logits, features, {"projection": projection}) if train else (logits, features)


def supcon_model(sc, base):
  """SupCon's projection head g on the features (`WithProjection`)."""
  return WithProjection(base, features=sc.projection_dim)


def supcon(sc, logits, features, labels, state, info):
  """CE + λ·SupCon on the V·B views (joint), or λ·SupCon alone (`supcon.ce=False`, pre-training)."""
  del features
  contrastive, _ = reweight_jax.baselines.supcon_loss(
      info.recipe.output("projection", "supcon"), labels, temperature=sc.temperature,
      base_temperature=sc.base_temperature, axis_name=info.axis_name, num_classes=logits.shape[1])
  loss = sc.lam * contrastive
  if sc.ce:
    loss = loss + mean_share(reweight_jax.cross_entropy_loss(logits, labels), info.axis_name)
  return loss, state, {"supcon_loss": global_mean(contrastive, info.axis_name)}


def check_supcon(config):
  if config.supcon.lam == 0 and not config.supcon.ce:
    raise ConfigError("config.supcon: lam = 0 with ce = False leaves no loss")


METHODS = (Method("supcon", supcon, trees={"supcon": TREE}, reads=("supcon",), check=check_supcon,
                  recipe=Recipe(model=supcon_model, views=2)),)
