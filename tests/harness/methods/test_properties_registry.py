"""Property-based tests (hypothesis) of every training loss: each entry of the loss registry
(`experiments.methods.registry.REGISTRY`, MR2 also in its released form, its ablations λ = 0 and
uniform margin and with the tiled representation margin forced; inverse reweighting with and without stop-gradient),
`mr2_jax.mr2_loss` with `where`, `reweight_jax.inverse_reweighted_loss` and the baselines' `where`
handling. Inputs: tests/strategies.py; profiles: tests/conftest.py.

Properties (named in every assertion message):
  (a) agreement with the float64 NumPy references (tests/reference), evaluated on the inputs as rounded
      to their dtype, within C·ε·S: ε the input dtype's epsilon, S an error scale from a first-order
      rounding analysis of the computation, evaluated on the reference's own intermediates (see
      `ce_terms`, `mr2_reference`, `reweight_reference`, `ib_reference`);
  (b) the loss, its gradients (logits, features) and the new state are finite wherever the reference
      loss is;
  (c) the state changes only at classes present in the batch (ClassStats A, V, seen and the reweight
      batch counts of absent classes are bit-for-bit unchanged);
  (d) padding rows (`where=False`, with NaN/inf/huge garbage, labels in or out of range) change
      nothing: the result is the reference on the real rows, their per-example values and gradients
      are 0 (registry entries take no `where`: their library functions are tested here with it);
  (e) permuting the batch changes nothing (loss, state; gradients permute with the rows);
  (f) splitting the batch over 2/4/8 devices under `jax.shard_map` (the trainer's pattern: replicated
      parameters, batch-sharded rows, pmean of shares and of gradients) changes nothing, and every
      device holds the same new state.

bfloat16: the per-example cross-entropies and margins compute in the input dtype (bf16 arithmetic);
the class moments and the representation margin upcast bf16 features to float32 (their sums would
otherwise be off by ~n·ε: the slow run found a collapsed class's V = 0 read as 0.012), the class
statistics are stored in float32 and the registry's batch reductions are float32; bf16 inputs are
compared with ε = 2⁻⁷ in the same error model;
`inverse_reweighted_loss` upcasts its per-example losses to float32 (checked: bit-for-bit equal to the
float32 call on the same values).
"""

from __future__ import annotations

import dataclasses
import functools
from unittest import mock

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hypothesis import given
from hypothesis import note
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import mr2_jax
import reweight_jax
from experiments.methods import registry
from experiments.methods.method import StepInfo
from experiments.configs import default
from experiments.configs import schema
from experiments.methods.mr2 import mr2_kwargs
from mr2_jax import representation_margin_forms
from tests import strategies as S
from tests.reference import numpy_comparisons as ref_cmp
from tests.reference import numpy_fairdro as ref_fairdro
from tests.reference import numpy_mr2 as ref_mr2
from tests.reference import numpy_reweight as ref_rw

C = 16.0          # tolerance factor on the first-order error scale (C·ε·S)
START = 2         # start epoch of every deferred entry; epochs 0 … 3 are drawn (both branches)
AXIS = "batch"

# name → (registry loss, config overrides). Every registry name appears (test_every_loss_is_tested).
VARIANTS = {
    "ce": ("ce", {}),
    "mr2": ("mr2", {}),
    "mr2[released]": ("mr2", {"mr2.form": "released"}),
    "mr2[lam=0]": ("mr2", {"mr2.lam": 0.0}),
    "mr2[uniform_margin]": ("mr2", {"mr2.uniform_margin": True}),
    "mr2[tiled]": ("mr2", {}),  # representation margin with the tiled form forced (B ≥ 32)
    "inverse_reweight": ("inverse_reweight", {}),
    "inverse_reweight[stop_gradient]": ("inverse_reweight", {"reweight.stop_gradient": True}),
    "mr2+inverse_reweight": ("mr2+inverse_reweight", {}),
    "inv_freq": ("inv_freq", {}),
    "class_balanced": ("class_balanced", {}),
    "focal": ("focal", {}),
    "ldam": ("ldam", {}),
    "ldam_drw": ("ldam_drw", {}),
    "logit_adjust": ("logit_adjust", {}),
    "balanced_softmax": ("balanced_softmax", {}),
    "ib": ("ib", {}),
    "group_dro": ("group_dro", {}),
    "group_dro[adjusted]": ("group_dro", {"group_dro.c": 1.0, "group_dro.normalize": True,
                                          "group_dro.eta": 1.0}),
    "eql": ("eql", {}),
    "fairdro": ("fairdro", {}),
}
NAMES = tuple(VARIANTS)
TILED = {"mr2[tiled]"}
# EQL draws β per batch position (`reweight_jax.baselines.eql_dropped_at`): a permuted batch is given other
# draws, so (e) does not apply to the entry; the loss given β is permutation-equivariant
# (tests/lib/reweight_jax/baselines/test_eql.py).
POSITIONAL_DRAWS = {"eql"}


def config_for(variant: str) -> ml_collections.ConfigDict:
  loss, overrides = VARIANTS[variant]
  config = default.get_config()
  config.loss = loss
  config = registry.with_method_trees(config, registry.CONFIG_TREES)  # fields of several are set
  for field in ("reweight.start_epoch", "ldam.drw_epoch", "ib.start_epoch"):
    head, tail = field.split(".")
    config[head][tail] = START
  for field, value in overrides.items():
    head, tail = field.split(".")
    config[head][tail] = value
  schema.validate_method(config)
  return config


# Entries whose step is another entry's function (JTT trains by ERM on an edited training set: its
# step is CE's; the sampler is tested in tests/harness/methods/test_jtt.py).
SAME_STEP_AS = {"jtt": "ce"}
# Entries that read model outputs of their recipe's wrapper (`Recipe.model`): SupCon's projection, LfF's
# biased logits, ETF-DR's fixed ETF, GLMC's heads. Their library functions are checked against the
# float64 references with the same properties — (a)–(f) for SupCon and LfF in
# tests/lib/test_properties_comparisons.py, hypothesis properties in tests/lib/reweight_jax/baselines/test_etf_dr.py and
# tests/lib/reweight_jax/baselines/test_glmc.py — and their registry steps in tests/harness/methods/test_registry.py.
MODEL_OUTPUT_ENTRIES = {"supcon", "lff", "etf_dr", "etf_dr+inverse_reweight", "glmc",
                        "glmc+inverse_reweight"}
# The inverse reweighting around the other methods with a per-example loss: its weighting is the
# 'inverse_reweight' variants' (the same function, `experiments.methods.inverse_reweight`), the
# rows the wrapped method's; each entry is checked against the float64 references in
# tests/harness/methods/test_registry.py.
WRAPPED_ENTRIES = {f"{base}+inverse_reweight" for base in
                   ("balanced_softmax", "eql", "focal", "jtt", "ldam", "logit_adjust")}


def test_every_loss_is_tested():
  for name, same in SAME_STEP_AS.items():
    assert registry.get(name).loss is registry.get(same).loss and not registry.get(name).state, name
  assert MODEL_OUTPUT_ENTRIES == {n for n in registry.REGISTRY
                                  if registry.get(n).recipe.model is not None}
  assert ({loss for loss, _ in VARIANTS.values()} | set(SAME_STEP_AS) | MODEL_OUTPUT_ENTRIES
          | WRAPPED_ENTRIES == set(registry.REGISTRY))


def patched(variant):
  """The tiled representation margin forced (TILED_MIN_WORK = 0) while tracing `variant`."""
  if variant in TILED:
    return mock.patch.object(representation_margin_forms, "TILED_MIN_WORK", 0)
  return mock.patch.object(representation_margin_forms, "TILED_MIN_WORK",
                           representation_margin_forms.TILED_MIN_WORK)


# ------------------------------------------------------------------------------------------------
# Float64 references and their error scales (in units of the input dtype's ε)
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Expected:
  loss: float
  loss_scale: float            # S of the loss
  state: dict                  # field → dict of arrays (numpy)
  state_scale: dict            # field → dict of per-entry S (0: exact)
  gamma: np.ndarray | None = None
  gamma_scale: np.ndarray | None = None
  class_weight: np.ndarray | None = None
  class_weight_scale: np.ndarray | None = None
  grad_amplification: float = 1.0
  grad_floor: tuple = (0.0, 0.0)  # gradient scales (logits, features) below which all is rounding
  q_log_step: np.ndarray | None = None  # Group DRO: η·a_c, the log-step of every class's q


