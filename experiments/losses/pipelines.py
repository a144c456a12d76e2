"""The long-tail pipelines (PIPELINES spec): ETF-DR (dot regression onto a fixed ETF classifier) and
GLMC (global and local mixture consistency on re-balanced paired batches), each alone and with the
inverse reweighting (§4)."""

from __future__ import annotations

import reweight_jax
from experiments.common.errors import ConfigError
from experiments.losses.batch_means import _global_mean
from experiments.losses.entry import recipe_mix
from experiments.losses.entry import recipe_output
from experiments.losses.reweighting_losses import _reweighted


def _etf_dr(config, logits, features, labels, state, info):
  """ETF-DR's dot regression on the head's normalised features h (`config.head='etf'`) against the
  fixed ETF M (from the model, `models.WithETFClassifier`), E from GivenEw (of the unmixed labels),
  and of a mixup batch λ·DR(h, y) + (1 − λ)·DR(h, y_π)."""
  del logits
  classifier = recipe_output(info, "etf_classifier", "etf_dr")
  scale = (reweight_jax.baselines.given_ew(labels, classifier.shape[1], axis_name=info.axis_name)
           if config.etf_dr.given_ew else None)
  mix = recipe_mix(info)
  if mix is None:
    loss, _ = reweight_jax.baselines.dot_regression_loss(features, labels, classifier, class_scale=scale,
                                               axis_name=info.axis_name)
  else:
    labels_b, lam = mix
    loss, _ = reweight_jax.baselines.mixup_dot_regression_loss(features, labels, labels_b, lam, classifier,
                                                     scale, axis_name=info.axis_name)
  return loss, state, {}


def _etf_dr_inverse_reweight(config, logits, features, labels, state, info):
  """ETF-DR with the inverse reweighting (PIPELINES spec §4): ŵ weights the per-label DR losses
  with E ≡ 1 (GivenEw already balances classes), of a mixup batch against (y, y_π)."""
  del logits
  classifier = recipe_output(info, "etf_classifier", "etf_dr+inverse_reweight")
  mix = recipe_mix(info)
  per_label = [reweight_jax.baselines.dot_regression_loss(features, y, classifier,
                                                axis_name=info.axis_name)[1]
               for y in ([labels] if mix is None else [labels, mix[0]])]
  return _reweighted(config, per_label[0], labels, state, info, mix, per_label[-1])


def _check_etf_head(config):
  if config.head != "etf":
    raise ConfigError(f"config.head: the 'etf_dr' loss regresses onto the fixed ETF classifier: "
                      f"set config.head='etf' (got {config.head!r})")


def _glmc_terms(config, logits, labels, info):
  """(GLMCAux of this device's shares, α_e) of a paired batch's two passes [x_g; x_l]: fc_cb is the
  model's head (logits); fc, the projections and predictions come from `models.GLMCModel`;
  v_c ∝ n_c^(−ℓw) from the training counts, α_e = 1 − (e/E)²."""
  if recipe_mix(info) is None:
    raise ValueError("the 'glmc' losses need paired batches (StepInfo.recipe['mix']): train them "
                     "with the trainer, which draws them as GLMC's recipe says "
                     "(`experiments.train.recipes`)")
  gl = config.glmc
  labels_b, lam = recipe_mix(info)
  half = labels.shape[0] // 2
  fc, projection, prediction = (recipe_output(info, key, "glmc")
                                for key in ("logits_fc", "projection", "prediction"))
  alpha = reweight_jax.baselines.glmc_alpha(info.epoch, config.num_epochs)
  _, aux = reweight_jax.baselines.glmc_loss(
      fc[:half], fc[half:], logits[:half], logits[half:], prediction[:half], projection[:half],
      prediction[half:], projection[half:], labels[:half], labels_b[:half], lam=lam,
      class_weights=reweight_jax.baselines.glmc_class_weights(info.class_counts,
                                                              gl.weight_exponent),
      alpha=alpha, w_con=gl.w_con, axis_name=info.axis_name)
  return aux, alpha


def _glmc_metrics(aux, axis_name, terms=("balanced", "rebalanced", "consistency")):
  return {f"glmc_{t}": _global_mean(getattr(aux, t), axis_name) for t in terms}


def _glmc(config, logits, features, labels, state, info):
  """GLMC (PIPELINES spec §3): L = α_e L_bal + (1 − α_e) L_reb + w_con L_con."""
  del features
  aux, alpha = _glmc_terms(config, logits, labels, info)
  loss = (alpha * aux.balanced + (1 - alpha) * aux.rebalanced
          + config.glmc.w_con * aux.consistency)
  return loss, state, _glmc_metrics(aux, info.axis_name)


def _glmc_inverse_reweight(config, logits, features, labels, state, info):
  """GLMC with the inverse reweighting (PIPELINES spec §4): ŵ replaces v in L_reb, from fc_cb's
  unweighted per-label CE pooled over both passes (one counter update per step); L_bal and L_con
  unchanged. L_reb, the sum of the two passes' means, is 2× the mixed-label loss of the 2B rows."""
  del features
  aux, alpha = _glmc_terms(config, logits, labels, info)
  mix = recipe_mix(info)
  reweighted, state, metrics = _reweighted(
      config, reweight_jax.cross_entropy_loss(logits, labels), labels, state, info, mix,
      reweight_jax.cross_entropy_loss(logits, mix[0]))
  loss = (alpha * aux.balanced + (1 - alpha) * 2 * reweighted
          + config.glmc.w_con * aux.consistency)
  return loss, state, {**_glmc_metrics(aux, info.axis_name, ("balanced", "consistency")),
                       **metrics}
