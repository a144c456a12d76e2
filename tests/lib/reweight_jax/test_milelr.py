"""reweight_jax.milelr against a float64 NumPy transcription of the spec, the Mittag-Leffler
identities (a = 1: e^{−z}; a = ½: e^{z²}·erfc(z)), and the refusal of a = 1 with a switch."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erfc

import reweight_jax
from reweight_jax import milelr
from tests.reference import numpy_milelr as ref


def lt_counts(num_classes, imbalance=100.0, n_max=500):
  return np.floor(n_max * imbalance ** (-np.arange(num_classes) / (num_classes - 1)))


@pytest.mark.parametrize("num_classes, expected", [(10, 0.785), (100, 0.903)])
def test_order_of_the_recipes_splits(num_classes, expected):
  counts = lt_counts(num_classes, n_max=5000 if num_classes == 10 else 500)
  a = milelr.mittag_leffler_order(counts)
  assert a == pytest.approx(ref.order(counts), rel=1e-12)
  assert a == pytest.approx(expected, abs=1e-3)  # the spec's C10-LT / C100-LT IF 100 values
  assert milelr.mittag_leffler_order(np.full(10, 7.0)) == pytest.approx(1.0)


@pytest.mark.parametrize("a", [1.0, 0.5])
def test_identities(a):
  z = np.linspace(0.0, 0.99, 50)
  exact = np.exp(-z) if a == 1.0 else np.exp(z ** 2) * erfc(z)
  np.testing.assert_allclose(np.asarray(milelr.mittag_leffler_neg(z, a)), exact, rtol=2e-6,
                             atol=1e-7)


def test_mittag_leffler_as_coded_matches_numpy_on_both_branches():
  for a in (0.3, 0.785, 0.903):
    z = np.concatenate([np.linspace(0, 0.999, 40), np.linspace(1.0, 50.0, 40)])
    expected = [ref.ml_neg(float(v), a) for v in z]
    np.testing.assert_allclose(np.asarray(milelr.mittag_leffler_neg(z, a)), expected, rtol=2e-6,
                               atol=1e-7)


@pytest.mark.parametrize("switch_epoch", [160, None])
@pytest.mark.parametrize("num_classes", [10, 100])
def test_schedule_matches_numpy_at_every_regime(num_classes, switch_epoch):
  counts = lt_counts(num_classes)
  batch = 128
  schedule = milelr.milelr_schedule(0.3, counts, batch, switch_epoch=switch_epoch)
  se = math.ceil(counts.sum() / batch)
  steps = np.unique(np.concatenate([
      np.arange(0, 200 * se, max(se // 3, 1)),
      [0, 10 * se - 1, 10 * se, 160 * se - 1, 160 * se, 160 * se + 1, 200 * se - 1]]))
  expected = np.array([0.3 * ref.factor(int(k), counts, batch, switch_epoch=switch_epoch)
                       for k in steps])
  got = np.asarray(jax.jit(jax.vmap(schedule))(jnp.asarray(steps)))
  np.testing.assert_allclose(got, expected, rtol=3e-6, atol=1e-8)
  assert got[np.searchsorted(steps, 10 * se - 1)] == pytest.approx(0.3)  # warm-up ends at base


def test_switch_jumps_as_released():
  counts = lt_counts(100)
  se = math.ceil(counts.sum() / 256)
  schedule = milelr.milelr_schedule(1.0, counts, 256)
  before, after = float(schedule(160 * se - 1)), float(schedule(160 * se))
  a = milelr.mittag_leffler_order(counts)
  assert after == pytest.approx(1 / math.gamma(1 - a), rel=1e-5)
  assert before == pytest.approx(ref.ml_neg((1 - 1e-6) * (150 * se - 1) / (150 * se), a), rel=1e-5)


def test_balanced_counts_are_refused_with_a_switch_and_allowed_without():
  with pytest.raises(ValueError, match="a = 1"):
    milelr.milelr_schedule(0.1, np.full(10, 500.0), 128)
  schedule = milelr.milelr_schedule(0.1, np.full(10, 500.0), 128, switch_epoch=None)
  se = math.ceil(5000 / 128)
  t = np.array([0, 50 * se, 99 * se, 150 * se]) + 10 * se
  s = np.minimum((t - 10 * se) / (190 * se), 1 - 1e-6)
  z = s / (1 - s)
  expected = np.where(z < 1, np.exp(-z), 0.0)  # a = 1: e^{−z}, and 1/Γ(0) = 0 beyond z = 1
  np.testing.assert_allclose(np.asarray(jax.vmap(schedule)(jnp.asarray(t))), 0.1 * expected,
                             rtol=2e-5, atol=1e-8)


def test_public_name():
  assert reweight_jax.milelr_schedule is milelr.milelr_schedule


def test_schedule_on_a_trainer_that_drops_the_last_partial_batch():
  """`steps_per_epoch` = ⌊N/B⌋ (the trainer's epochs) instead of the reference's ⌈N/B⌉: warm-up,
  switch and end fall on those epochs' boundaries, against the float64 transcription (the
  harness's use of it: tests/harness/train/test_loop.py::test_trainer_milelr_schedule_is_the_library_one)."""
  counts = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]  # CIFAR-10-LT IF 100
  spe = sum(counts) // 128
  assert spe != -(-sum(counts) // 128)
  schedule = reweight_jax.milelr_schedule(0.3, np.asarray(counts), 128, steps_per_epoch=spe)
  for k in (0, 10 * spe - 1, 10 * spe, 100 * spe, 160 * spe - 1, 160 * spe, 199 * spe,
            200 * spe - 1):
    np.testing.assert_allclose(float(schedule(k)), 0.3 * ref.factor(k, counts, 128,
                                                                     steps_per_epoch=spe),
                               rtol=2e-5, err_msg=f"step {k}")
  with pytest.raises(ValueError, match="steps_per_epoch"):
    reweight_jax.milelr_schedule(0.3, np.asarray(counts), 128, steps_per_epoch=0)


@pytest.mark.parametrize("switch_epoch", [160, None])
@pytest.mark.parametrize("steps_per_epoch", [97, 2816])
def test_last_steps_stay_at_float32_rounding(steps_per_epoch, switch_epoch):
  """The last updates, and two past the end (s clipped at 1 − ε), against the float64 transcription
  to a few float32 ulps: 1 − s comes from the updates left, T − t, not from a rounded s (in float32
  1 − s was off by 4e-3 relative on the last update after a switch, 2e-2 without one)."""
  counts = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]  # CIFAR-10-LT IF 100
  schedule = reweight_jax.milelr_schedule(0.3, np.asarray(counts), 128, switch_epoch=switch_epoch,
                                          steps_per_epoch=steps_per_epoch)
  end = 200 * steps_per_epoch
  steps = np.arange(end - 64, end + 2)
  expected = np.array([0.3 * ref.factor(int(k), counts, 128, switch_epoch=switch_epoch,
                                        steps_per_epoch=steps_per_epoch) for k in steps])
  got = np.asarray(jax.jit(jax.vmap(schedule))(jnp.asarray(steps)), np.float64)
  np.testing.assert_allclose(got, expected, rtol=4 * np.finfo(np.float32).eps, atol=0)