def ce_terms(z_eff, labels, rounding=None):
  """Per-example −log softmax(z_eff)_y's first-order rounding error (units of ε) and its condition.

  With s = z_eff − max: the label term carries |s_y|, the log-sum-exp Σ p_k |s_k| + log K, and
  forming z_eff itself (a scaled or shifted logit) costs `rounding` [B] (0: the logits as given).
  Returns (error [B], condition [B]: the sensitivity to a relative change of the logits' scale).
  """
  z_eff = np.asarray(z_eff, np.float64)
  num_classes = z_eff.shape[1]
  if num_classes == 0 or z_eff.shape[0] == 0:
    return np.zeros(z_eff.shape[0]), np.zeros(z_eff.shape[0])
  shifted = z_eff - z_eff.max(axis=1, keepdims=True)
  prob = np.exp(shifted)
  prob /= prob.sum(axis=1, keepdims=True)
  label_term = np.abs(shifted[np.arange(len(labels)), labels])
  spread = np.sum(prob * np.abs(shifted), axis=1)
  condition = label_term + spread
  rounding = 0.0 if rounding is None else rounding
  return 2.0 + np.log(num_classes) + condition + 2.0 * rounding, condition


def mr2_params(config, dim):
  mr2 = config.mr2
  p = mr2.p if mr2.p is not None else (2.0 if mr2.form == "paper" else 5.0)
  tau = mr2.temperature if mr2.temperature is not None else (
      1.0 if mr2.form == "paper" else 10.0 * dim)
  return p, tau


def mr2_reference(config, logits, features, labels, class_stats, *, where=None,
                  uniform_margin=None):
  """MR2 per-example terms (margin CE and ℓ_s̄), updated statistics, γ and s̄, with error scales."""
  mr2 = config.mr2
  num_classes, dim = logits.shape[1], features.shape[1]
  p, tau = mr2_params(config, dim)
  lam = mr2.lam
  uniform = mr2.uniform_margin if uniform_margin is None else uniform_margin
  a_old, v_old, seen_old = class_stats
  valid = np.ones(len(labels), bool) if where is None else np.asarray(where)
  z, x, y = logits[valid], features[valid], labels[valid]
  (a, v, seen), stat_scales, (batch_a, batch_v, counts, phi) = S.stats_reference(
      a_old, v_old, seen_old, x, y, mr2.decay, p)
  gamma = ref_mr2.class_margins(a, v, seen, mr2.c_bar)
  gamma = np.where(seen, np.maximum(gamma, 1e-6 * mr2.c_bar), gamma)  # the library's floor
  total = batch_a + batch_v
  relative = np.where(counts > 0, (p + 2) + 2 * phi * (np.sqrt(batch_a) + np.sqrt(batch_v))
                      / np.where(total > 0, total, 1.0), 0.0)
  gamma_error = 0.0 if uniform else 2.0 + float(np.max(relative, initial=0.0))
  if uniform:
    gamma = np.full(num_classes, float(mr2.c_bar))
  s_bar = ref_mr2.s_bar(v, seen)
  ce = ref_mr2.margin_cross_entropy(z, y, gamma)
  scaled = z / gamma[y][:, None] if len(y) else z
  ce_error, condition = ce_terms(scaled, y, np.max(np.abs(scaled), axis=1, initial=0.0))
  ce_error = ce_error + condition * gamma_error
  amplification = 1.0 + gamma_error * float(np.max(condition, initial=0.0))
  if lam > 0:
    rep = ref_mr2.representation_margin_loss(x, y, s_bar, temperature=tau)
    means = np.zeros((num_classes, dim))
    np.add.at(means, y, x)
    means /= np.maximum(counts, 1)[:, None]
    centred = np.linalg.norm(x - means[y], axis=1) if len(y) else np.zeros(0)
    same = y[:, None] == y[None, :]
    dist = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1) if len(y) else np.zeros((0, 0))
    max_dist = float(np.max(np.where(same, dist, 0.0), initial=0.0))
    big_phi = float(np.max(phi, initial=0.0))
    max_v = float(np.max(batch_v, initial=0.0))
    exponent_error = (4 * float(np.max(centred, initial=0.0)) ** 2 + 4 * big_phi * np.sqrt(max_dist)
                      + 2 * (s_bar + 2 * big_phi * np.sqrt(max_v))) / tau
    rep_error = exponent_error + 1.0 + float(np.max(rep, initial=0.0))
    amplification += exponent_error
  else:
    rep, rep_error = np.zeros(len(y)), 0.0
  # ∂ℓ_s̄/∂φ = Σ_j q_ij·2(c_i − c_j)/τ: a collapsed class leaves only its rounding, ~ε·Φ/τ per row.
  weight = lam * max(1.0, dim / (10.0 * num_classes) * len(y)) if mr2.form == "released" else lam
  feature_floor = weight * 4 * float(np.max(S.class_norms(x, y, num_classes), initial=0.0)) / (
      tau * max(len(y), 1))
  return dict(feature_floor=feature_floor, ce=ce, ce_error=ce_error, rep=rep, rep_error=rep_error, stats=(a, v, seen),
              stat_scales=stat_scales, gamma=gamma,
              gamma_scale=gamma_error * gamma if not uniform else np.zeros(num_classes),
              s_bar=s_bar, labels=y, amplification=amplification, p=p, tau=tau)


def mr2_value(config, terms, num_classes, dim):
  """The MR2 loss of `mr2_loss` (paper or released form) and its error scale."""
  mr2, ce, rep, y = config.mr2, terms["ce"], terms["rep"], terms["labels"]
  rows = max(len(y), 1)
  if mr2.form == "paper":
    value = float(np.sum(ce + mr2.lam * rep)) / rows
    scale = float(np.sum(terms["ce_error"] + mr2.lam * terms["rep_error"])) / rows
  else:
    present = np.unique(y)
    rep_sum = sum(float(np.mean(rep[y == c])) for c in present)
    value = float(np.sum(ce)) / rows + mr2.lam * dim / (10.0 * num_classes) * rep_sum
    scale = (float(np.sum(terms["ce_error"])) / rows
             + mr2.lam * dim / (10.0 * num_classes) * len(present) * terms["rep_error"])
  return value, scale + 2 * abs(value)


def reweight_reference(rw, per_example, errors, labels, num_classes, batch_counts, beta_old,
                       refresh, counts, where=None):
  """Inverse-reweighted loss value, new state, ŵ and their error scales (REWEIGHT spec).

  Perturbing L_c moves ŵ_c·L_c by at most 2·ŵ_c·ΔL_c (clipped: ŵ_c·ΔL_c; unclipped its derivative is
  ŵ_c·2ε/(L_c² + ε)) and L̄ moves it by at most β_c·ΔL̄.
  """
  valid = np.ones(len(labels), bool) if where is None else np.asarray(where)
  beta = ref_rw.macro_factor(batch_counts, rw.gamma) if refresh else np.asarray(beta_old, float)
  prior = ref_rw.class_prior(np.maximum(counts, 1.0), rw.prior)
  loss, w_hat = ref_rw.inverse_reweighted_loss_value(
      per_example, labels, num_classes, beta if rw.macro else np.ones(num_classes), prior,
      alpha=rw.alpha, max_weight=rw.max_weight if rw.max_weight is not None else np.inf,
      where=valid)
  class_losses, present, n = ref_rw.batch_class_losses(per_example, labels, num_classes,
                                                       where=valid)
  class_errors, _, _ = ref_rw.batch_class_losses(errors, labels, num_classes, where=valid)
  mean_error = float(np.mean(class_errors[present])) if present.any() else 0.0
  mean_loss = float(np.mean(class_losses[present])) if present.any() else 0.0
  beta_used = beta if rw.macro else np.ones(num_classes)
  rows = max(int(valid.sum()), 1)
  scale = (float(np.sum(n * (2 * w_hat * class_errors + beta_used * mean_error))) / rows
           + 2 * abs(loss) + 4 * float(np.max(w_hat, initial=0.0)) * mean_loss)
  with np.errstate(divide="ignore", invalid="ignore"):
    weight_scale = np.where(
        present, w_hat * (class_errors / class_losses + mean_error / max(mean_loss, 1e-300) + 4),
        4 * w_hat)
  weight_scale = np.where(np.isnan(weight_scale), np.inf, weight_scale)
  new_counts = np.asarray(batch_counts, float) + present
  return loss, scale, {"batch_counts": new_counts, "beta": beta}, w_hat, weight_scale


