"""experiments.methods.registry: every registry entry before and after its start epoch, against
the float64 NumPy references (what is computed, which state changes), under jit and without;
deferred entries compile to a conditional (one branch per step); config validation names the
field. The inverse reweighting around every method with a per-example loss
(`<method>+inverse_reweight`) is an entry like the others and is checked the same way."""

import dataclasses

import chex
import jax
import reweight_jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments.methods import registry
from experiments.methods.method import EpochPass
from experiments.methods.method import Mix
from experiments.methods.method import RecipeInputs
from experiments.methods.method import StepInfo
from experiments.common.errors import ConfigError
from experiments.configs import default
from experiments.configs import schema
from experiments.train import recipes
from tests.covering import covering
from tests.reference import numpy_comparisons as ref_cmp
from tests.reference import numpy_etf_dr as ref_etf
from tests.reference import numpy_fairdro as ref_fairdro
from tests.reference import numpy_glmc as ref_glmc
from tests.reference import numpy_jtt_lff as ref_lff
from tests.reference import numpy_mixed_labels as ref_mixed
from tests.reference import numpy_mr2 as ref_mr2
from tests.reference import numpy_reweight as ref_rw
from tests.reference import numpy_supcon as ref_supcon

K, B, D = 6, 24, 5
START = 3  # start epoch of every deferred entry here
COUNTS = np.array([60.0, 30.0, 15.0, 8.0, 4.0, 2.0])
RNG = jax.random.key(7)  # StepInfo.rng of every call here (EQL draws from it)
# The model outputs and dataset positions the wrapped entries read (SupCon's projection, LfF's
# biased logits and per-example EMAs over N training examples), fixed for every batch here.
N_TRAIN = 40
_extra = np.random.default_rng(11)
INDICES = _extra.permutation(N_TRAIN)[:B].astype(np.int32)
DATASET_LABELS = _extra.integers(0, K, N_TRAIN).astype(np.int32)
_z = _extra.normal(size=(B, 8))
PROJECTION = (_z / np.linalg.norm(_z, axis=1, keepdims=True)).astype(np.float32)
BIASED_LOGITS = _extra.normal(size=(B, K)).astype(np.float32)
_m = _extra.normal(size=(D, K))
ETF = (_m / np.linalg.norm(_m, axis=0)).astype(np.float32)  # unit columns (d = 5 < K: any M here)
# GLMC's paired batch: the rows are the two passes [x_g; x_l] (B/2 each), its extra heads' outputs,
# the partner labels and the step's λ.
LOGITS_FC = _extra.normal(size=(B, K)).astype(np.float32)
PREDICTION = _extra.normal(size=(B, 8)).astype(np.float32)
LABELS_B = _extra.integers(0, K, B).astype(np.int32)
LAM = 0.35
PAIRED = {"glmc", "glmc+inverse_reweight"}
LOSSES = tuple(registry.REGISTRY)
REWEIGHTED = "+inverse_reweight"


def step_info(epoch, step_in_epoch, rows=B, name=None):
  mix = (Mix(jnp.asarray(LABELS_B[:rows]), jnp.float32(LAM)) if name in PAIRED else None)
  return StepInfo(
      epoch=jnp.asarray(epoch), step_in_epoch=jnp.asarray(step_in_epoch),
      class_counts=jnp.asarray(COUNTS, jnp.float32), rng=RNG,
      recipe=RecipeInputs(
          outputs={"projection": jnp.asarray(PROJECTION[:rows]),
                   "biased_logits": jnp.asarray(BIASED_LOGITS[:rows]),
                   "etf_classifier": jnp.asarray(ETF), "logits_fc": jnp.asarray(LOGITS_FC[:rows]),
                   "prediction": jnp.asarray(PREDICTION[:rows])},
          indices=jnp.asarray(INDICES[:rows]), mix=mix))


def init_state(config):
  return registry.init_loss_state(config, K, DATASET_LABELS)


def config_for(loss: str) -> ml_collections.ConfigDict:
  """The shared defaults and every method's sub-tree (a test sets fields of several)."""
  config = default.get_config()
  config.loss = loss
  config = registry.with_method_trees(config, registry.CONFIG_TREES)
  config.reweight.start_epoch = START
  config.ldam.drw_epoch = START
  config.ib.start_epoch = START
  config.reweight.refresh = "step"
  config.eql.lam = 0.05  # classes 4 and 5 (f = 4/119, 2/119) are rare: some logits are dropped
  config.jtt.stage1 = "<stage-1 workdir: not read by the step>"
  if loss.startswith("etf_dr"):
    config.head = "etf"
  return config


