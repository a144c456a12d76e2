"""reweight_jax.baselines.fairdro against the float64 loop reference (COMPARISONS spec, 'FairDRO, classes as
groups'): the closed-form best response, the smoothing schedule, and the step loss."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from jax.sharding import PartitionSpec as P

import reweight_jax
from tests.reference import numpy_fairdro as ref


# One compiled function per shape: far quicker on CPU than op-by-op dispatch of many small shapes.
_best_response = jax.jit(reweight_jax.baselines.fairdro_best_response, static_argnames=("clip",))

def _losses_with_absent(seed, num_classes=10, absent=(2, 7)):
  rng = np.random.default_rng(seed)
  losses = rng.uniform(0.1, 3.0, num_classes).astype(np.float32)
  present = np.ones(num_classes, bool)
  present[list(absent)] = False
  losses[~present] = np.nan  # what class_mean gives a class without examples
  return losses, present


class BestResponseTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("small_rho", 0.05), ("default_rho", 0.5), ("large_rho", 3.0))
  def test_sum_one_radius_and_numpy_match(self, rho):
    losses = np.random.default_rng(0).uniform(0.0, 2.0, 10).astype(np.float32)
    q_star = self.variant(lambda l: reweight_jax.baselines.fairdro_best_response(l, rho))(losses)
    self.assertEqual(q_star.dtype, jnp.float32)
    np.testing.assert_allclose(float(jnp.sum(q_star)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q_star, np.float64) - 0.1),
                               math.sqrt(2 * rho / 10), rtol=1e-5)
    np.testing.assert_allclose(q_star, ref.best_response(losses, rho), rtol=1e-5, atol=1e-6)
    # The ball constraint ½·K·Σ(q − 1/K)² ≤ ρ is active.
    np.testing.assert_allclose(0.5 * 10 * np.sum((np.asarray(q_star, np.float64) - 0.1) ** 2), rho,
                               rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("unclipped", False), ("clipped", True))
  def test_absent_classes_are_left_out_and_get_zero(self, clip):
    losses, present = _losses_with_absent(1)
    q_star = self.variant(lambda l, p: reweight_jax.baselines.fairdro_best_response(
        l, 2.0, clip=clip, present=p))(losses, present)
    expected = ref.best_response(losses, 2.0, present, clip=clip)
    np.testing.assert_allclose(q_star, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(q_star)[~present], 0.0)
    np.testing.assert_allclose(float(jnp.sum(q_star)), 1.0, rtol=1e-6)
    if not clip:  # the same problem over the K' = 8 present classes
      deviation = np.asarray(q_star, np.float64)[present] - 1 / 8
      np.testing.assert_allclose(np.linalg.norm(deviation), math.sqrt(2 * 2.0 / 8), rtol=1e-5)
      self.assertTrue(bool(jnp.any(q_star < 0)))  # ρ = 2, K' = 8: the easiest class goes negative
    else:
      self.assertTrue(bool(jnp.all(q_star >= 0)))

  def test_constant_losses_give_uniform_without_nan(self):
    # 0.1 is not a float32 multiple of 1/7: the mean's rounding alone must not create a direction.
    for num_classes, value in ((7, 0.1), (100, 0.3), (3, 0.0)):
      q_star = _best_response(np.full(num_classes, value, np.float32))
      np.testing.assert_array_equal(q_star, np.float32(1 / num_classes))
    present = np.array([True, False, True, True])
    q_star = _best_response(np.array([1.5, np.nan, 1.5, 1.5], np.float32),
                                                present=present)
    np.testing.assert_allclose(q_star, [1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-6)
    # q* is a constant for the step loss, but its gradient is finite in the ‖L − L̄‖ = 0 branch too.
    weights = np.arange(4, dtype=np.float32)
    for losses in (np.full(4, 0.7, np.float32), np.array([0.7, 9.0, 0.7, 0.7], np.float32)):
      grad = jax.grad(lambda l: jnp.sum(weights * _best_response(
          l, present=present)))(losses)
      self.assertTrue(bool(jnp.all(jnp.isfinite(grad))))
    # One present class: q* = 1 on it; none present: uniform over all K (nothing is known).
    np.testing.assert_allclose(_best_response(
        np.array([np.nan, 2.0, np.nan], np.float32), present=np.array([False, True, False])),
                               [0, 1, 0])
    np.testing.assert_allclose(_best_response(
        np.full(4, np.nan, np.float32), present=np.zeros(4, bool)), 0.25)

  def test_nan_loss_of_a_present_class_propagates(self):
    q_star = _best_response(np.array([1.0, np.nan, 2.0], np.float32))
    self.assertTrue(bool(jnp.all(jnp.isnan(q_star))))  # a diverged run is not a missing class

  def test_negative_weights_exactly_when_condition_holds(self):
    rng = np.random.default_rng(2)
    for rho in (0.05, 0.1, 0.5, 2.0):
      losses = rng.normal(2.0, 0.5, 100).astype(np.float32)
      q_star = np.asarray(_best_response(losses, rho))
      l64 = losses.astype(np.float64)
      score = (l64.mean() - l64) / np.linalg.norm(l64 - l64.mean())
      threshold = 1 / math.sqrt(2 * rho * 100)
      clear = np.abs(score - threshold) > 1e-4  # away from q*_c = 0, where float32 may round
      np.testing.assert_array_equal((q_star < 0)[clear], (score > threshold)[clear])
      if rho >= 0.5:  # K = 100, L ~ N: q* < 0 once ρ ≳ 0.5/z_min² ≈ 0.1
        self.assertGreater(int(np.sum(q_star < 0)), 0)
      clipped = np.asarray(_best_response(losses, rho, clip=True))
      self.assertTrue(np.all(clipped >= 0))
      np.testing.assert_allclose(clipped.sum(), 1.0, rtol=1e-6)
      np.testing.assert_allclose(clipped, ref.best_response(losses, rho, clip=True), rtol=1e-4,
                                 atol=1e-6)

  def test_argument_errors_name_the_argument(self):
    losses = np.ones(3, np.float32)
    with self.assertRaisesRegex(ValueError, "rho"):
      reweight_jax.baselines.fairdro_best_response(losses, 0.0)
    with self.assertRaisesRegex(ValueError, "present"):
      reweight_jax.baselines.fairdro_best_response(losses, present=np.ones(4, bool))
    with self.assertRaisesRegex(TypeError, "present"):
      reweight_jax.baselines.fairdro_best_response(losses, present=np.ones(3, np.int32))
    with self.assertRaisesRegex(ValueError, "class_losses"):
      reweight_jax.baselines.fairdro_best_response(np.ones((3, 1), np.float32))
    with self.assertRaisesRegex(ValueError, "num_classes"):
      reweight_jax.baselines.init_fairdro_q(0)


class SmoothingTest(chex.TestCase):

  def test_step_size_at_start_middle_end(self):
    for schedule in ("linear", "cos"):
      self.assertAlmostEqual(float(reweight_jax.baselines.fairdro_step_size(0, 10, schedule)), 1.0, places=6)
      self.assertAlmostEqual(float(reweight_jax.baselines.fairdro_step_size(5, 10, schedule)), 0.5, places=6)
      self.assertAlmostEqual(float(reweight_jax.baselines.fairdro_step_size(10, 10, schedule)), 0.0, places=6)
    self.assertAlmostEqual(float(reweight_jax.baselines.fairdro_step_size(2, 10, "linear")), 0.8, places=6)
    self.assertAlmostEqual(float(reweight_jax.baselines.fairdro_step_size(2, 10, "cos")),
                           0.5 * (1 + math.cos(0.2 * math.pi)), places=6)
    traced = jax.jit(lambda e: reweight_jax.baselines.fairdro_step_size(e, 8, "cos"))(jnp.int32(2))
    self.assertAlmostEqual(float(traced), 0.5 * (1 + math.cos(math.pi / 4)), places=6)
    with self.assertRaisesRegex(ValueError, "schedule"):
      reweight_jax.baselines.fairdro_step_size(1, 10, "exp")
    with self.assertRaisesRegex(ValueError, "epoch"):
      reweight_jax.baselines.fairdro_step_size(11, 10)
    with self.assertRaisesRegex(ValueError, "epoch"):
      reweight_jax.baselines.fairdro_step_size(-1, 10)
    with self.assertRaisesRegex(ValueError, "num_epochs"):
      reweight_jax.baselines.fairdro_step_size(0, 0)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("linear", "linear", False), ("cos_clipped", "cos", True))
  def test_replays_epochs_against_numpy(self, schedule, clip):
    num_classes, num_epochs = 6, 5
    rng = np.random.default_rng(4)

    @self.variant
    def epoch_update(q, losses, present, epoch):
      q_star = reweight_jax.baselines.fairdro_best_response(losses, 1.5, clip=clip, present=present)
      return reweight_jax.baselines.fairdro_update(q, q_star, epoch, num_epochs, schedule), q_star

    q = reweight_jax.baselines.init_fairdro_q(num_classes)
    q_ref = np.full(num_classes, 1 / num_classes)
    for epoch in range(num_epochs):
      losses = rng.uniform(0.0, 2.0, num_classes).astype(np.float32)
      present = np.ones(num_classes, bool)
      present[5] = False  # a class without training examples
      losses[5] = np.nan
      q, q_star = epoch_update(q, losses, present, epoch)
      q_ref = ref.update(q_ref, ref.best_response(losses, 1.5, present, clip), epoch, num_epochs,
                         schedule)
      np.testing.assert_allclose(q, q_ref, rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(float(jnp.sum(q)), 1.0, rtol=1e-6)
      if epoch == 0:
        np.testing.assert_allclose(q, q_star)  # α_0 = 1: the first update is the best response
    self.assertEqual(q.dtype, jnp.float32)
    with self.assertRaisesRegex(ValueError, "q_star"):
      reweight_jax.baselines.fairdro_update(q, jnp.ones(5), 0, num_epochs)


class StepLossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_numpy_with_padding_and_negative_q(self):
    rng = np.random.default_rng(5)
    labels = np.array([0, 0, 3, 1, 3, 3, 0, 4, 2, 1], np.int32)  # class 5 absent, repeated classes
    per_example = rng.uniform(0, 3, 10).astype(np.float32)
    where = np.ones(10, bool)
    where[[2, 7]] = False
    per_example[7] = np.nan  # padding garbage counts nowhere
    labels[2] = 5  # padding of the absent class: class 5 must stay absent
    q = jnp.asarray([0.5, -0.1, 0.2, 0.3, 0.25, -0.15], jnp.float32)  # Σq = 1, negative entries
    step = self.variant(lambda l, y, w: reweight_jax.baselines.fairdro_loss(l, y, q, where=w))
    loss, aux = step(per_example, labels, where)
    loss_ref, g_ref = ref.step_loss(per_example, labels, np.asarray(q, np.float64), where)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
    np.testing.assert_allclose(aux.class_losses, g_ref, rtol=1e-6)
    np.testing.assert_array_equal(aux.present, [True, True, True, True, False, False])
    grad = self.variant(jax.grad(
        lambda l: reweight_jax.baselines.fairdro_loss(l, labels, q, where=where)[0]))(per_example)
    counts = np.bincount(labels[where], minlength=6)
    expected = np.where(where, np.asarray(q)[np.where(where, labels, 0)] / np.maximum(
        counts[np.where(where, labels, 0)], 1), 0.0)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)

  def test_uniform_q_is_class_mean_and_nonnegative_q_is_group_dro_eta_zero(self):
    labels = np.array([0, 1, 1, 2, 2, 2], np.int32)
    per_example = np.random.default_rng(6).uniform(size=6).astype(np.float32)
    loss, aux = reweight_jax.baselines.fairdro_loss(per_example, labels, reweight_jax.baselines.init_fairdro_q(3))
    np.testing.assert_allclose(loss, np.mean(aux.class_losses), rtol=1e-6)
    q = jnp.asarray([0.2, 0.5, 0.3])
    group_dro, _, _ = reweight_jax.baselines.group_dro_loss(per_example, labels, q, eta=0.0)
    np.testing.assert_allclose(reweight_jax.baselines.fairdro_loss(per_example, labels, q)[0], group_dro,
                               rtol=1e-6)

  def test_out_of_range_label_is_nan_under_jit(self):
    q = reweight_jax.baselines.init_fairdro_q(3)
    traced = jax.jit(lambda l, y: reweight_jax.baselines.fairdro_loss(l, y, q)[0])(
        np.ones(4, np.float32), np.array([0, 1, 7, 1], np.int32))
    self.assertTrue(np.isnan(traced))  # never a clipped class
    # The same row as padding: any label, it counts nowhere.
    padded = jax.jit(lambda l, y, w: reweight_jax.baselines.fairdro_loss(l, y, q, where=w)[0])(
        np.ones(4, np.float32), np.array([0, 1, 7, 1], np.int32),
        np.array([True, True, False, True]))
    np.testing.assert_allclose(padded, 2 / 3, rtol=1e-6)  # (1 + 1)/3: classes 0 and 1, 2 absent
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.fairdro_loss(np.ones(2, np.float32), np.array([0, 3], np.int32), q)
    with self.assertRaisesRegex(ValueError, "per_example_loss"):
      reweight_jax.baselines.fairdro_loss(np.ones(3, np.float32), np.array([0, 1], np.int32), q)

  def test_shard_map_8_devices_equals_one_device(self):
    # Global-batch class means from psum-ed sums and counts: the pmean of the per-device shares and
    # of their gradients equals the single-device loss and gradient.
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 5, 64).astype(np.int32)  # class 5 absent; uneven classes per device
    per_example = rng.uniform(0, 2, 64).astype(np.float32)
    q = reweight_jax.baselines.fairdro_best_response(rng.uniform(0, 2, 6).astype(np.float32), 3.0)
    self.assertTrue(bool(jnp.any(q < 0)))
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

    def local(l, y):
      (loss, aux), grad = jax.value_and_grad(lambda l: reweight_jax.baselines.fairdro_loss(
          l, y, q, axis_name="i"), has_aux=True)(l)
      return jax.lax.pmean(loss, "i"), aux.class_losses[None], grad / 8

    loss, class_losses, grad = jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=(P(), P("i"), P("i")),
        check_vma=False))(per_example, labels)
    (loss1, aux1), grad1 = jax.value_and_grad(
        lambda l: reweight_jax.baselines.fairdro_loss(l, labels, q), has_aux=True)(per_example)
    np.testing.assert_allclose(loss, loss1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(class_losses),
                               np.broadcast_to(aux1.class_losses, (8, 6)), rtol=1e-6)
    np.testing.assert_allclose(grad, grad1, rtol=1e-5)