def ib_reference(logits, labels, features, counts, alpha, epsilon=1e-3):
  """IB per-example values and errors: w·CE·α/(g·f + ε), g = ‖softmax − e_y‖₁, f = ‖h‖₁."""
  values = ref_rw.ib_loss(logits, labels, features, np.maximum(counts, 1.0), alpha=alpha,
                          eps=epsilon)
  ce = ref_rw._per_example_ce(logits, labels)
  ce_error, _ = ce_terms(logits, labels)
  shifted = logits - logits.max(axis=1, keepdims=True)
  prob = np.exp(shifted)
  prob /= prob.sum(axis=1, keepdims=True)
  onehot = np.eye(logits.shape[1])[labels]
  g = np.sum(np.abs(prob - onehot), axis=1)
  g_error = 2 + np.sum(prob * (1 + np.abs(shifted)), axis=1) + (1 + np.abs(
      shifted[np.arange(len(labels)), labels]))
  f = np.sum(np.abs(features), axis=1)
  weights = ref_rw.inverse_frequency_weights(np.maximum(counts, 1.0))[labels]
  denominator = g * f + epsilon
  errors = (np.abs(values) * 2 + weights * alpha * (
      ce_error / denominator
      + ce * f * (g_error + g * (1 + np.log(features.shape[1]))) / denominator ** 2))
  amplification = 1.0 + float(np.max(f * g_error / denominator, initial=0.0))
  # |∂IB_i/∂z_i| and |∂IB_i/∂h_i| bounds (∂g/∂z ≤ 2, ∂f/∂h ≤ 1): the rows' gradient scales.
  logit_gain = weights * alpha * (2 / denominator + 2 * ce * f / denominator ** 2)
  feature_gain = weights * alpha * ce * g / denominator ** 2
  return values, errors, amplification, (logit_gain, feature_gain)


def registry_reference(variant, batch: S.Batch, state, epoch, step_in_epoch, counts,
                       rng=None) -> Expected:
  """The float64 value of registry entry `variant` at `epoch` (its before entry before START)."""
  config = config_for(variant)
  entry = registry.get(config.loss)
  which = config.loss if entry.start is None or epoch >= START else entry.before
  z, x, y = batch.f64(batch.logits), batch.f64(batch.features), batch.labels
  num_classes, dim = z.shape[1], x.shape[1]
  counts1 = np.maximum(np.asarray(counts, np.float64), 1.0)
  new_state = {f: dict(v) for f, v in state.items()}
  state_scale = {f: {k: np.zeros_like(np.asarray(a, float)) for k, a in v.items()}
                 for f, v in state.items()}
  gamma = gamma_scale = class_weight = class_weight_scale = q_log_step = None
  amplification = 1.0
  rows = max(len(y), 1)
  # Gradient floors: |∂loss/∂z_i| ≤ row weight × logit gain; rounding is relative to these.
  row_weight, logit_gain, feature_gain = np.full(len(y), 1.0 / rows), np.ones(len(y)), 0.0

  if which.startswith("mr2"):
    cs = state["class_stats"]
    terms = mr2_reference(config, z, x, y, (cs["A"], cs["V"], cs["seen"]))
    a, v, seen = terms["stats"]
    new_state["class_stats"] = {"A": a, "V": v, "seen": seen}
    state_scale["class_stats"] = {"A": terms["stat_scales"][0], "V": terms["stat_scales"][1],
                                  "seen": np.zeros(num_classes)}
    gamma, gamma_scale = terms["gamma"], terms["gamma_scale"]
    amplification = terms["amplification"]
    logit_gain = 1.0 / terms["gamma"][y]
    feature_gain = terms["feature_floor"] * rows
    if which == "mr2":
      loss, scale = mr2_value(config, terms, num_classes, dim)
    else:
      per_example = terms["ce"] + config.mr2.lam * terms["rep"]
      errors = terms["ce_error"] + config.mr2.lam * terms["rep_error"]
  elif which in ("ce", "inverse_reweight"):
    per_example = ref_rw._per_example_ce(z, y)
    errors, _ = ce_terms(z, y)
    loss, scale = float(np.mean(per_example)), float(np.mean(errors))
  elif which in ("inv_freq", "class_balanced"):
    w = (ref_rw.inverse_frequency_weights(counts1) if which == "inv_freq"
         else ref_rw.class_balanced_weights(counts1, config.class_balanced.beta))[y]
    per_example = ref_rw._per_example_ce(z, y)
    errors, _ = ce_terms(z, y)
    loss, scale = (float(np.sum(w * per_example) / np.sum(w)),
                   float(np.sum(w * errors) / np.sum(w)))
    row_weight = w / np.sum(w)
  elif which == "focal":
    gamma_f = config.focal.gamma
    per_example = ref_rw.focal_loss(z, y, gamma=gamma_f)
    errors, _ = ce_terms(z, y)
    loss = float(np.mean(per_example))
    scale = float(np.mean((gamma_f + 1) * errors + np.abs(per_example)))
    logit_gain = logit_gain * (gamma_f + 1)
  elif which in ("ldam", "ldam_drw"):
    ldam = config.ldam
    per_example = ref_rw.ldam_loss(z, y, counts1, max_margin=ldam.max_margin, scale=ldam.scale)
    raw = counts1 ** -0.25
    margins = raw * ldam.max_margin / raw.max()
    shifted = ldam.scale * (z - np.eye(num_classes)[y] * margins)
    forming = ldam.scale * (np.max(np.abs(z), axis=1) + margins.max())
    errors, _ = ce_terms(shifted, y, forming)
    # Forming s·(z − Δ_y e_y) rounds each effective logit by ≈ ε·|s·z|, and the softmax's gradient
    # p − e_y moves by p times that: two float32 computations (one device, or eight, whose rows
    # XLA vectorises differently) may differ by it. Found by the slow sharded twin at logit scale
    # 316 (s·z ≈ 1.4e4, tied logits): 1.8748 vs 1.8752 for a true 1.875, both within the
    # reference's tolerance but 14× the former gradient tolerance.
    amplification = 1.0 + float(np.max(forming, initial=0.0))
    w = (ref_rw.class_balanced_weights(counts1, ldam.drw_beta)[y] if which == "ldam_drw"
         else np.ones(len(y)))
    loss = float(np.sum(w * per_example) / np.sum(w))
    scale = float(np.sum(w * errors) / np.sum(w))
    row_weight, logit_gain = w / np.sum(w), logit_gain * ldam.scale
  elif which in ("logit_adjust", "balanced_softmax"):
    tau = config.logit_adjust.tau if which == "logit_adjust" else 1.0
    per_example = (ref_rw.logit_adjusted_loss(z, y, counts1, tau=tau) if which == "logit_adjust"
                   else ref_rw.balanced_softmax_loss(z, y, counts1))
    log_prior = tau * np.log(counts1 / counts1.sum())
    errors, _ = ce_terms(z + log_prior, y,
                         np.max(np.abs(z), axis=1) + 2 * np.max(np.abs(log_prior)))
    loss, scale = float(np.mean(per_example)), float(np.mean(errors))
  elif which == "ib":
    per_example, errors, amplification, (logit_gain, feature_gains) = ib_reference(
        z, y, x, counts1, config.ib.alpha)
    loss, scale = float(np.mean(per_example)), float(np.mean(errors))
    feature_gain = float(np.max(feature_gains, initial=0.0))
  elif which == "group_dro":
    gd = config.group_dro
    q_old = np.asarray(state["group_dro_q"]["q"], np.float64)
    per_example = ref_rw._per_example_ce(z, y)
    errors, _ = ce_terms(z, y)
    adjustment = gd.c / np.sqrt(counts1) if gd.c > 0 else None
    loss, q, g = ref_cmp.group_dro_step(per_example, y, q_old, gd.eta, adjustment, gd.normalize)
    members = np.bincount(y, minlength=num_classes)
    g_error = np.bincount(y, weights=errors, minlength=num_classes) / np.maximum(members, 1)
    # q = softmax(log q + η a): its relative error is a few ε plus η·|Δa|, Δa ~ g's error (and,
    # normalised, Σ a's); the loss Σ q_c g_c moves by Σ q_c Δg_c + Σ Δq_c g_c.
    a = g + (adjustment if adjustment is not None else 0.0)
    a_error = g_error + (np.abs(a) * 2 if adjustment is not None else 0.0)
    if gd.normalize:
      a_error = a_error + np.abs(a) * float(np.sum(a_error)) / max(float(np.sum(a)), 1e-300)
      a_error = a_error / max(float(np.sum(a)), 1e-300)
    q_relative = 8.0 + np.log(num_classes) + 2 * gd.eta * float(np.max(a_error, initial=0.0))
    scale = float(np.sum(q * g_error)) + q_relative * float(np.sum(q * np.abs(g)))
    new_state["group_dro_q"] = {"q": q}
    state_scale["group_dro_q"] = {"q": q_relative * q}
    row_weight = q[y] / np.maximum(members[y], 1)
    a_used = a / max(float(np.sum(a)), 1e-300) if gd.normalize and np.sum(a) > 0 else a
    q_log_step = gd.eta * a_used
  elif which == "fairdro":  # Σ_c q_c g_c with the state's q (set at epoch ends, not by a step)
    q = np.asarray(state["fairdro_q"]["q"], np.float64)
    per_example = ref_rw._per_example_ce(z, y)
    errors, _ = ce_terms(z, y)
    loss, g = ref_fairdro.step_loss(per_example, y, q)
    members = np.bincount(y, minlength=num_classes)
    g_error = np.bincount(y, weights=errors, minlength=num_classes) / np.maximum(members, 1)
    scale = float(np.sum(np.abs(q) * (g_error + 4 * np.abs(g))))
    row_weight = np.abs(q[y]) / np.maximum(members[y], 1)
  elif which == "eql":
    rare = np.asarray(reweight_jax.baselines.eql_rare_classes(np.asarray(counts, np.float32),
                                                    config.eql.lam))
    dropped = np.asarray(reweight_jax.baselines.eql_dropped_at(rng, np.arange(len(y)), num_classes,
                                                     config.eql.gamma))
    per_example, _ = ref_cmp.eql_loss(z, y, rare, dropped)
    masked = dropped & rare[None, :] & (np.arange(num_classes)[None, :] != y[:, None])
    kept = np.where(masked, -1e300, z)  # exp → 0, and 0 · |shift| = 0 in the error scale
    errors, _ = ce_terms(kept, y)
    loss, scale = float(np.mean(per_example)), float(np.mean(errors))
  else:
    raise AssertionError(which)

  if which.endswith("inverse_reweight"):
    rs = state["reweight"]
    refresh = step_in_epoch == 0 if config.reweight.refresh == "epoch" else True
    loss, scale, new_state["reweight"], class_weight, class_weight_scale = reweight_reference(
        config.reweight, per_example, errors, y, num_classes, rs["batch_counts"], rs["beta"],
        refresh, counts)
    state_scale["reweight"] = {"batch_counts": np.zeros(num_classes),
                               "beta": 8 * np.abs(new_state["reweight"]["beta"])}
    beta_max = float(np.max(new_state["reweight"]["beta"]))
    row_weight = (2 * class_weight[y] + beta_max) / rows
  floor = (float(np.max(row_weight * logit_gain, initial=0.0)),
           float(np.max(row_weight, initial=0.0)) * feature_gain)
  return Expected(loss, scale + 2 * abs(loss), new_state, state_scale, gamma, gamma_scale,
                  class_weight, class_weight_scale, amplification, floor, q_log_step)


