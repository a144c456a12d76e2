"""ETF-DR (Yang et al., NeurIPS 2022; PIPELINES spec §2): dot regression of the head's normalised
features h onto a fixed simplex-ETF classifier M (`config.head='etf'`), class scales E from GivenEw
(`etf_dr.given_ew`); of a mixup batch λ·DR(h, y) + (1 − λ)·DR(h, y_π) (ETF-DR's recipe: mixup
α = 1, `config.mixup_alpha`). With the inverse reweighting, ŵ weighs the per-label DR losses with
E ≡ 1 (GivenEw already balances the classes; §4)."""

from __future__ import annotations

import flax.linen as nn
import jax

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import PerExample
from experiments.methods.method import Recipe
from experiments.models import Outputs

# GivenEw class scales (default on).
TREE = ConfigTree(lambda: dict(given_ew=True))


class WithETFClassifier(nn.Module):
  """The base model (head 'etf') with its fixed ETF M as an output the DR loss reads: the
  per-model output 'etf_classifier', M [d, K]."""
  base: nn.Module

  def setup(self):
    nn.share_scope(self, self.base)

  def __call__(self, x: jax.Array, train: bool):
    logits, features = self.base(x, train=train)
    if not train:
      return logits, features
    return Outputs(logits, features,
                   shared={"etf_classifier": self.variables["params"]["head"]["etf"]})


def etf_model(etf, base):
  """The fixed ETF classifier M as an output (`WithETFClassifier`)."""
  del etf
  return WithETFClassifier(base)


def etf_dr(etf, logits, features, labels, state, info):
  """Dot regression on the head's normalised features h against the fixed ETF M, E from GivenEw
  (of the unmixed labels), and of a mixup batch λ·DR(h, y) + (1 − λ)·DR(h, y_π)."""
  del logits
  classifier = info.recipe.output("etf_classifier", "etf_dr")
  scale = (reweight_jax.baselines.given_ew(labels, classifier.shape[1], axis_name=info.axis_name)
           if etf.given_ew else None)
  mix = info.recipe.mix
  if mix is None:
    loss, _ = reweight_jax.baselines.dot_regression_loss(features, labels, classifier,
                                                         class_scale=scale,
                                                         axis_name=info.axis_name)
  else:
    labels_b, lam = mix
    loss, _ = reweight_jax.baselines.mixup_dot_regression_loss(
        features, labels, labels_b, lam, classifier, class_scale=scale, axis_name=info.axis_name)
  return loss, state, {}


def per_example_etf_dr(etf, logits, features, labels, state, info):
  """The per-label DR losses with E ≡ 1, against (y, y_π) of a mixup batch."""
  del etf, logits
  classifier = info.recipe.output("etf_classifier", "etf_dr")
  mix = info.recipe.mix
  per_label = [reweight_jax.baselines.dot_regression_loss(features, y, classifier,
                                                          axis_name=info.axis_name)[1]
               for y in ([labels] if mix is None else [labels, mix.labels_b])]
  return PerExample(per_label[0], None if mix is None else per_label[1], state, {})


def check_etf_head(config):
  if config.head != "etf":
    raise ConfigError(f"config.head: the 'etf_dr' loss regresses onto the fixed ETF classifier: "
                      f"set config.head='etf' (got {config.head!r})")


METHODS = (Method("etf_dr", etf_dr, trees={"etf_dr": TREE}, reads=("etf_dr",),
                  check=check_etf_head, reads_mix=True, recipe=Recipe(model=etf_model),
                  per_example=per_example_etf_dr),)