def batch(seed=0, labels=None):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(B, K)).astype(np.float32)
  features = np.abs(rng.normal(size=(B, D))).astype(np.float32)
  if labels is None:
    labels = rng.integers(0, K - 1, size=B)  # class K−1 absent from the batch
  return logits, features, np.asarray(labels, np.int32)


def run(loss: str, epoch: int, jit: bool, seed=0, config=None):
  config = config or config_for(loss)
  loss_fn = registry.make_loss_fn(config)
  state = init_state(config)
  logits, features, labels = batch(seed)

  def call(logits, features, labels, state, epoch):
    return loss_fn(logits, features, labels, state, step_info(epoch, 1, name=loss))

  fn = jax.jit(call) if jit else call
  out = fn(logits, features, labels, state, jnp.asarray(epoch))
  return state, out, (logits, features, labels)


def per_example_reference(name: str, logits, features, labels):
  """float64 per-example losses of the methods whose entry is a plain mean of them."""
  del features
  if name in ("ce", "jtt"):
    return ref_rw._per_example_ce(logits, labels)
  if name == "focal":
    return ref_rw.focal_loss(logits, labels, gamma=1.0)
  if name == "ldam":
    return ref_rw.ldam_loss(logits, labels, COUNTS, max_margin=0.5, scale=30.0)
  if name == "logit_adjust":
    return ref_rw.logit_adjusted_loss(logits, labels, COUNTS, tau=1.0)
  if name == "balanced_softmax":
    return ref_rw.balanced_softmax_loss(logits, labels, COUNTS)
  if name == "eql":
    # The draws are an input of the loss: β from the library's per-row draw, the loss from NumPy.
    rare = COUNTS / COUNTS.sum() < 0.05
    dropped = np.asarray(reweight_jax.baselines.eql_dropped_at(RNG, np.arange(len(labels)), K, 0.9))
    return ref_cmp.eql_loss(logits, labels, rare, dropped)[0]
  return None


