"""GLMC (Du et al., CVPR 2023; PIPELINES spec §3): global and local mixture consistency on
re-balanced paired batches. Each row's partner is drawn with probability ∝ n_y^(−r); the step mixes
the first views globally, x_g = λx + (1 − λ)x_b, and the second locally, x_l = CutMix(x, x_b);
the network (`GLMCModel`) runs the two mixtures as two passes, and the loss is
L = α_e L_bal + (1 − α_e) L_reb + w_con L_con, α_e = 1 − (e/E)². With the inverse reweighting its
ŵ replaces the class weights v of L_reb (§4)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

import reweight_jax
from experiments.common.errors import INF
from experiments.data.batches import PairDraw
from experiments.methods.batch_means import global_mean
from experiments.methods.method import NON_NEGATIVE
from experiments.methods.method import ConfigTree
from experiments.methods.method import Method
from experiments.methods.method import Mix
from experiments.methods.method import PerExample
from experiments.methods.method import Recipe
from experiments.models import Outputs

# Re-balanced sampling exponent r (P(row) ∝ n_y^(−r)), the class-weight exponent ℓw of
# v_c ∝ n_c^(−ℓw), the consistency weight w_con, the projector width.
TREE = ConfigTree(lambda: dict(r=0.0, weight_exponent=1.2, w_con=1.0, projection_dim=128),
                  ranges=(("r", *NON_NEGATIVE), ("weight_exponent", *NON_NEGATIVE),
                          ("w_con", *NON_NEGATIVE), ("projection_dim", (1, True), (INF, False))))


class GLMCModel(nn.Module):
  """GLMC's network: the base model, whose head is fc_cb (the re-balanced head, used for
  inference), plus the instance-balanced head 'fc', the projector 'projector' (Linear d → 128) and
  the predictor 'predictor' (Linear 128 → 128) on its features. In training the input is the two
  mixtures [x_g; x_l] (2B rows, `glmc_mix`) and runs as two passes, each with its own BatchNorm
  batch statistics (the running averages updated by both, in order): the per-row outputs
  'logits_fc', 'projection', 'prediction'."""
  base: nn.Module
  num_classes: int
  projection_dim: int = 128

  def setup(self):
    nn.share_scope(self, self.base)
    self.fc = nn.Dense(self.num_classes)
    self.projector = nn.Dense(self.projection_dim)
    self.predictor = nn.Dense(self.projection_dim)

  def __call__(self, x: jax.Array, train: bool):
    if not (train or self.is_initializing()):
      return self.base(x, train=False)
    passes = [self.base(half, train=train) for half in (jnp.split(x, 2) if train else [x])]
    logits = jnp.concatenate([p[0] for p in passes])
    features = jnp.concatenate([p[1] for p in passes])
    projection = self.projector(features)
    extras = {"logits_fc": self.fc(features), "projection": projection,
              "prediction": self.predictor(projection)}
    return Outputs(logits, features, extras) if train else (logits, features)


def glmc_model(gl, base):
  """GLMC's fc head, projection and prediction MLPs beside the class-balanced head fc_cb."""
  return GLMCModel(base, base.num_classes, projection_dim=gl.projection_dim)


def glmc_pair(gl, train):
  """GLMC's re-balanced partners: each row's partner drawn with probability ∝ n_c^(−r) per class,
  λ ~ Beta(1, 1) (the release's --beta is dead) and one CutMix box per step."""
  r = gl.r

  def draw(rng, global_rows, height, width):
    rows = reweight_jax.baselines.glmc_rebalanced_indices(train.labels, train.class_counts, r,
                                                          len(global_rows), rng)
    lam = float(rng.beta(1.0, 1.0))
    return PairDraw(rows, lam, reweight_jax.baselines.cutmix_box(lam, height, width, rng))
  return draw