# ------------------------------------------------------------------------------------------------
# Compiled functions (cached per variant; jit caches per shape)
# ------------------------------------------------------------------------------------------------

def to_library_state(config, state, num_classes):
  """The registry's loss state (only the fields the entry carries) from the numpy arrays."""
  fields = registry.init_loss_state(config, num_classes)
  out = {}
  if "class_stats" in fields:
    cs = state["class_stats"]
    out["class_stats"] = mr2_jax.ClassStats(sq_mean_norm=jnp.asarray(cs["A"], jnp.float32),
                                            mean_sq_deviation=jnp.asarray(cs["V"], jnp.float32),
                                            seen=jnp.asarray(cs["seen"]))
  if "reweight" in fields:
    rs = state["reweight"]
    out["reweight"] = reweight_jax.ReweightState(batch_counts=jnp.asarray(rs["batch_counts"]),
                                                 beta=jnp.asarray(rs["beta"]))
  for field in ("group_dro_q", "fairdro_q"):
    if field in fields:
      out[field] = jnp.asarray(state[field]["q"], jnp.float32)
  return out


def from_library_state(state) -> dict:
  out = {}
  if "class_stats" in state:
    cs = state["class_stats"]
    out["class_stats"] = {"A": np.asarray(cs.sq_mean_norm), "V": np.asarray(cs.mean_sq_deviation),
                          "seen": np.asarray(cs.seen)}
  if "reweight" in state:
    rs = state["reweight"]
    out["reweight"] = {"batch_counts": np.asarray(rs.batch_counts), "beta": np.asarray(rs.beta)}
  for field in ("group_dro_q", "fairdro_q"):
    if field in state:
      out[field] = {"q": np.asarray(state[field])}
  return out


def _objective(loss_fn, labels, state, info, rows=None):
  def objective(logits, features):
    if rows is not None:  # the local rows of replicated "parameters" (the trainer's pattern)
      start = jax.lax.axis_index(AXIS) * rows
      logits = jax.lax.dynamic_slice_in_dim(logits, start, rows)
      features = jax.lax.dynamic_slice_in_dim(features, start, rows)
    loss, new_state, metrics = loss_fn(logits, features, labels, state, info)
    return loss, (new_state, metrics)
  return objective


@functools.cache
def single_device(variant):
  loss_fn = registry.make_loss_fn(config_for(variant))

  def run(logits, features, labels, state, epoch, step_in_epoch, counts, rng):
    info = StepInfo(epoch, step_in_epoch, counts, rng=rng)
    (loss, (new_state, metrics)), grads = jax.value_and_grad(
        _objective(loss_fn, labels, state, info), argnums=(0, 1), has_aux=True)(logits, features)
    return loss, new_state, metrics, grads
  return jax.jit(run)


@functools.cache
def sharded(variant, devices):
  loss_fn = registry.make_loss_fn(config_for(variant))
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))

  def local(logits, features, labels, state, epoch, step_in_epoch, counts, rng):
    info = StepInfo(epoch, step_in_epoch, counts, axis_name=AXIS, rng=rng)
    (loss, (new_state, metrics)), grads = jax.value_and_grad(
        _objective(loss_fn, labels, state, info, rows=labels.shape[0]), argnums=(0, 1),
        has_aux=True)(logits, features)
    per_device = jax.tree.map(lambda x: x[None], new_state)  # to check every device's copy
    return (jax.lax.pmean(loss, AXIS), per_device, metrics,
            jax.tree.map(lambda g: jax.lax.pmean(g, AXIS), grads))

  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(), P(), P(), P(), P()),
                               out_specs=(P(), P(AXIS), P(), P()), check_vma=False))


def call(fn, variant, batch: S.Batch, state, epoch, step_in_epoch, counts, rng):
  config = config_for(variant)
  with patched(variant):
    out = fn(jnp.asarray(batch.logits), jnp.asarray(batch.features), jnp.asarray(batch.labels),
             to_library_state(config, state, batch.shape.num_classes), jnp.asarray(epoch),
             jnp.asarray(step_in_epoch), jnp.asarray(counts), rng)
  loss, new_state, metrics, grads = jax.device_get(out)
  return float(loss), new_state, metrics, tuple(np.asarray(g, np.float64) for g in grads)