def reference_loss(name: str, logits, features, labels, state, epoch=0):
  """float64 NumPy value of entry `name` once active, from the spec formulas (tests/reference)."""
  base = name[:-len(REWEIGHTED)] if name.endswith(REWEIGHTED) else None
  if base is not None and per_example_reference(base, logits, features, labels) is not None:
    # The reweighting of the method's per-example losses (the batch's classes, first refresh).
    beta = ref_rw.macro_factor((np.bincount(labels, minlength=K) > 0).astype(float))
    return ref_rw.inverse_reweighted_loss_value(
        per_example_reference(base, logits, features, labels), labels, K, beta, np.ones(K))[0]
  if name == "ce":
    return np.mean(ref_rw._per_example_ce(logits, labels))
  if name == "mr2":
    cs = state["class_stats"]
    return ref_mr2.mr2_objective_paper(logits, features, labels, np.asarray(cs.sq_mean_norm),
                                       np.asarray(cs.mean_sq_deviation), np.asarray(cs.seen))[0]
  if name == "inverse_reweight":
    counts_after = np.bincount(labels, minlength=K) > 0
    beta = ref_rw.macro_factor(counts_after.astype(float))
    return ref_rw.inverse_reweighted_loss_value(ref_rw._per_example_ce(logits, labels), labels, K,
                                                beta, np.ones(K))[0]
  if name == "mr2+inverse_reweight":
    cs = state["class_stats"]
    a, v, seen = ref_mr2.update_class_stats(np.asarray(cs.sq_mean_norm),
                                            np.asarray(cs.mean_sq_deviation), np.asarray(cs.seen),
                                            features, labels, 0.9, 2.0)
    gamma = ref_mr2.class_margins(a, v, seen, 1.0)
    per_example = (ref_mr2.margin_cross_entropy(logits, labels, gamma) + 0.1 *
                   ref_mr2.representation_margin_loss(features, labels, ref_mr2.s_bar(v, seen)))
    beta = ref_rw.macro_factor((np.bincount(labels, minlength=K) > 0).astype(float))
    return ref_rw.inverse_reweighted_loss_value(per_example, labels, K, beta, np.ones(K))[0]
  if name in ("inv_freq", "class_balanced"):
    w = (ref_rw.inverse_frequency_weights(COUNTS) if name == "inv_freq"
         else ref_rw.class_balanced_weights(COUNTS, 0.9999))
    ce = ref_rw._per_example_ce(logits, labels)
    return np.sum(w[labels] * ce) / np.sum(w[labels])
  if name == "focal":
    return np.mean(ref_rw.focal_loss(logits, labels, gamma=1.0))
  if name in ("ldam", "ldam_drw"):
    per_example = ref_rw.ldam_loss(logits, labels, COUNTS, max_margin=0.5, scale=30.0)
    if name == "ldam":
      return np.mean(per_example)
    w = ref_rw.class_balanced_weights(COUNTS, 0.9999)[labels]
    return np.sum(w * per_example) / np.sum(w)
  if name == "logit_adjust":
    return np.mean(ref_rw.logit_adjusted_loss(logits, labels, COUNTS, tau=1.0))
  if name == "balanced_softmax":
    return np.mean(ref_rw.balanced_softmax_loss(logits, labels, COUNTS))
  if name == "ib":
    return np.mean(ref_rw.ib_loss(logits, labels, features, COUNTS, alpha=1000.0))
  if name == "group_dro":
    q = np.asarray(state["group_dro_q"], np.float64)
    return ref_cmp.group_dro_step(ref_rw._per_example_ce(logits, labels), labels, q, 0.01)[0]
  if name == "fairdro":
    q = np.asarray(state["fairdro_q"], np.float64)
    return ref_fairdro.step_loss(ref_rw._per_example_ce(logits, labels), labels, q)[0]
  if name == "eql":
    return np.mean(per_example_reference(name, logits, features, labels))
  if name == "jtt":  # JTT's step is ERM; its method is the sampler (tests/harness/methods/test_jtt.py)
    return np.mean(ref_rw._per_example_ce(logits, labels))
  if name == "supcon":  # joint: CE + λ·SupCon (λ = 1, τ = 0.1, τ_b = 0.07)
    return (np.mean(ref_rw._per_example_ce(logits, labels))
            + ref_supcon.supcon_mean(PROJECTION.astype(np.float64), labels, 0.1, 0.07))
  if name == "lff":  # from the fresh state: every row's first visit
    assert not np.any(np.asarray(state["lff"].seen))
    reference = ref_lff.LfFReference(DATASET_LABELS, K, q=0.7, alpha=0.7)
    return reference.step(BIASED_LOGITS.astype(np.float64), logits.astype(np.float64), labels,
                          INDICES)[0]
  if name == "etf_dr":  # DR onto M with GivenEw of the batch (features taken as the head's h)
    scale = ref_etf.given_ew(labels, K)
    return ref_etf.dot_regression(features, labels, ETF, scale)[0]
  if name in ("glmc", "glmc+inverse_reweight"):
    # The passes are rows [:B/2] (x_g) and [B/2:] (x_l), with the labels of the first.
    h = B // 2
    v = ref_glmc.class_weights(COUNTS, 1.2)
    alpha = ref_glmc.alpha(epoch, 200)
    loss, balanced, _, consistency = ref_glmc.glmc_loss(
        LOGITS_FC[:h], LOGITS_FC[h:], logits[:h], logits[h:], PREDICTION[:h], PROJECTION[:h],
        PREDICTION[h:], PROJECTION[h:], labels[:h], LABELS_B[:h], LAM, v, alpha, 1.0)[:4]
    if name == "glmc":
      return loss
    # L_reb ← 2 × the mixed-label reweighted CE of fc_cb pooled over both passes (PIPELINES §4).
    mass = (LAM * np.bincount(labels, minlength=K) + (1 - LAM) * np.bincount(LABELS_B, minlength=K))
    beta = ref_rw.macro_factor((mass > 0).astype(float))
    reweighted = ref_mixed.mixed_reweighted_loss_value(
        ref_rw._per_example_ce(logits, labels), ref_rw._per_example_ce(logits, LABELS_B), labels,
        LABELS_B, LAM, K, beta, np.ones(K))[0]
    return alpha * balanced + (1 - alpha) * 2 * reweighted + consistency
  if name == "etf_dr+inverse_reweight":  # ŵ on the per-label DR losses with E ≡ 1
    beta = ref_rw.macro_factor((np.bincount(labels, minlength=K) > 0).astype(float))
    return ref_rw.inverse_reweighted_loss_value(ref_etf.dot_regression(features, labels, ETF)[1],
                                                labels, K, beta, np.ones(K))[0]
  raise AssertionError(f"no reference for {name}")


