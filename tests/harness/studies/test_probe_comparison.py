"""experiments/studies/probe_comparison*.py on tiny synthetic features (no data, seconds): every method trains
end to end, JTT's stage 2 reads the up-sampled epochs, LfF's first step is the library's loss,
FairDRO's q follows the epoch-end passes, tuning selects on validation only, and the reports are
written from the run files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reweight_jax
from experiments.data.holdout import stratified_holdout
from experiments.probe import adapter
from experiments.probe import lff
from experiments.probe import linear_head as lp
from experiments.studies import probe_comparison as pc
from experiments.studies import probe_comparison_methods
from tests.reference import numpy_fairdro as ref_fairdro

N, D = 320, 12
RECIPE = lp.ProbeSchedule(learning_rate=0.05, epochs=2, batch_size=32)


def synthetic(seed=0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(lp.NUM_CLASSES), N // lp.NUM_CLASSES).astype(np.int64)
  centres = rng.normal(size=(lp.NUM_CLASSES, D))
  spread = np.linspace(0.5, 2.5, lp.NUM_CLASSES)[labels, None]  # easy to hard classes
  return (centres[labels] + spread * rng.normal(size=(N, D))).astype(np.float32), labels


# EQL (the per-step rng) in the default run; every other method has its own test below or is a
# registry entry tested in tests/harness/losses/test_registry.py, so the sweep over all of them is slow.
@pytest.mark.parametrize("name", [name if name == "eql" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in probe_comparison_methods.METHODS])
def test_every_method_trains_with_each_candidate_shape(name):
  features, labels = synthetic()
  params = probe_comparison_methods.METHODS[name].candidates()[-1]
  flipped = features + 0.1 * np.random.default_rng(1).normal(size=features.shape).astype(np.float32)
  head, epoch_losses, _ = probe_comparison_methods.train_method(name, params, features, labels, RECIPE, seed=0,
                                               flipped=flipped)
  assert len(epoch_losses) == RECIPE.epochs and np.all(np.isfinite(epoch_losses))
  accuracy = probe_comparison_methods.class_accuracy(name, head, features, labels)
  assert np.mean(accuracy) > 0.3, name  # learnt something (chance is 0.1)


def test_jtt_stage_two_reads_each_error_example_one_plus_upweight_times(monkeypatch):
  features, labels = synthetic()
  seen = []
  real_train = lp.train_probe

  def recording(method, f, y, recipe, seed, num_classes=lp.NUM_CLASSES, epoch_order=None):
    if epoch_order is not None:
      seen.append([np.asarray(epoch_order(e)) for e in range(recipe.epochs)])
    return real_train(method, f, y, recipe, seed, num_classes, epoch_order)

  monkeypatch.setattr(lp, "train_probe", recording)
  _, _, record = probe_comparison_methods.train_method("jtt", {"jtt.stage1_epochs": 1, "jtt.upweight": 3},
                                      features, labels, RECIPE, seed=0)
  stage1, _ = real_train("erm", features, labels, RECIPE._replace(epochs=1), 0)
  errors = np.argmax(np.asarray(lp.logits_of(stage1.params, jnp.asarray(features))), 1) != labels
  assert record["jtt_error_set_size"] == int(errors.sum()) > 0
  assert record["jtt_epoch_length"] == N + 3 * int(errors.sum())
  (orders,) = seen
  for order in orders:
    np.testing.assert_array_equal(np.bincount(order, minlength=N), 1 + 3 * errors)
  assert not np.array_equal(orders[0], orders[1])  # a new order each epoch


def test_lff_first_step_is_the_library_loss():
  """The probe's LfF step (the registry's 'lff' entry on the twin heads) against
  `reweight_jax.baselines.lff_loss` of the two heads' logits; the debiased head starts as ERM's head."""
  features, labels = synthetic()
  recipe = RECIPE._replace(epochs=1)
  optimizer = lp.make_optimizer(recipe, 1)
  key = jax.random.key(0)
  state = lp.init_state(key, D, lp.NUM_CLASSES, optimizer, recipe.init_std, lff.lff_key(0.7, 0.7),
                        head=lff.TWIN_HEADS, train_labels=labels)
  params = state.params
  np.testing.assert_array_equal(params["debiased"]["kernel"],
                                lp.init_params(key, D, lp.NUM_CLASSES, recipe.init_std)["kernel"])
  batches = lp.epoch_batches(N, recipe.batch_size, 0, 0)[:1]
  epoch = lff.make_lff_epoch(recipe, 1, 0.7, 0.7)
  _, loss = epoch(state, jnp.asarray(features), jnp.asarray(labels, jnp.int32), batches,
                  jnp.asarray(0), jax.random.key(0))
  x = jnp.asarray(features)[batches[0]]
  expected, _, _ = reweight_jax.baselines.lff_loss(
      lp.logits_of(params["biased"], x), lp.logits_of(params["debiased"], x),
      jnp.asarray(labels)[batches[0]], jnp.asarray(batches[0]), reweight_jax.baselines.init_lff_state(N),
      jnp.asarray(labels), q=0.7, alpha=0.7)
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-6)


def test_fairdro_q_follows_the_epoch_end_passes(monkeypatch):
  """The probe's FairDRO run: the final q equals the smoothed best responses to the per-class CE
  of a pass after each epoch, replayed in float64 NumPy from the heads the passes saw."""
  features, labels = synthetic()
  heads = []
  real_sums = lp.class_loss_sums

  def recording(params, f, y, num_classes):
    heads.append(jax.tree.map(np.asarray, params))
    return real_sums(params, f, y, num_classes)

  monkeypatch.setattr(lp, "class_loss_sums", recording)
  recipe = RECIPE._replace(epochs=3)
  state, _ = lp.train_probe(probe_comparison_methods.loss_key(probe_comparison_methods.METHODS["fairdro"], {"fairdro.rho": 0.5}),
                            features, labels, recipe, seed=0)
  assert len(heads) == recipe.epochs
  q = np.full(lp.NUM_CLASSES, 1.0 / lp.NUM_CLASSES)
  x = features.astype(np.float64)
  for epoch, head in enumerate(heads):
    logits = x @ head["kernel"].astype(np.float64) + head["bias"]
    shifted = logits - logits.max(1, keepdims=True)
    ce = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(N), labels]
    class_loss = np.bincount(labels, ce, lp.NUM_CLASSES) / np.bincount(labels, None, 10)
    q = ref_fairdro.update(q, ref_fairdro.best_response(class_loss, 0.5), epoch, recipe.epochs,
                           "linear")
  np.testing.assert_allclose(np.asarray(state.loss_state["fairdro_q"]), q, rtol=1e-4, atol=1e-5)
  assert np.std(q) > 1e-3  # the synthetic classes differ in difficulty: q is not uniform


def test_tune_scores_on_validation_and_records_the_choice(monkeypatch, tmp_path):
  features, labels = synthetic()
  scored = []
  real_accuracy = lp.class_accuracy

  def recording(params, f, y):
    scored.append(len(y))
    return real_accuracy(params, f, y)

  monkeypatch.setattr(lp, "class_accuracy", recording)
  record = probe_comparison_methods.tune(features, labels, RECIPE, ["erm", "focal"], seeds=(0,),
                        log=lambda *_: None)
  held_out = stratified_holdout(labels, lp.NUM_CLASSES, probe_comparison_methods.VALIDATION_FRACTION, seed=0)[1]
  assert set(scored) == {len(held_out)}  # every score on the held-out rows, never training rows
  focal = record["methods"]["focal"]
  assert len(focal["candidates"]) == len(probe_comparison_methods.METHODS["focal"].candidates())
  best = max(focal["candidates"], key=lambda c: (c["val_worst_class"], c["val_mean_class"]))
  assert focal["chosen"] == best["params"]
  assert record["methods"]["erm"]["chosen"] == {}


def test_report_from_run_files(tmp_path):
  rng = np.random.default_rng(0)
  (tmp_path / "runs").mkdir()
  for seed in range(3):
    for name in ("erm", "mr2", "uniform_gamma", "group_dro", "jtt"):
      run = {"setting": "balanced", "method": name, "seed": seed, "params": {"x": 1},
             "recipe": RECIPE._asdict(), "resolution": 128, "wall_s": 1.0,
             "class_accuracy": rng.uniform(0.5, 1.0, 10).tolist()}
      (tmp_path / "runs" / f"{name}-seed{seed}.json").write_text(json.dumps(run))
  assert pc.main(["--noxla_cpu_tuning", "report", f"--out={tmp_path}"]) == 0
  tables = (tmp_path / "tables.md").read_text()
  assert "| group_dro |" in tables and "Paired Δ vs ERM" in tables
  results = json.loads((tmp_path / "results.json").read_text())
  assert results["seeds"] == [0, 1, 2]
  assert set(results["summaries"]["balanced"]["methods"]) == {"erm", "mr2", "uniform_gamma",
                                                               "group_dro", "jtt"}
  # MR2 against its control, paired per seed: the Overall Δ of the table against NumPy.
  runs = {(p.stem.rsplit("-seed", 1)[0], int(p.stem.rsplit("seed", 1)[1])):
          np.asarray(json.loads(p.read_text())["class_accuracy"]) for p in
          (tmp_path / "runs").glob("*.json")}
  delta = [100 * (runs["mr2", s].mean() - runs["uniform_gamma", s].mean()) for s in range(3)]
  row = next(line for line in tables.splitlines() if line.startswith("| mr2 − uniform_gamma |"))
  from scipy import stats
  low, high = stats.t.interval(0.95, 2, loc=np.mean(delta), scale=stats.sem(delta))
  assert row.split("|")[2].strip() == f"{np.mean(delta):+.2f} [{low:+.2f}, {high:+.2f}] " + (
      f"({sum(d > 0 for d in delta)}/3)")
  assert (tmp_path / "tradeoff.png").stat().st_size > 0


def test_adapter_step_is_ce_on_both_views_plus_lambda_supcon():
  """The adapter setting's first-epoch loss (one step) against CE on the 2B views plus λ·SupCon of
  the projections computed here from the library functions; λ = 0 is ERM on the same adapter."""
  features, labels = synthetic()
  flipped = features[:, ::-1].copy()
  recipe = RECIPE._replace(epochs=1)
  batches = lp.epoch_batches(N, recipe.batch_size, 0, 0)[:1]
  params = adapter.init_adapter(jax.random.key(0), D, lp.NUM_CLASSES, recipe.init_std)
  x = jnp.concatenate([features[batches[0]], flipped[batches[0]]])
  y = jnp.concatenate([labels[batches[0]], labels[batches[0]]]).astype(jnp.int32)
  logits, _, outputs = adapter.Adapter().apply({"params": params}, x)
  ce = float(jnp.mean(reweight_jax.cross_entropy_loss(logits, y)))
  supcon = float(reweight_jax.baselines.supcon_loss(outputs["projection"], y, temperature=0.1)[0])
  optimizer = lp.make_optimizer(recipe, 1)
  views = jnp.asarray(np.stack([features, flipped]))
  for lam in (0.0, 0.5):
    state = lp.ProbeState(params, optimizer.init(params), {})
    _, loss = adapter.make_adapter_epoch(recipe, 1, lam, 0.1)(
        state, views, jnp.asarray(labels, jnp.int32), batches, jnp.asarray(0), jax.random.key(0))
    np.testing.assert_allclose(float(loss), ce + lam * supcon, rtol=1e-5)
  with pytest.raises(ValueError, match="trains on 2 views"):  # SupCon's recipe: two views
    adapter.make_adapter_epoch(recipe, 1, 0.5, 0.1)(
        state, jnp.asarray(features), jnp.asarray(labels, jnp.int32), batches, jnp.asarray(0),
        jax.random.key(0))


def test_jtt_entry_trains_only_on_given_epochs():
  """The 'jtt' entry's recipe samples its epochs: the probe refuses it without `epoch_order`."""
  features, labels = synthetic()
  with pytest.raises(ValueError, match="pass epoch_order"):
    lp.train_probe(("jtt", (("jtt.stage1", probe_comparison_methods.JTT_STAGE1),)), features, labels, RECIPE, 0)
