"""reweight_jax.baselines.group_dro against the float64 loop reference (COMPARISONS spec, 'Class-level Group DRO')."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from jax.sharding import PartitionSpec as P

import reweight_jax
from tests.reference import numpy_comparisons as ref


def _batches(seed, steps=5, batch=12, num_classes=6):
  rng = np.random.default_rng(seed)
  for step in range(steps):
    # Class 5 never appears; class 4 only in odd steps; repeated classes throughout.
    labels = rng.integers(0, 4 + step % 2, batch).astype(np.int32)
    yield rng.uniform(0.0, 3.0, batch).astype(np.float32), labels


class GroupDROTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("plain", 0.01, None, False),
      ("large_eta", 2.0, None, False),
      ("adjusted", 0.5, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), False),
      ("adjusted_normalized", 0.5, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), True),
  )
  def test_replays_a_sequence_of_batches(self, eta, adjustment, normalize):
    adj = None if adjustment is None else np.asarray(adjustment, np.float32)
    step = self.variant(lambda l, y, q: reweight_jax.baselines.group_dro_loss(
        l, y, q, eta=eta, adjustment=adj, normalize=normalize))
    q = reweight_jax.baselines.init_group_dro_q(6)
    q_ref = np.full(6, 1 / 6)
    for per_example, labels in _batches(0):
      loss, q, aux = step(per_example, labels, q)
      loss_ref, q_ref, g_ref = ref.group_dro_step(per_example, labels, q_ref, eta, adj, normalize)
      np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
      np.testing.assert_allclose(q, q_ref, rtol=1e-5, atol=1e-7)
      np.testing.assert_allclose(aux.class_losses, g_ref, rtol=1e-6)
      np.testing.assert_array_equal(aux.present, np.bincount(labels, minlength=6) > 0)
      self.assertAlmostEqual(float(jnp.sum(q)), 1.0, places=6)  # on the simplex
      self.assertTrue(bool(jnp.all(q >= 0)))
    if adjustment is None:
      self.assertLess(float(q[5]), 1 / 6)  # the absent class (exp(0)) lost mass

  def test_equal_class_losses_keep_q_uniform_and_eta_zero_is_the_class_mean(self):
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3], np.int32)
    _, q, _ = reweight_jax.baselines.group_dro_loss(np.full(8, 1.7, np.float32), labels,
                                          reweight_jax.baselines.init_group_dro_q(4), eta=3.0)
    np.testing.assert_allclose(q, 0.25, rtol=1e-6)
    per_example = np.random.default_rng(1).uniform(size=8).astype(np.float32)
    loss, q, aux = reweight_jax.baselines.group_dro_loss(per_example, labels,
                                               reweight_jax.baselines.init_group_dro_q(4), eta=0.0)
    np.testing.assert_allclose(q, 0.25, rtol=1e-6)
    np.testing.assert_allclose(loss, np.mean(aux.class_losses), rtol=1e-6)

  def test_gradient_is_q_over_class_count(self):
    # ∂loss/∂ℓ_i = q_{y_i}/n_{y_i} with the updated q held constant.
    labels = np.array([0, 0, 0, 1, 2, 2], np.int32)
    per_example = np.array([0.5, 1.0, 2.0, 0.3, 3.0, 1.0], np.float32)
    q0 = jnp.asarray([0.2, 0.5, 0.3])
    grad = jax.grad(lambda l: reweight_jax.baselines.group_dro_loss(l, labels, q0, eta=0.7)[0])(per_example)
    _, q, _ = reweight_jax.baselines.group_dro_loss(per_example, labels, q0, eta=0.7)
    counts = np.bincount(labels)
    np.testing.assert_allclose(grad, np.asarray(q)[labels] / counts[labels], rtol=1e-6)

  def test_where_and_out_of_range_labels(self):
    labels = np.array([0, 1, 2, 1], np.int32)
    per_example = np.array([1.0, 2.0, np.nan, 3.0], np.float32)  # a padding row's NaN counts nowhere
    where = np.array([True, True, False, True])
    loss, q, _ = reweight_jax.baselines.group_dro_loss(per_example, labels, reweight_jax.baselines.init_group_dro_q(3),
                                             eta=0.5, where=where)
    loss_ref, q_ref, _ = ref.group_dro_step(per_example[where], labels[where], np.full(3, 1 / 3),
                                            0.5)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-6)
    np.testing.assert_allclose(q, q_ref, rtol=1e-6)
    traced = jax.jit(lambda l, y: reweight_jax.baselines.group_dro_loss(
        l, y, reweight_jax.baselines.init_group_dro_q(3))[0])(np.ones(4, np.float32),
                                                    np.array([0, 1, 7, 1], np.int32))
    self.assertTrue(np.isnan(traced))  # a real row with label 7 ≥ K: NaN, never a clipped class
    with self.assertRaisesRegex(ValueError, "eta"):
      reweight_jax.baselines.group_dro_loss(np.ones(2), np.array([0, 1]), reweight_jax.baselines.init_group_dro_q(2),
                                  eta=-1.0)

  def test_adjustment_is_c_over_sqrt_count(self):
    np.testing.assert_allclose(reweight_jax.baselines.group_dro_adjustment(np.array([4, 0, 100]), 2.0),
                               [1.0, 2.0, 0.2], rtol=1e-6)

  def test_shard_map_8_devices_equals_one_device(self):
    # Global-batch class losses from sums and counts: the q update, the loss (pmean of the shares)
    # and the gradient (pmean of the per-device gradients) equal the single-device ones.
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 5, 64).astype(np.int32)  # class 5 absent; uneven classes per device
    per_example = rng.uniform(0, 2, 64).astype(np.float32)
    q0 = jnp.asarray(rng.dirichlet(np.ones(6)), jnp.float32)
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

    def local(l, y):
      (loss, q), grad = jax.value_and_grad(lambda l: reweight_jax.baselines.group_dro_loss(
          l, y, q0, eta=0.9, axis_name="i")[:2], has_aux=True)(l)
      return jax.lax.pmean(loss, "i"), q[None], grad / 8  # pmean of gradients, row-sharded

    loss, q, grad = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P("i")),
                                          out_specs=(P(), P("i"), P("i")),
                                          check_vma=False))(per_example, labels)
    (loss1, q1), grad1 = jax.value_and_grad(
        lambda l: reweight_jax.baselines.group_dro_loss(l, labels, q0, eta=0.9)[:2], has_aux=True)(
            per_example)
    np.testing.assert_allclose(loss, loss1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(q), np.broadcast_to(q1, (8, 6)), rtol=1e-6)
    np.testing.assert_allclose(grad, grad1, rtol=1e-5)