def test_every_loss_has_a_reference_here():
  for name in LOSSES:
    logits, features, labels = batch()
    config = config_for(name)
    assert np.isfinite(reference_loss(name, logits, features, labels,
                                      init_state(config)))


@pytest.mark.parametrize("name, jit", covering([(n, j) for j in (True, False) for n in LOSSES]))
def test_entry_before_and_after_its_start(name, jit):
  entry = registry.get(name)
  before_epoch, after_epoch = START - 1, START
  for epoch, expected_entry in ((before_epoch, entry.before if entry.start else name),
                                (after_epoch, name)):
    state, (loss, new_state, metrics), (logits, features, labels) = run(name, epoch, jit)
    expected = reference_loss(expected_entry, logits, features, labels, state, epoch)
    np.testing.assert_allclose(float(loss), expected, rtol=2e-5, atol=1e-6,
                               err_msg=f"{name} at epoch {epoch} should compute {expected_entry}")
    assert set(new_state) == set(state)
    present = np.bincount(labels, minlength=K) > 0
    if name in PAIRED:  # a mixed batch: classes with mass λ·n_a + (1 − λ)·n_b > 0
      present = present | (np.bincount(LABELS_B, minlength=K) > 0)
    for field in state:
      new, old = new_state[field], state[field]
      trained = registry.get(expected_entry)
      updates = field in {**trained.state, **trained.example_state}
      if field == "class_stats":
        changed = np.asarray(new.seen) != np.asarray(old.seen)
        np.testing.assert_array_equal(changed, present if updates else np.zeros(K, bool))
      if field == "reweight":
        counts = np.asarray(new.batch_counts) - np.asarray(old.batch_counts)
        np.testing.assert_array_equal(counts, present.astype(float) if updates else np.zeros(K))
      if field == "lff":  # the EMAs are written at the batch's dataset positions only
        seen = np.zeros(N_TRAIN, bool)
        seen[INDICES] = updates
        np.testing.assert_array_equal(np.asarray(new.seen), seen)
      if field == "group_dro_q":  # absent classes keep their relative mass (exp(0), renormalised)
        ratio = np.asarray(new, np.float64) / np.asarray(old, np.float64)
        np.testing.assert_allclose(ratio[~present], ratio[~present][0], rtol=1e-6)
        assert np.all(ratio[present] > ratio[~present][0])  # positive losses gain mass
        np.testing.assert_allclose(np.sum(new), 1.0, rtol=1e-6)
    if "class_weight" in metrics:
      weights = np.asarray(metrics["class_weight"])
      # Not computed before the start: NaN, never a made-up weight.
      assert np.all(np.isnan(weights)) == (epoch < START and name != expected_entry)


def _deferral_conditionals(config, logits, features, labels, state, info) -> int:
  """Conditionals at the loss function's top level: the deferral's switch. Those nested inside the
  losses (the label log-softmax's overflow fallback, ℓ_s̄'s branch choice) are not counted."""
  jaxpr = jax.make_jaxpr(registry.make_loss_fn(config))(logits, features, labels, state, info)
  return sum(eqn.primitive.name == "cond" for eqn in jaxpr.jaxpr.eqns)


def test_deferred_entries_compile_one_conditional_and_others_none():
  logits, features, labels = batch()
  for name in LOSSES:
    config = config_for(name)
    state = init_state(config)
    info = step_info(0, 0, name=name)
    deferred = registry.get(name).start is not None
    assert _deferral_conditionals(config, logits, features, labels, state, info) == deferred, name
    if deferred:  # started at epoch 0: no conditional at all
      config = config_for(name)
      config[registry.get(name).start.split(".")[0]][registry.get(name).start.split(".")[1]] = 0
      assert _deferral_conditionals(config, logits, features, labels, state, info) == 0, name


def test_deferred_gradient_is_the_before_entrys_gradient():
  config = config_for("mr2+inverse_reweight")
  state = init_state(config)
  logits, features, labels = batch()
  info = step_info(START - 1, 0)
  grad = jax.grad(lambda z: registry.make_loss_fn(config)(z, features, labels, state, info)[0])
  mr2_config = config_for("mr2")
  mr2_grad = jax.grad(lambda z: registry.make_loss_fn(mr2_config)(z, features, labels, state,
                                                                 info)[0])
  chex.assert_trees_all_close(grad(logits), mr2_grad(logits), rtol=1e-6, atol=1e-7)