# ------------------------------------------------------------------------------------------------
# Examples
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class RegistryExample:
  batch: S.Batch
  state: dict
  epoch: int
  step_in_epoch: int
  counts: np.ndarray
  order: np.ndarray
  rng: jax.Array          # StepInfo.rng (EQL's draws)


@st.composite
def registry_examples(draw, shapes):
  shape = draw(shapes)
  batch = draw(S.batches(shape))
  magnitude = batch.feature_scale ** 2 * shape.dim
  a, v, seen = draw(S.class_stats_arrays(shape.num_classes, magnitude))
  batch_counts, beta = draw(S.reweight_arrays(shape.num_classes))
  state = {"class_stats": {"A": a, "V": v, "seen": seen},
           "reweight": {"batch_counts": batch_counts, "beta": beta},
           "group_dro_q": {"q": draw(S.simplex_points(shape.num_classes))},
           # FairDRO's q sums to 1 and may be negative (nonnegativity is not imposed)
           "fairdro_q": {"q": draw(S.simplex_points(shape.num_classes, signed=True))}}
  epoch = draw(st.integers(0, 2 * START - 1))
  step_in_epoch = draw(st.sampled_from((0, 1)))
  counts = draw(S.class_counts(shape.num_classes))
  order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(shape.batch)
  rng_seed = draw(st.integers(0, 2**31 - 1))
  note(f"shape {shape}; {batch.description}; epoch {epoch}, step_in_epoch {step_in_epoch}, "
       f"rng key({rng_seed})")
  return RegistryExample(batch, state, epoch, step_in_epoch, counts, order,
                         jax.random.key(rng_seed))


def registry_shapes(variant, wide, sharded_shapes=False):
  index = NAMES.index(variant)
  if sharded_shapes:
    return (S.wide_shapes(S.SHARDED_BATCH_SIZES, dims=(4,), devices=S.DEVICE_COUNTS) if wide
            else S.pool_shape(S.SHARDED_POOL, index))
  return S.wide_shapes() if wide else S.pool_shape(S.SHARDED_POOL, index, devices=False)


# ------------------------------------------------------------------------------------------------
# Registry properties
# ------------------------------------------------------------------------------------------------

def compare_state(actual, expected: Expected, eps, prefix, exact_absent=None):
  for field, arrays in expected.state.items():
    if field not in actual:
      continue
    for key, value in arrays.items():
      # XLA flushes float32 subnormals to zero (CPU and GPU by default, TPU always): below the
      # smallest normal float32 a state entry may read 0 (Group DRO's q at a logit scale of 1e4).
      atol = np.maximum(C * eps * expected.state_scale[field][key], np.finfo(np.float32).tiny)
      S.assert_close(actual[field][key], value, atol, f"{prefix}: state {field}.{key}")


def check_outputs(variant, ex: RegistryExample, out, expected: Expected, prefix: str):
  """(a) and (b) for one call's outputs."""
  loss, new_state, metrics, grads = out
  eps = S.eps(ex.batch.shape.dtype)
  actual_state = from_library_state(new_state)
  S.assert_close(loss, expected.loss, C * eps * expected.loss_scale, f"{prefix} (a): loss")
  compare_state(actual_state, expected, eps, f"{prefix} (a)")
  if expected.gamma is not None and "gamma" in metrics:
    S.assert_close(metrics["gamma"], expected.gamma, C * eps * expected.gamma_scale + 1e-6,
                   f"{prefix} (a): γ")
  if expected.class_weight is not None and "class_weight" in metrics:
    S.assert_close(metrics["class_weight"], expected.class_weight,
                   C * eps * expected.class_weight_scale + 1e-6, f"{prefix} (a): ŵ")
  if np.isfinite(expected.loss):
    S.assert_finite([loss], f"{prefix} (b): loss")
    S.assert_finite(list(grads), f"{prefix} (b): gradients (logits, features)")
    S.assert_finite([x for f in actual_state.values() for x in f.values()],
                    f"{prefix} (b): new state")
  return actual_state


def check_registry_entry(variant, ex: RegistryExample):
  S.before_example()
  batch = ex.batch
  expected = registry_reference(variant, batch, ex.state, ex.epoch, ex.step_in_epoch, ex.counts,
                                ex.rng)
  fn = single_device(variant)
  out = call(fn, variant, batch, ex.state, ex.epoch, ex.step_in_epoch, ex.counts, ex.rng)
  actual_state = check_outputs(variant, ex, out, expected, variant)

  # (c) absent classes' state bit-for-bit unchanged.
  present = np.zeros(batch.shape.num_classes, bool)
  present[batch.labels] = True
  for field, arrays in actual_state.items():
    for key, value in arrays.items():
      if field == "reweight" and key == "beta":
        continue  # β is renormalised over all K classes by design (a refresh, not an update)
      if field == "group_dro_q":
        # q is renormalised over all K classes by design: an absent class's q moves by its own
        # exp(η·a_c) (a_c its adjustment, 0 without) and the common normalisation, nothing else
        ratio = (np.asarray(value, np.float64)[~present]
                 / np.asarray(ex.state[field][key], np.float64)[~present]
                 * np.exp(-expected.q_log_step[~present]))
        # The scale is in units of the inputs' ε (the class losses, hence a normalised step,
        # carry their rounding), as in (a); ε₃₂ here failed a bfloat16 example of the slow twin.
        S.assert_close(ratio, np.full_like(ratio, ratio[0] if ratio.size else 0.0),
                       C * S.eps(batch.shape.dtype) * expected.state_scale[field][key][~present]
                       / np.maximum(np.asarray(ex.state[field][key])[~present], 1e-30),
                       f"{variant} (c): q of absent classes, relative to each other")
        continue
      np.testing.assert_array_equal(value[~present], np.asarray(ex.state[field][key])[~present],
                                    err_msg=f"{variant} (c): {field}.{key} of absent classes")

  # (e) the permuted batch: same loss and state, permuted gradients.
  if variant in POSITIONAL_DRAWS:
    return
  permuted = call(fn, variant, batch.permuted(ex.order), ex.state, ex.epoch, ex.step_in_epoch,
                  ex.counts, ex.rng)
  check_outputs(variant, ex, permuted, expected, f"{variant} (e) permuted")
  eps = S.eps(batch.shape.dtype)
  for name, g, g_perm, floor in zip(("logits", "features"), out[3], permuted[3],
                                    expected.grad_floor):
    atol = (C * eps * expected.grad_amplification * (np.max(np.abs(g), initial=0.0) + floor)
            + 1e-30)
    S.assert_close(g_perm, g[ex.order], atol, f"{variant} (e): gradient of the {name}")


def check_registry_sharded(variant, ex: RegistryExample):
  S.before_example()
  batch, devices = ex.batch, ex.batch.shape.devices
  expected = registry_reference(variant, batch, ex.state, ex.epoch, ex.step_in_epoch, ex.counts,
                                ex.rng)
  single = call(single_device(variant), variant, batch, ex.state, ex.epoch, ex.step_in_epoch,
                ex.counts, ex.rng)
  loss, per_device, metrics, grads = call(sharded(variant, devices), variant, batch, ex.state,
                                          ex.epoch, ex.step_in_epoch, ex.counts, ex.rng)
  # Every device holds the same new state.
  for leaf in jax.tree.leaves(per_device):
    leaf = np.asarray(leaf)
    assert leaf.shape[0] == devices
    np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape),
                                  err_msg=f"{variant} (f): devices hold different states")
  first = jax.tree.map(lambda x: np.asarray(x)[0], per_device)
  prefix = f"{variant} (f) {devices} devices"
  check_outputs(variant, ex, (loss, first, metrics, grads), expected, prefix)
  eps = S.eps(batch.shape.dtype)
  S.assert_close(loss, single[0], 2 * C * eps * expected.loss_scale, f"{prefix}: loss vs 1 device")
  for name, g, g1, floor in zip(("logits", "features"), grads, single[3], expected.grad_floor):
    atol = (C * eps * expected.grad_amplification * (np.max(np.abs(g1), initial=0.0) + floor)
            + 1e-30)
    S.assert_close(g, g1, atol, f"{prefix}: gradient of the {name} vs 1 device")