def glmc_mix(batch):
  """GLMC's two mixtures of a paired batch: each row i with its re-balanced partner, one λ and one
  CutMix box per step — the global mixture x_g = λx¹ + (1 − λ)x¹_b of the first views and the
  local x_l = CutMix(x², x²_b) of the second. Returns the [B, 2, ...] views (x_g, x_l) and the
  `Mix` (partner labels, λ)."""
  images, partners = batch["image"], batch["image_b"]
  lam, box = batch["lam"][0], batch["box"][0]
  mixed_global = reweight_jax.baselines.mix_images(images[:, 0], partners[:, 0], lam)
  mixed_local = reweight_jax.baselines.cutmix(images[:, 1], partners[:, 1], box)
  return jnp.stack([mixed_global, mixed_local], axis=1), Mix(batch["label_b"], lam)


def glmc_terms(gl, logits, labels, info):
  """(GLMCAux of this device's shares, α_e) of a paired batch's two passes [x_g; x_l]: fc_cb is
  the model's head (logits); fc, the projections and predictions come from `GLMCModel`;
  v_c ∝ n_c^(−ℓw) from the training counts, α_e = 1 − (e/E)²."""
  if info.recipe.mix is None:
    raise ValueError("the 'glmc' losses need paired batches (StepInfo.recipe.mix): train them "
                     "with the trainer, which draws them as GLMC's recipe says")
  labels_b, lam = info.recipe.mix
  half = labels.shape[0] // 2
  fc, projection, prediction = (info.recipe.output(key, "glmc")
                                for key in ("logits_fc", "projection", "prediction"))
  alpha = reweight_jax.baselines.glmc_alpha(info.epoch, gl.num_epochs)
  _, aux = reweight_jax.baselines.glmc_loss(
      fc[:half], fc[half:], logits[:half], logits[half:], prediction[:half], projection[:half],
      prediction[half:], projection[half:], labels[:half], labels_b[:half], lam=lam,
      class_weights=reweight_jax.baselines.glmc_class_weights(info.class_counts,
                                                              gl.weight_exponent),
      alpha=alpha, w_con=gl.w_con, axis_name=info.axis_name)
  return aux, alpha


def _metrics(aux, axis_name, terms=("balanced", "rebalanced", "consistency")):
  return {f"glmc_{t}": global_mean(getattr(aux, t), axis_name) for t in terms}


def glmc(gl, logits, features, labels, state, info):
  """L = α_e L_bal + (1 − α_e) L_reb + w_con L_con."""
  del features
  aux, alpha = glmc_terms(gl, logits, labels, info)
  loss = (alpha * aux.balanced + (1 - alpha) * aux.rebalanced + gl.w_con * aux.consistency)
  return loss, state, _metrics(aux, info.axis_name)


def per_example_glmc(gl, logits, features, labels, state, info):
  """fc_cb's unweighted per-label CE pooled over both passes (the rows L_reb weighs), the loss
  α_e L_bal + (1 − α_e)·2·(their weighted mean) + w_con L_con: L_reb, the sum of the two passes'
  means, is 2× the mixed-label loss of the 2B rows. L_bal and L_con are unchanged."""
  del features
  aux, alpha = glmc_terms(gl, logits, labels, info)
  mix = info.recipe.mix
  w_con = gl.w_con
  return PerExample(
      reweight_jax.cross_entropy_loss(logits, labels),
      reweight_jax.cross_entropy_loss(logits, mix.labels_b), state,
      _metrics(aux, info.axis_name, ("balanced", "consistency")),
      total=lambda mean: alpha * aux.balanced + (1 - alpha) * 2 * mean + w_con * aux.consistency)


# α_e = 1 − (e/E)² reads the run's epochs E.
METHODS = (Method("glmc", glmc, trees={"glmc": TREE}, reads=("glmc",), shared=("num_epochs",),
                  reads_mix=True,
                  recipe=Recipe(model=glmc_model, views=2, pair=glmc_pair, mix=glmc_mix),
                  per_example=per_example_glmc),)