def test_registry_entries_are_well_formed():
  for name, entry in registry.REGISTRY.items():
    assert entry.name == name
    assert set(entry.reads) <= set(registry.CONFIG_TREES), name
    assert set(entry.trees) <= set(entry.reads), name
    if entry.start is not None:
      assert entry.start.split(".")[0] in entry.reads, name
      assert entry.before in registry.REGISTRY and registry.get(entry.before).start is None, name


@pytest.mark.parametrize("field, value, message", [
    ("loss", "nope", "config.loss: unknown loss 'nope'"),
    ("mr2.decay", 1.0, "config.mr2.decay"),
    ("mr2.form", "other", "config.mr2.form"),
    ("reweight.prior", "zipf", "config.reweight.prior"),
    ("reweight.start_epoch", -1, "config.reweight.start_epoch"),
    ("ldam.drw_beta", 1.0, "config.ldam.drw_beta"),
    ("focal.gamma", -1.0, "config.focal.gamma"),
])
def test_validation_names_the_field(field, value, message):
  loss = {"mr2": "mr2", "reweight": "inverse_reweight", "ldam": "ldam_drw",
          "focal": "focal"}.get(field.split(".")[0], "ce")
  config = config_for(loss)
  head, *rest = field.split(".")
  if rest:
    config[head][rest[0]] = value
  else:
    config[head] = value
  with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
    schema.validate_method(config)


def test_combination_refuses_the_released_form_and_ldam_the_double_cosine_scale():
  config = config_for("mr2+inverse_reweight")
  config.mr2.form = "released"
  with pytest.raises(ConfigError, match="paper form only"):
    schema.validate_method(config)
  config = config_for("ldam")
  config.head = "cosine"
  with pytest.raises(ConfigError, match="ldam.scale"):
    schema.validate_method(config)