@pytest.mark.parametrize("variant", NAMES)
@given(data=st.data())
def test_registry_entry(variant, data):
  check_registry_entry(variant, data.draw(registry_examples(registry_shapes(variant, S.WIDE))))


@pytest.mark.slow
@pytest.mark.parametrize("variant", NAMES)
@S.SLOW
@given(data=st.data())
def test_registry_entry_slow(variant, data):
  check_registry_entry(variant, data.draw(registry_examples(registry_shapes(variant, True))))


@pytest.mark.parametrize("variant", NAMES)
@given(data=st.data())
def test_registry_entry_sharded(variant, data):
  check_registry_sharded(variant, data.draw(registry_examples(
      registry_shapes(variant, S.WIDE, sharded_shapes=True))))


@pytest.mark.slow
@pytest.mark.parametrize("variant", NAMES)
@S.SLOW
@given(data=st.data())
def test_registry_entry_sharded_slow(variant, data):
  check_registry_sharded(variant, data.draw(registry_examples(
      registry_shapes(variant, True, sharded_shapes=True))))


# ------------------------------------------------------------------------------------------------
# mr2_jax.mr2_loss with `where` (padding) and under shard_map
# ------------------------------------------------------------------------------------------------

MR2_PADDED_POOL = {  # form → default pool (one float32 and one bfloat16 shape between the forms)
    "paper": (S.Shape(64, 7, 4, S.F32, 4),),
    "released": (S.Shape(16, 300, 4, S.BF16, 2),),
}


def padded_shapes(pool, wide, dims=S.DIMS):
  if wide:
    return S.wide_shapes(S.BUCKETS, dims=dims, devices=S.DEVICE_COUNTS)
  return st.sampled_from(pool)


def mr2_config(form):
  config = config_for("mr2")
  config.mr2.form = form
  return config


def _mr2_objective(config, stats, where_all, axis_name=None, rows=None):
  kwargs = mr2_kwargs(config.mr2)

  def objective(logits, features, labels, where):
    if rows is not None:
      start = jax.lax.axis_index(AXIS) * rows
      logits = jax.lax.dynamic_slice_in_dim(logits, start, rows)
      features = jax.lax.dynamic_slice_in_dim(features, start, rows)
    loss, new_stats, aux = mr2_jax.mr2_loss(logits, features, labels, stats, **kwargs,
                                            axis_name=axis_name, where=where)
    return loss, (new_stats, aux)
  return objective


@functools.cache
def mr2_padded_fn(form, devices):
  config = mr2_config(form)

  def run(logits, features, labels, where, stats):
    rows = None if devices == 1 else labels.shape[0]
    (loss, (new_stats, aux)), grads = jax.value_and_grad(
        _mr2_objective(config, stats, where, AXIS if devices > 1 else None, rows),
        argnums=(0, 1), has_aux=True)(logits, features, labels, where)
    if devices == 1:
      return loss, new_stats, aux.gamma, grads
    return (jax.lax.pmean(loss, AXIS), jax.tree.map(lambda x: x[None], new_stats), aux.gamma,
            jax.tree.map(lambda g: jax.lax.pmean(g, AXIS), grads))

  if devices == 1:
    return jax.jit(run)
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))
  return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS), P()),
                               out_specs=(P(), P(AXIS), P(), P()), check_vma=False))


@dataclasses.dataclass
class PaddedExample:
  padded: S.Padded
  stats: tuple
  order: np.ndarray


@st.composite
def padded_examples(draw, shapes, min_real=0):
  shape = draw(shapes)
  padded = draw(S.padded_batches(shape, min_real=min_real))
  stats = draw(S.class_stats_arrays(shape.num_classes,
                                    padded.batch.feature_scale ** 2 * shape.dim))
  order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(shape.batch)
  note(f"shape {shape}; {padded.describe()}")
  return PaddedExample(padded, stats, order)


def run_mr2_padded(form, devices, padded: S.Padded, stats):
  a, v, seen = stats
  out = mr2_padded_fn(form, devices)(
      jnp.asarray(padded.logits), jnp.asarray(padded.features), jnp.asarray(padded.labels),
      jnp.asarray(padded.where), mr2_jax.ClassStats(sq_mean_norm=jnp.asarray(a),
                                                    mean_sq_deviation=jnp.asarray(v),
                                                    seen=jnp.asarray(seen)))
  loss, new_stats, gamma, grads = jax.device_get(out)
  if devices > 1:
    for leaf in jax.tree.leaves(new_stats):
      np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape),
                                    err_msg=f"mr2_loss (f): devices hold different statistics")
    new_stats = jax.tree.map(lambda x: x[0], new_stats)
  return float(loss), new_stats, gamma, tuple(np.asarray(g, np.float64) for g in grads)


def check_mr2_padded(form, ex: PaddedExample):
  S.before_example()
  padded, shape = ex.padded, ex.padded.batch.shape
  config = mr2_config(form)
  z, x = Batch64 = (S.Batch.f64(padded.logits), S.Batch.f64(padded.features))
  terms = mr2_reference(config, z, x, padded.labels, ex.stats, where=padded.where)
  value, scale = mr2_value(config, terms, shape.num_classes, shape.dim)
  if not padded.where.any():
    value, scale = 0.0, 0.0  # nothing valid: the loss is 0 (B counts valid examples, floored at 1)
  eps = S.eps(shape.dtype)
  a, v, seen = terms["stats"]
  results = {}
  for devices, batch, label in ((1, padded, "mr2_loss"),
                                (1, padded.permuted(ex.order), "mr2_loss (e) permuted"),
                                (shape.devices, padded, f"mr2_loss (f) {shape.devices} devices")):
    loss, new_stats, gamma, grads = run_mr2_padded(form, devices, batch, ex.stats)
    results[label] = (loss, grads, batch)
    S.assert_close(loss, value, C * eps * scale + 1e-30, f"{label} (a, d): loss")
    S.assert_close(new_stats.sq_mean_norm, a, C * eps * terms["stat_scales"][0], f"{label}: A")
    S.assert_close(new_stats.mean_sq_deviation, v, C * eps * terms["stat_scales"][1],
                   f"{label}: V")
    np.testing.assert_array_equal(new_stats.seen, seen, err_msg=f"{label}: seen")
    S.assert_close(gamma, terms["gamma"], C * eps * terms["gamma_scale"] + 1e-6, f"{label}: γ")
    # (c) classes without a valid row (even if padding rows carry their label) keep their state.
    absent = ~np.isin(np.arange(shape.num_classes), padded.batch.labels)
    for got, old, name in ((new_stats.sq_mean_norm, ex.stats[0], "A"),
                           (new_stats.mean_sq_deviation, ex.stats[1], "V"),
                           (new_stats.seen, ex.stats[2], "seen")):
      np.testing.assert_array_equal(np.asarray(got)[absent], np.asarray(old)[absent],
                                    err_msg=f"{label} (c): {name} of absent classes")
    # (d) no gradient reaches a padding row, whatever garbage it holds.
    for g, name in zip(grads, ("logits", "features")):
      np.testing.assert_array_equal(g[~batch.where], 0.0,
                                    err_msg=f"{label} (d): gradient of padding {name}")
    if np.isfinite(value):
      S.assert_finite([loss], f"{label} (b): loss")
      S.assert_finite(list(grads), f"{label} (b): gradients")
  # (e) and (f) gradients equal the single-device ones (rows permuted back).
  _, grads, _ = results["mr2_loss"]
  for label in results:
    if label == "mr2_loss":
      continue
    _, other, batch = results[label]
    inverse = np.argsort(ex.order) if "permuted" in label else np.arange(shape.batch)
    logit_floor = 1.0 / (float(np.min(terms["gamma"])) * max(padded.batch.rows, 1))
    for g, g_other, name, floor in zip(grads, other, ("logits", "features"),
                                       (logit_floor, terms["feature_floor"])):
      atol = C * eps * terms["amplification"] * (np.max(np.abs(g), initial=0.0) + floor) + 1e-30
      S.assert_close(g_other[inverse], g, atol, f"{label}: gradient of the {name}")


@pytest.mark.parametrize("form", mr2_jax.objective.FORMS)
@given(data=st.data())
def test_mr2_loss_padding_permutation_devices(form, data):
  check_mr2_padded(form, data.draw(padded_examples(padded_shapes(MR2_PADDED_POOL[form], S.WIDE))))