@pytest.mark.parametrize("name", LOSSES)
def test_out_of_range_label_is_nan_and_counted_in_no_class_under_jit(name):
  """The one label guard (`mr2_reweight_core.checks.index_labels` / `take_class_values`) in every entry:
  a label outside [0, K) under jit makes the batch loss NaN — never the loss of a clipped class —
  and changes no per-class state: the state equals the update without that row."""
  config = config_for(name)
  for field in ("reweight.start_epoch", "ldam.drw_epoch", "ib.start_epoch"):
    head, tail = field.split(".")
    config[head][tail] = 0
  loss_fn = jax.jit(registry.make_loss_fn(config))
  state = init_state(config)
  logits, features, labels = batch(seed=3)
  info = step_info(0, 0, name=name)
  bad = labels.copy()
  # JAX indexing would clip this to class K − 1. GLMC's loss reads the labels of its first pass
  # (the rows of the second are the same examples): the bad label goes there.
  bad[0 if name in PAIRED else -1] = K
  loss, new_state, _ = loss_fn(logits, features, bad, state, info)
  assert np.isnan(float(loss)), name
  if name in PAIRED:  # its rows are two passes of one batch (no odd row count to compare with):
    # the bad label part counts in no class; its partner label and the other rows do.
    if "reweight" in state:
      good = np.bincount(np.delete(labels, 0), minlength=K) + np.bincount(LABELS_B, minlength=K)
      np.testing.assert_array_equal(np.asarray(new_state["reweight"].batch_counts),
                                    (good > 0).astype(np.float32))
    return
  _, clean_state, _ = loss_fn(logits[:-1], features[:-1], labels[:-1], state,
                              step_info(0, 0, rows=B - 1, name=name))
  # Every carried state counts the bad row in its `skipped_rows` and is otherwise the clean one.
  skipped = {jax.tree_util.keystr(path): int(leaf) for path, leaf
             in jax.tree_util.tree_leaves_with_path(new_state) if "skipped_rows" in str(path)}
  assert set(skipped.values()) <= {1}, skipped
  assert bool(skipped) == any(key in state for key in ("class_stats", "reweight", "lff")), skipped
  counted = jax.tree_util.tree_map_with_path(
      lambda path, leaf: 0 if "skipped_rows" in str(path) else leaf, new_state)
  uncounted = jax.tree_util.tree_map_with_path(
      lambda path, leaf: 0 if "skipped_rows" in str(path) else leaf, clean_state)
  chex.assert_trees_all_close(counted, uncounted, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("schedule, clip", [("linear", False), ("cos", True)])
def test_epoch_end_hook_sets_fairdro_q_from_the_training_pass(schedule, clip):
  """FairDRO's q after three epochs of hook calls against the float64 loop reference (classes
  without training examples left out), and the step loss reads the new q; entries without the
  hook have none."""
  assert [n for n in LOSSES if registry.get(n).recipe.epoch_end is not None] == ["fairdro"]
  config = config_for("fairdro")
  config.fairdro.schedule, config.fairdro.clip, config.fairdro.rho = schedule, clip, 0.3
  epoch_end = recipes.of(config).epoch_end
  state = init_state(config)
  rng = np.random.default_rng(0)
  q_ref = np.full(K, 1.0 / K)
  for epoch in range(3):
    counts = rng.integers(1, 50, K).astype(np.float32)
    counts[-1] = 0.0  # a class without training examples
    loss_sums = (counts * rng.uniform(0.2, 2.0, K)).astype(np.float32)
    epoch_pass = EpochPass(loss_sums=jnp.asarray(loss_sums), correct=jnp.zeros(K),
                                  counts=jnp.asarray(counts))
    state = epoch_end(state, epoch_pass, epoch, 5)
    means = np.where(counts > 0, loss_sums.astype(np.float64) / np.maximum(counts, 1), np.nan)
    q_star = ref_fairdro.best_response(means, 0.3, present=counts > 0, clip=clip)
    q_ref = ref_fairdro.update(q_ref, q_star, epoch, 5, schedule)
    np.testing.assert_allclose(np.asarray(state["fairdro_q"]), q_ref, rtol=1e-5, atol=1e-6)
  logits, features, labels = batch()
  loss, new_state, _ = registry.make_loss_fn(config)(logits, features, labels, state,
                                                   step_info(0, 0))
  expected = ref_fairdro.step_loss(ref_rw._per_example_ce(logits, labels), labels, q_ref)[0]
  np.testing.assert_allclose(float(loss), expected, rtol=2e-5)
  chex.assert_trees_all_equal(new_state, state)  # the step does not move q


@pytest.mark.parametrize("loss, field, value, message", [
    ("focal", "mixup_alpha", 1.0, "does not take mixup batches"),
    ("ce", "views", 3, "mixup batches are single-view"),
    ("etf_dr", "head", "linear", "set config.head='etf'"),
])
def test_mixup_and_etf_head_are_refused_where_they_do_not_apply(loss, field, value, message):
  config = config_for(loss)
  if field == "views":
    config.mixup_alpha = 1.0
  config[field] = value
  with pytest.raises(ConfigError, match=message):
    schema.validate_method(config)


def _with_mix(info, labels_b, lam):
  return info._replace(recipe=info.recipe._replace(
      mix=Mix(jnp.asarray(labels_b), jnp.float32(lam))))


def _depends_on_mix(name) -> bool:
  """Whether entry `name`'s loss (from its first step: no deferred phase) is computed from the mix
  it is given: whether the partner labels or λ reach the loss in its jaxpr."""
  config = config_for(name)
  entry = registry.get(name)
  if entry.start is not None:
    config[entry.start.split(".")[0]][entry.start.split(".")[1]] = 0
  loss_fn = registry.make_loss_fn(config)
  logits, features, labels = batch(seed=5)
  state, info = init_state(config), step_info(0, 1, name=name)

  def loss_of(labels_b, lam):
    return loss_fn(logits, features, labels, state, _with_mix(info, labels_b, lam))[0]
  closed = jax.make_jaxpr(loss_of)(jnp.asarray(LABELS_B), jnp.float32(LAM))
  reached = set(closed.jaxpr.invars)
  for eqn in closed.jaxpr.eqns:  # an equation's outputs depend on the mix if an input does
    if any(not isinstance(v, jax.extend.core.Literal) and v in reached for v in eqn.invars):
      reached.update(eqn.outvars)
  return closed.jaxpr.outvars[0] in reached


@pytest.mark.parametrize("name", LOSSES)
def test_an_entry_depends_on_the_mix_exactly_where_its_method_says_it_reads_it(name):
  """`Method.reads_mix` is the one statement of whether a method trains on mixed batches
  (`registry.takes_mixup` derives from it): the registry gives the mix only to a loss that
  declares it, and here every entry's loss is computed from the mix it is given exactly where
  it declares it (a deferred entry's earlier phase is its before entry, an entry of its own; an
  LfF marked reads_mix=True fails here: the next test). A mixup method's loss uses the mix as
  mixup says: with partner labels y_b it is its plain loss on y at λ = 1 and on y_b at λ = 0, in
  both phases."""
  entry = registry.get(name)
  assert _depends_on_mix(name) == entry.reads_mix, name
  if not registry.takes_mixup(name):
    return
  logits, features, labels = batch(seed=5)
  labels_b = np.roll(labels, 3)
  for epoch in ((START - 1, START) if entry.start else (0,)):
    config = config_for(name)
    loss_fn = registry.make_loss_fn(config)
    state = init_state(config)
    info = step_info(epoch, 1, name=name)
    plain = info._replace(recipe=info.recipe._replace(mix=None))
    for lam, expected_labels in ((1.0, labels), (0.0, labels_b)):
      got, *_ = loss_fn(logits, features, labels, state, _with_mix(info, labels_b, lam))
      want, *_ = loss_fn(logits, features, expected_labels, state, plain)
      np.testing.assert_allclose(float(got), float(want), rtol=1e-5, atol=1e-6,
                                 err_msg=f"{name} at epoch {epoch}, λ = {lam}")


def test_a_flag_that_disagrees_with_the_loss_is_seen(monkeypatch):
  """What the test above catches: an LfF that declared reads_mix=True (so mixup batches would be
  let through) does not depend on the mix; a CE that declared reads_mix=False is given none (its
  mixed batches would train against their plain labels: refused by the config check)."""
  monkeypatch.setitem(registry.REGISTRY, "lff",
                      dataclasses.replace(registry.get("lff"), reads_mix=True))
  assert registry.takes_mixup("lff")  # what the flag alone would let through
  assert not _depends_on_mix("lff")
  assert _depends_on_mix("ce")
  monkeypatch.setitem(registry.REGISTRY, "ce",
                      dataclasses.replace(registry.get("ce"), reads_mix=False))
  assert not _depends_on_mix("ce")


TRACEABLE = [(name, field) for name in LOSSES for field in registry.traceable_fields(name)]


def test_every_method_declares_its_traceable_fields_as_numbers_of_its_trees():
  assert ("mr2", "mr2.lam") in TRACEABLE and ("inverse_reweight", "reweight.alpha") in TRACEABLE
  for key, tree in registry.CONFIG_TREES.items():
    defaults = tree.defaults()
    for field in tree.traceable:
      assert isinstance(defaults[field], float), (key, field)


@pytest.mark.parametrize("name, field", covering(TRACEABLE))
def test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss(name, field):
  """`StepInfo.swept` under `vmap` (a sweep's step): each member's loss, state and gradient equal
  the loss built with that value in the config, after the start epoch (where a deferred entry's
  own settings are read)."""
  key, leaf = field.split(".")
  # Values where each field changes this batch's loss, state or gradient (the clip binds).
  values = {"decay": [0.5, 0.8], "max_weight": [1.1, 3.0]}.get(leaf, [0.05, 0.7])
  logits, features, labels = batch(3)
  # The state after steps on other batches: a fresh state's counters and statistics are empty,
  # which γ (the macro factor of the counts before the batch) and the EMA decay do not act on.
  # Two steps, the second on classes 0-2 only, so that the counters differ between classes.
  state = init_state(config_for(name))
  for before in (batch(4), batch(5, labels=np.arange(B) % 3)):
    state = registry.make_loss_fn(config_for(name))(
        *map(jnp.asarray, before), state, step_info(START, 0, name=name))[1]

  def loss_of(fn, swept):
    def scalar(lg, ft):
      info = step_info(START, 1, name=name)._replace(swept=swept)
      loss, new_state, _ = fn(lg, ft, labels, state, info)
      return loss, new_state
    (loss, new_state), grads = jax.value_and_grad(scalar, argnums=(0, 1), has_aux=True)(
        jnp.asarray(logits), jnp.asarray(features))
    return loss, new_state, grads

  traced = jax.jit(jax.vmap(lambda v: loss_of(registry.make_loss_fn(config_for(name)),
                                              {field: v})))(jnp.asarray(values, jnp.float32))
  for index, value in enumerate(values):
    config = config_for(name)
    config[key][leaf] = value
    static = jax.jit(lambda: loss_of(registry.make_loss_fn(config), {}))()
    member = jax.tree.map(lambda x, i=index: x[i], traced)
    chex.assert_trees_all_close(member, static, rtol=2e-5, atol=1e-6)
  # The values matter (a field the loss ignored would pass the comparison above); but GLMC's
  # partner labels here hold every class, so every class is in every mixed batch, its counters
  # are equal and γ has nothing to act on.
  if (name, field) == ("glmc+inverse_reweight", "reweight.gamma"):
    return
  first, second = (jax.tree.map(lambda x, i=i: np.asarray(x[i]), traced) for i in (0, 1))
  assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(first),
                                                   jax.tree.leaves(second)))