@pytest.mark.slow
@pytest.mark.parametrize("form", mr2_jax.objective.FORMS)
@S.SLOW
@given(data=st.data())
def test_mr2_loss_padding_permutation_devices_slow(form, data):
  check_mr2_padded(form, data.draw(padded_examples(padded_shapes(None, True))))


# ------------------------------------------------------------------------------------------------
# reweight_jax.inverse_reweighted_loss: state, `where`, permutation, devices, bf16 upcast
# ------------------------------------------------------------------------------------------------

REWEIGHT_MODES = {  # name → (macro, stop_gradient, max_weight)
    "reference": (True, False, 10.0),
    "stop_gradient_no_clip": (False, True, None),
}
REWEIGHT_POOL = {
    "reference": (S.Shape(64, 300, 1, S.BF16, 8),),
    "stop_gradient_no_clip": (S.Shape(16, 7, 1, S.F32, 4),),
}


@functools.cache
def reweight_fn(mode, devices):
  macro, stop_gradient, max_weight = REWEIGHT_MODES[mode]

  def run(per_example, labels, where, state, alpha, prior, gamma, refresh):
    rows = labels.shape[0]

    def objective(values):
      if devices > 1:
        values = jax.lax.dynamic_slice_in_dim(values, jax.lax.axis_index(AXIS) * rows, rows)
      loss, new_state, aux = reweight_jax.inverse_reweighted_loss(
          values, labels, state, alpha=alpha, prior=prior, gamma=gamma, max_weight=max_weight,
          macro=macro, stop_gradient=stop_gradient, refresh_macro=refresh,
          axis_name=AXIS if devices > 1 else None, where=where)
      return loss, (new_state, aux)
    (loss, (new_state, aux)), grad = jax.value_and_grad(objective, has_aux=True)(per_example)
    if devices == 1:
      return loss, new_state, aux, grad
    aux = aux._replace(example_weights=aux.example_weights)
    return (jax.lax.pmean(loss, AXIS), jax.tree.map(lambda x: x[None], new_state), aux,
            jax.lax.pmean(grad, AXIS))

  if devices == 1:
    return jax.jit(run)
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), (AXIS,),
                           axis_types=(jax.sharding.AxisType.Auto,))
  aux_specs = reweight_jax.ReweightAux(P(), P(), P(), P(), P(), P(AXIS))
  return jax.jit(jax.shard_map(
      run, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS), P(), P(), P(), P(), P()),
      out_specs=(P(), P(AXIS), aux_specs, P()), check_vma=False))


@dataclasses.dataclass
class ReweightExample:
  padded: S.Padded
  per_example: np.ndarray   # [bucket] in the dtype (garbage on padding rows)
  state: tuple
  alpha: float
  prior_kind: str
  gamma: float
  refresh: bool
  counts: np.ndarray
  order: np.ndarray


@st.composite
def reweight_examples(draw, shapes):
  shape = draw(shapes)
  padded = draw(S.padded_batches(shape))
  kind = draw(st.sampled_from(("positive", "with_zero_class", "equal")))
  values = np.abs(S.Batch.f64(padded.logits[:, 0]))
  real = padded.real
  if kind == "with_zero_class" and real.size:
    values[real[padded.batch.labels == padded.batch.labels[0]]] = 0.0
  elif kind == "equal":
    values[real] = padded.batch.logit_scale
  garbage = {"zeros": 0.0, "huge": 1e30, "nan": np.nan, "inf": np.inf}[padded.garbage]
  values[~padded.where] = garbage
  per_example = S._cast(values, shape.dtype)
  state = draw(S.reweight_arrays(shape.num_classes))
  alpha = draw(st.sampled_from((0.0, 0.1, 10.0)))
  prior_kind = draw(st.sampled_from(reweight_jax.PRIOR_KINDS))
  gamma = draw(st.sampled_from((0.0, 1.0, 2.0)))
  refresh = draw(st.booleans())
  counts = draw(S.class_counts(shape.num_classes))
  order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(shape.batch)
  note(f"shape {shape}; losses {kind}; {padded.describe()}; "
       f"α {alpha}, prior {prior_kind}, γ {gamma}, refresh {refresh}")
  return ReweightExample(padded, per_example, state, alpha, prior_kind, gamma, refresh, counts,
                         order)


def run_reweight(mode, devices, ex: ReweightExample, padded: S.Padded, per_example, dtype=None):
  batch_counts, beta = ex.state
  values = jnp.asarray(per_example) if dtype is None else jnp.asarray(per_example, dtype)
  out = reweight_fn(mode, devices)(
      values, jnp.asarray(padded.labels), jnp.asarray(padded.where),
      reweight_jax.ReweightState(jnp.asarray(batch_counts), jnp.asarray(beta)),
      jnp.asarray(ex.alpha, jnp.float32),
      reweight_jax.class_prior(jnp.asarray(ex.counts), ex.prior_kind),
      jnp.asarray(ex.gamma, jnp.float32), jnp.asarray(ex.refresh))
  loss, new_state, aux, grad = jax.device_get(out)
  if devices > 1:
    for leaf in jax.tree.leaves(new_state):
      np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape),
                                    err_msg="inverse_reweighted_loss (f): devices differ")
    new_state = jax.tree.map(lambda x: x[0], new_state)
  return float(loss), new_state, aux, np.asarray(grad, np.float64)


def check_reweight(mode, ex: ReweightExample):
  S.before_example()
  macro, stop_gradient, max_weight = REWEIGHT_MODES[mode]
  padded, shape = ex.padded, ex.padded.batch.shape
  num_classes = shape.num_classes
  rw = ml_collections.ConfigDict(dict(alpha=ex.alpha, prior=ex.prior_kind, gamma=ex.gamma,
                                      max_weight=max_weight, macro=macro))
  values = S.Batch.f64(ex.per_example)
  labels = np.where(padded.where, padded.labels, 0)
  # The library upcasts to float32: errors are float32 roundings of the (exact) inputs.
  errors = np.where(padded.where, 2 + np.log2(max(shape.batch, 2)), 0.0)
  loss, scale, state, w_hat, w_scale = reweight_reference(
      rw, np.where(padded.where, values, 0.0), errors, labels, num_classes, ex.state[0],
      ex.state[1], ex.refresh, ex.counts, where=padded.where)
  # ŵ and β are float32 computations: ε of float32 whatever the input dtype.
  eps = S.EPS32
  present = np.zeros(num_classes, bool)
  present[padded.batch.labels] = True
  rows = max(int(padded.where.sum()), 1)
  results = {}
  for devices, batch, per_example, label in (
      (1, padded, ex.per_example, "inverse_reweighted_loss"),
      (1, padded.permuted(ex.order), ex.per_example[ex.order], "inverse_reweighted_loss (e)"),
      (shape.devices, padded, ex.per_example, f"inverse_reweighted_loss (f) {shape.devices} dev")):
    got, new_state, aux, grad = run_reweight(mode, devices, ex, batch, per_example)
    results[label] = (got, grad)
    S.assert_close(got, loss, C * eps * scale + 1e-30, f"{label} (a, d): loss")
    np.testing.assert_array_equal(new_state.batch_counts, state["batch_counts"],
                                  err_msg=f"{label} (a, c): batch counts")
    S.assert_close(new_state.beta, state["beta"], C * eps * np.abs(state["beta"]), f"{label}: β")
    S.assert_close(aux.class_weights, w_hat, C * eps * w_scale + 1e-30, f"{label} (a): ŵ")
    np.testing.assert_array_equal(aux.present, present, err_msg=f"{label}: present")
    np.testing.assert_array_equal(aux.example_weights[~batch.where], 0.0,
                                  err_msg=f"{label} (d): weights of padding rows")
    np.testing.assert_array_equal(grad[~batch.where], 0.0,
                                  err_msg=f"{label} (d): gradient of padding rows")
    if stop_gradient:  # ∂loss/∂ℓ_i = ŵ_{y_i}/B (REWEIGHT: ŵ a constant)
      expected_grad = np.where(batch.where, w_hat[np.where(batch.where, batch.labels, 0)] / rows,
                               0.0)
      # (the gradient of a bf16 input is itself rounded to bf16: ε of the input dtype on top)
      weight_error = np.max(np.where(batch.where, w_scale[np.where(batch.where, batch.labels, 0)],
                                     0.0), initial=0.0) / rows
      S.assert_close(grad, expected_grad,
                     (4 * C * eps + 2 * S.eps(shape.dtype)) * np.abs(expected_grad)
                     + C * eps * weight_error, f"{label} (a): gradient = ŵ_y/B")
    if np.isfinite(loss):
      S.assert_finite([got], f"{label} (b): loss")
      S.assert_finite([grad], f"{label} (b): gradient")
  base_loss, base_grad = results["inverse_reweighted_loss"]
  for label, (got, grad) in results.items():
    if "(e)" in label:
      grad = grad[np.argsort(ex.order)]
    S.assert_close(grad, base_grad, (C * eps * 8 + 2 * S.eps(shape.dtype))
                   * np.max(np.abs(base_grad), initial=0.0) + 1e-30,
                   f"{label}: gradient vs the first call")
  # bfloat16 inputs are upcast: bit-for-bit the float32 call on the same values.
  if shape.dtype == S.BF16:
    f32 = run_reweight(mode, 1, ex, padded, S.Batch.f64(ex.per_example), jnp.float32)
    np.testing.assert_array_equal(f32[0], base_loss, err_msg="bf16 input not upcast (loss)")
    # The gradient of a bf16 input is bf16 (JAX casts the cotangent back): the rounded float32 one.
    np.testing.assert_array_equal(S.Batch.f64(S._cast(f32[3], S.BF16)), base_grad,
                                  err_msg="bf16 input not upcast (gradient)")


@pytest.mark.parametrize("mode", tuple(REWEIGHT_MODES))
@given(data=st.data())
def test_inverse_reweighted_loss(mode, data):
  check_reweight(mode, data.draw(reweight_examples(padded_shapes(REWEIGHT_POOL[mode], S.WIDE,
                                                                dims=(1,)))))


@pytest.mark.slow
@pytest.mark.parametrize("mode", tuple(REWEIGHT_MODES))
@S.SLOW
@given(data=st.data())
def test_inverse_reweighted_loss_slow(mode, data):
  check_reweight(mode, data.draw(reweight_examples(padded_shapes(None, True, dims=(1,)))))


# ------------------------------------------------------------------------------------------------
# Baselines' `where`: per-example values against the references, padding rows 0 without gradient
# ------------------------------------------------------------------------------------------------

BASELINES = ("cross_entropy", "focal", "ldam_drw", "logit_adjust", "balanced_softmax", "ib")
BASELINE_POOL = (S.Shape(64, 7, 4, S.BF16),)
FOCAL_GAMMA, LA_TAU = 2.0, 1.5


def _baselines(logits, features, labels, where, counts):
  weights = reweight_jax.baselines.class_balanced_weights(counts, 0.999)
  return {
      "cross_entropy": reweight_jax.cross_entropy_loss(logits, labels, where=where),
      "focal": reweight_jax.baselines.focal_loss(logits, labels, gamma=FOCAL_GAMMA, where=where),
      "ldam_drw": reweight_jax.baselines.ldam_loss(logits, labels, counts, class_weights=weights,
                                         where=where),
      "logit_adjust": reweight_jax.baselines.logit_adjusted_loss(logits, labels, counts, tau=LA_TAU,
                                                       where=where),
      "balanced_softmax": reweight_jax.baselines.balanced_softmax_loss(logits, labels, counts, where=where),
      "ib": reweight_jax.baselines.ib_loss(logits, labels, features,
                                 class_weights=reweight_jax.baselines.inverse_frequency_weights(counts),
                                 where=where),
  }


@jax.jit
def baselines_fn(logits, features, labels, where, counts):
  values = _baselines(logits, features, labels, where, counts)
  grads = {name: jax.grad(lambda z, x, n=name: jnp.sum(
      _baselines(z, x, labels, where, counts)[n].astype(jnp.float32)), argnums=(0, 1))(
          logits, features) for name in BASELINES}
  return values, grads


def baseline_references(z, x, y, counts):
  """name → (per-example values, error scales) in float64."""
  counts1 = np.maximum(counts.astype(np.float64), 1.0)
  ce = ref_rw._per_example_ce(z, y)
  ce_error, _ = ce_terms(z, y)
  raw = counts1 ** -0.25
  margins = raw * 0.5 / raw.max()
  ldam_eff = 30.0 * (z - np.eye(z.shape[1])[y] * margins)
  weights = ref_rw.class_balanced_weights(counts1, 0.999)
  ldam = ref_rw.ldam_loss(z, y, counts1, weights=weights)
  ldam_error, _ = ce_terms(ldam_eff, y, 30.0 * (np.max(np.abs(z), axis=1, initial=0) + 0.5))
  log_prior = np.log(counts1 / counts1.sum())
  out = {"cross_entropy": (ce, ce_error + np.abs(ce)),
         "focal": (ref_rw.focal_loss(z, y, FOCAL_GAMMA), (FOCAL_GAMMA + 1) * ce_error + np.abs(ce)),
         "ldam_drw": (ldam, weights[y] * ldam_error + 2 * np.abs(ldam))}
  for name, tau in (("logit_adjust", LA_TAU), ("balanced_softmax", 1.0)):
    values = (ref_rw.logit_adjusted_loss(z, y, counts1, tau) if name == "logit_adjust"
              else ref_rw.balanced_softmax_loss(z, y, counts1))
    error, _ = ce_terms(z + tau * log_prior, y, np.max(np.abs(z), axis=1, initial=0)
                        + 2 * np.max(np.abs(tau * log_prior)))
    out[name] = (values, error + np.abs(values))
  ib, ib_error, _, _ = ib_reference(z, y, x, counts1, 1000.0)
  out["ib"] = (ib, ib_error)
  return out


def check_baselines(padded: S.Padded, counts, order):
  S.before_example()
  shape = padded.batch.shape
  eps = S.eps(shape.dtype)
  batch = padded.batch
  expected = baseline_references(batch.f64(batch.logits), batch.f64(batch.features),
                                 batch.labels, counts)
  base = None
  for label, p in (("baselines", padded), ("baselines (e) permuted", padded.permuted(order))):
    values, grads = jax.device_get(baselines_fn(
        jnp.asarray(p.logits), jnp.asarray(p.features), jnp.asarray(p.labels),
        jnp.asarray(p.where), jnp.asarray(counts)))
    for name in BASELINES:
      got = np.asarray(values[name], np.float64)
      value, scale = expected[name]
      S.assert_close(got[p.real], value, C * eps * scale + 1e-30, f"{label} (a): {name}")
      np.testing.assert_array_equal(got[~p.where], 0.0, err_msg=f"{label} (d): {name} padding")
      for g, arg in zip(grads[name], ("logits", "features")):
        g = np.asarray(g, np.float64)
        np.testing.assert_array_equal(g[~p.where], 0.0,
                                      err_msg=f"{label} (d): {name} gradient of padding {arg}")
        finite_rows = np.isfinite(value)
        S.assert_finite([g[p.real][finite_rows]], f"{label} (b): {name} gradient of the {arg}")
    if base is None:
      base = values
    else:  # (e): the same per-example values, permuted (per-row computations: bit-for-bit)
      for name in BASELINES:
        np.testing.assert_array_equal(np.asarray(values[name])[np.argsort(order)],
                                      np.asarray(base[name]), err_msg=f"{label}: {name}")


@st.composite
def baseline_examples(draw, shapes):
  shape = draw(shapes)
  padded = draw(S.padded_batches(shape))
  counts = draw(S.class_counts(shape.num_classes))
  order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(shape.batch)
  note(f"shape {shape}; {padded.describe()}")
  return padded, counts, order


@given(data=st.data())
def test_baselines_where(data):
  check_baselines(*data.draw(baseline_examples(
      S.wide_shapes(S.BUCKETS) if S.WIDE else st.sampled_from(BASELINE_POOL))))


@pytest.mark.slow
@S.SLOW
@given(data=st.data())
def test_baselines_where_slow(data):
  check_baselines(*data.draw(baseline_examples(S.wide_shapes(S.BUCKETS))))