def test_a_traced_zero_lam_computes_the_representation_margin_that_a_static_zero_skips():
  """What docs/guides/harness.md says of a sweep member at λ = 0: the loss and its gradient are
  the solo run's (λ · ℓ_s̄ = 0), but the logged ℓ_s̄ is computed (a Python 0 skips it: zeros)."""
  logits, features, labels = (jnp.asarray(x) for x in batch(3))
  state = init_state(config_for("mr2"))
  config = config_for("mr2")
  config.mr2.lam = 0.0

  def run_with(swept):
    def scalar(f):
      info = step_info(START, 1, name="mr2")._replace(swept=swept)
      loss, _, metrics = registry.make_loss_fn(config)(logits, f, labels, state, info)
      return loss, metrics
    return jax.value_and_grad(scalar, has_aux=True)(features)

  (static_loss, static_metrics), static_grad = jax.jit(lambda: run_with({}))()
  (traced_loss, traced_metrics), traced_grad = jax.jit(
      lambda v: run_with({"mr2.lam": v}))(jnp.float32(0.0))
  chex.assert_trees_all_close((static_loss, static_grad), (traced_loss, traced_grad), rtol=1e-6)
  assert float(static_metrics["representation_margin"]) == 0.0
  assert float(traced_metrics["representation_margin"]) > 0.0


@pytest.mark.parametrize("name", ["mr2", "mr2+inverse_reweight"])
def test_l2_features_are_what_mr2_reads_against_the_float64_reference(name):
  """`config.mr2.features='l2'`: MR2's statistics and ℓ_s̄ read φ/‖φ‖₂ (the head's logits are
  given): the loss equals the spec's objective on the normalised features, float64, and the raw
  features' loss differs. The combination's per-example terms read them too."""
  config = config_for(name)
  config.mr2.features = "l2"
  config.mr2.p = 3.0
  schema.validate_method(config)
  state, (loss, new_state, _), (logits, features, labels) = run(name, START, True, seed=2,
                                                                config=config)
  unit = features.astype(np.float64) / np.linalg.norm(features.astype(np.float64), axis=1,
                                                      keepdims=True)
  cs = state["class_stats"]
  a, v, seen = (np.asarray(x) for x in (cs.sq_mean_norm, cs.mean_sq_deviation, cs.seen))
  expected, a_new, _, _, gamma, s_bar = ref_mr2.mr2_objective_paper(logits, unit, labels, a, v,
                                                                     seen, p=3.0)
  if name.endswith(REWEIGHTED):
    per_example = (ref_mr2.margin_cross_entropy(logits, labels, gamma) +
                   0.1 * ref_mr2.representation_margin_loss(unit, labels, s_bar))
    beta = ref_rw.macro_factor((np.bincount(labels, minlength=K) > 0).astype(float))
    expected = ref_rw.inverse_reweighted_loss_value(per_example, labels, K, beta, np.ones(K))[0]
  np.testing.assert_allclose(float(loss), expected, rtol=2e-5)
  np.testing.assert_allclose(np.asarray(new_state["class_stats"].sq_mean_norm), a_new, rtol=2e-5)
  raw = config_for(name)
  raw.mr2.p = 3.0
  _, (raw_loss, _, _), _ = run(name, START, True, seed=2, config=raw)
  assert abs(float(raw_loss) - float(loss)) > 1e-3


@pytest.mark.parametrize("p, form, uniform, refused", [
    (None, "paper", False, True), (2.0, "released", False, True), (None, "released", False, False),
    (3.0, "paper", False, False), (None, "paper", True, False)])
def test_l2_features_refuse_the_p_that_makes_every_margin_equal(p, form, uniform, refused):
  """On unit vectors a_k + v_k = 1 at p = 2: every γ_k would be c̄ without saying so."""
  config = config_for("mr2")
  config.mr2.update(features="l2", p=p, form=form, uniform_margin=uniform)
  if refused:
    with pytest.raises(ConfigError, match=r"config\.mr2\.p: .*features='l2'"):
      schema.validate_method(config)
  else:
    schema.validate_method(config)
