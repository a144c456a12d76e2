"""reweight_jax.baselines.lff against the float64 loop reference (COMPARISONS spec, 'LfF')."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.sharding import PartitionSpec as P

from mr2_reweight_core.checks import traced_checks
from reweight_jax.baselines import lff
from tests.reference import numpy_jtt_lff as ref

N, K = 24, 5
# Class 4's members are never visited; class 3's are visited with zero loss (class maximum 0).
DATASET_LABELS = np.array([0, 1, 2, 3] * 5 + [4] * 4, np.int32)
STEPS = (
    [0, 1, 2, 3, 4, 5, 6, 7],
    [8, 9, 10, 11, 0, 1, 12, 13],     # revisits 0 and 1
    [2, 14, 0, 15, 16, 5, 17, 3],     # third visit of 0
)


def _batch(rng, indices, scale=2.0):
  labels = DATASET_LABELS[indices]
  logits = [(scale * rng.normal(size=(len(indices), K))).astype(np.float32) for _ in range(2)]
  for z in logits:
    z[labels == 3] = 0.0
    z[labels == 3, 3] = 100.0  # CE exactly 0 in float32 and float64
  return logits[0], logits[1], labels, np.asarray(indices, np.int32)


def _random_state(rng):
  seen = rng.random(N) < 0.6
  return lff.LfFState(jnp.asarray(np.where(seen, rng.exponential(size=N), 0.0), jnp.float32),
                      jnp.asarray(np.where(seen, rng.exponential(size=N), 0.0), jnp.float32),
                      jnp.asarray(seen))


def _step_with_grads(q=0.7, alpha=0.7, **kwargs):
  def step(zb, zd, labels, indices, state, dataset_labels):
    def loss_fn(zb, zd):
      loss, new_state, aux = lff.lff_loss(zb, zd, labels, indices, state, dataset_labels, q=q,
                                          alpha=alpha, **kwargs)
      return loss, (new_state, aux)
    (loss, (new_state, aux)), grads = jax.value_and_grad(loss_fn, argnums=(0, 1),
                                                         has_aux=True)(zb, zd)
    return loss, new_state, aux, grads
  return step


def _assert_state(state, reference):
  np.testing.assert_allclose(state.ema_biased, reference.ema_biased, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(state.ema_debiased, reference.ema_debiased, rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(state.seen, reference.seen)


class LfFTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_replays_an_index_sequence(self):
    rng = np.random.default_rng(0)
    step = self.variant(_step_with_grads(q=0.7, alpha=0.7))
    state, reference = lff.init_lff_state(N), ref.LfFReference(DATASET_LABELS, K, 0.7, 0.7)
    for indices in STEPS:
      zb, zd, labels, idx = _batch(rng, indices)
      loss, state, aux, (grad_b, grad_d) = step(zb, zd, labels, idx, state, DATASET_LABELS)
      loss_ref, weights_ref, grad_b_ref, grad_d_ref = reference.step(zb, zd, labels, idx)
      np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
      np.testing.assert_allclose(aux.weights, weights_ref, rtol=1e-5, atol=1e-7)
      np.testing.assert_allclose(grad_b, grad_b_ref, rtol=1e-4, atol=1e-7)
      np.testing.assert_allclose(grad_d, grad_d_ref, rtol=1e-4, atol=1e-7)
      _assert_state(state, reference)
      self.assertTrue(np.all((aux.weights >= 0) & (aux.weights < 1)))
      np.testing.assert_array_equal(np.asarray(aux.weights)[labels == 3], 0.0)  # max 0: no NaN
    np.testing.assert_array_equal(state.seen, np.isin(np.arange(N), np.concatenate(STEPS)))
    np.testing.assert_array_equal(state.ema_biased[20:], 0.0)  # class 4: never visited

  @chex.variants(with_jit=True, without_jit=True)
  def test_gce_value_and_gradient(self):
    rng = np.random.default_rng(1)
    for q, scale in ((0.7, 2.0), (0.3, 30.0)):
      logits = (scale * rng.normal(size=(10, 6))).astype(np.float32)
      labels = rng.integers(0, 6, 10).astype(np.int32)
      value = self.variant(lambda z, y: lff.gce_loss(z, y, q=q))(logits, labels)
      grad = self.variant(jax.grad(lambda z, y: jnp.sum(lff.gce_loss(z, y, q=q))))(logits, labels)
      value_ref, grad_ref = ref.gce(logits, labels, q)
      # atol: a row whose loss is below 1e-16 is 0 in the reference (log(1 + r) in float64), and
      # ~1e-22 here, where the label log-softmax is −log1p(Σ_{k≠y} e^{z_k − z_y}).
      np.testing.assert_allclose(value, value_ref, rtol=1e-5, atol=1e-20)
      np.testing.assert_allclose(grad, grad_ref, rtol=1e-4, atol=1e-7)
      # q · p_y^q · (softmax − onehot), with p from JAX itself.
      p = jax.nn.softmax(logits)
      p_y = p[np.arange(10), labels]
      expected = q * p_y[:, None] ** q * (p - jax.nn.one_hot(labels, 6))
      np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-7)

  def test_weights_lie_in_unit_interval_and_unvisited_get_zero(self):
    state = _random_state(np.random.default_rng(2))
    seen = np.asarray(state.seen)
    indices = np.arange(N, dtype=np.int32)
    weights = np.asarray(lff.lff_weights(state, indices, DATASET_LABELS[indices], DATASET_LABELS,
                                         K))
    self.assertTrue(np.all((weights >= 0) & (weights < 1)))
    np.testing.assert_array_equal(weights[~seen], 0.0)
    # ẽ_B = 1, ẽ_D = 0: W = 1/(1 + 1e-8) < 1 exactly, which float32 rounds to 1 (documented).
    state = lff.LfFState(jnp.ones(N), jnp.zeros(N), jnp.ones(N, bool))
    weights = lff.lff_weights(state, indices, DATASET_LABELS[indices], DATASET_LABELS, K)
    np.testing.assert_array_equal(weights, np.float32(1 / (1 + 1e-8)))

  def test_repeated_index_last_row_writes(self):
    rng = np.random.default_rng(3)
    state, reference = lff.init_lff_state(N), ref.LfFReference(DATASET_LABELS, K)
    for indices in ([0, 5, 0, 9, 5, 5], [5, 0, 2, 0, 5, 9]):  # first visit, then revisits
      zb, zd, labels, idx = _batch(rng, indices)
      loss, state, aux = jax.jit(lff.lff_loss)(zb, zd, labels, idx, state, DATASET_LABELS)
      loss_ref, weights_ref, _, _ = reference.step(zb, zd, labels, idx)
      np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
      np.testing.assert_allclose(aux.weights, weights_ref, rtol=1e-5)
      _assert_state(state, reference)

  def test_padding_rows_change_nothing(self):
    rng = np.random.default_rng(4)
    state = _random_state(rng)
    zb, zd, labels, idx = _batch(rng, STEPS[1])
    step = jax.jit(_step_with_grads(where=np.arange(11) < 8))
    expected = jax.jit(_step_with_grads())(zb, zd, labels, idx, state, DATASET_LABELS)
    garbage_logits = np.full((3, K), np.nan, np.float32)
    garbage_logits[1] = np.inf
    loss, new_state, aux, grads = step(
        np.concatenate([zb, garbage_logits]), np.concatenate([zd, -garbage_logits]),
        np.concatenate([labels, np.array([-4, K, 2], np.int32)]),
        np.concatenate([idx, np.array([-1, N, 10**6], np.int32)]), state, DATASET_LABELS)
    np.testing.assert_allclose(loss, expected[0], rtol=1e-6)
    chex.assert_trees_all_close(new_state, expected[1], rtol=1e-6)
    np.testing.assert_allclose(aux.weights[:8], expected[2].weights, rtol=1e-6)
    np.testing.assert_array_equal(aux.weights[8:], 0.0)
    for grad, grad_expected in zip(grads, expected[3]):
      np.testing.assert_allclose(grad[:8], grad_expected, rtol=1e-5, atol=1e-8)
      np.testing.assert_array_equal(grad[8:], 0.0)
    # Eagerly, a padding row's index is not range-checked and writes nothing either.
    losses = np.arange(1.0, 12.0, dtype=np.float32)
    padded = lff.lff_update_ema(state, np.concatenate([idx, [-1, N, 10**6]]).astype(np.int32),
                                losses, -losses, where=np.arange(11) < 8)
    chex.assert_trees_all_equal(padded, lff.lff_update_ema(state, idx, losses[:8], -losses[:8]))

  def test_out_of_range_label_or_index_is_nan_under_jit_and_writes_nothing(self):
    rng = np.random.default_rng(5)
    zb, zd, labels, idx = _batch(rng, STEPS[0])
    step = jax.jit(lff.lff_loss)
    _, good_state, _ = step(zb[2:], zd[2:], labels[2:], idx[2:], lff.init_lff_state(N),
                            DATASET_LABELS)
    for bad_labels, bad_idx in ((np.where(np.arange(8) == 0, K, labels), idx),
                                (labels, np.where(np.arange(8) == 1, N, idx)),
                                (np.where(np.arange(8) == 1, -1, labels),
                                 np.where(np.arange(8) == 0, -3, idx))):
      keep = (bad_labels == labels) & (bad_idx == idx)
      loss, state, aux = step(zb, zd, bad_labels.astype(np.int32), bad_idx.astype(np.int32),
                              lff.init_lff_state(N), DATASET_LABELS)
      self.assertTrue(np.isnan(loss))  # never a clipped class or position
      self.assertTrue(np.all(np.isnan(np.asarray(aux.weights)[~keep])))
      self.assertEqual(int(state.skipped_rows), int(np.sum(~keep)))  # counted, never written
      if not keep[0] and not keep[1]:  # both bad rows dropped: the state of the good rows
        chex.assert_trees_all_equal(state._replace(skipped_rows=good_state.skipped_rows),
                                    good_state)
      else:
        self.assertEqual(int(np.sum(state.seen)), int(np.sum(keep)))
    weights = jax.jit(lff.lff_weights, static_argnums=4)(
        good_state, np.array([2, N], np.int32), np.array([2, 1], np.int32), DATASET_LABELS, K)
    self.assertFalse(np.isnan(weights[0]))
    self.assertTrue(np.isnan(weights[1]))

  def test_bad_arguments_raise_naming_them(self):
    rng = np.random.default_rng(6)
    zb, zd, labels, idx = _batch(rng, STEPS[0])
    state = lff.init_lff_state(N)
    with self.assertRaisesRegex(ValueError, "indices"):
      lff.lff_loss(zb, zd, labels, np.where(idx == 0, N, idx).astype(np.int32), state,
                   DATASET_LABELS)
    with self.assertRaisesRegex(TypeError, "indices"):
      lff.lff_loss(zb, zd, labels, idx.astype(np.float32), state, DATASET_LABELS)
    with self.assertRaisesRegex(ValueError, "indices"):
      lff.lff_loss(zb, zd, labels, idx[:-1], state, DATASET_LABELS)
    with self.assertRaisesRegex(ValueError, "labels"):
      lff.lff_loss(zb, zd, np.where(labels == 0, K, labels).astype(np.int32), idx, state,
                   DATASET_LABELS)
    with self.assertRaisesRegex(ValueError, "logits_debiased"):
      lff.lff_loss(zb, zd[:, :-1], labels, idx, state, DATASET_LABELS)
    with self.assertRaisesRegex(ValueError, "dataset_labels"):
      lff.lff_loss(zb, zd, labels, idx, state, DATASET_LABELS[:-1])
    with self.assertRaisesRegex(ValueError, "q"):
      lff.lff_loss(zb, zd, labels, idx, state, DATASET_LABELS, q=0.0)
    with self.assertRaisesRegex(ValueError, "alpha"):
      lff.lff_loss(zb, zd, labels, idx, state, DATASET_LABELS, alpha=1.5)
    with self.assertRaisesRegex(ValueError, "state.seen"):
      lff.lff_update_ema(state._replace(seen=jnp.zeros(N - 1, bool)), idx, zb[:, 0], zd[:, 0])
    with self.assertRaisesRegex(ValueError, "loss_debiased"):
      lff.lff_update_ema(state, idx, zb[:, 0], zd[:-1, 0])
    with self.assertRaisesRegex(ValueError, "num_examples"):
      lff.init_lff_state(0)
    with traced_checks():  # the opt-in traced check of the index range
      err, _ = checkify.checkify(jax.jit(lff.lff_update_ema), errors=checkify.user_checks)(
          state, np.where(idx == 0, -1, idx).astype(np.int32), zb[:, 0], zd[:, 0])
    self.assertIn("indices", str(err.get()))

  def test_shard_map_8_devices_equals_one_device(self):
    # The EMA update of the global batch on every device (all-gathered, duplicates included), the
    # loss (pmean of the shares) and the gradients (pmean) equal the single-device ones.
    rng = np.random.default_rng(7)
    batch = 32
    state = _random_state(rng)  # revisits and first visits
    # 8 devices × 4 rows; the 8 repeated indices span devices.
    zb, zd, labels, idx = _batch(rng, rng.permutation(np.concatenate(
        [np.arange(N), rng.integers(0, N, batch - N)])))
    where = rng.random(batch) < 0.85
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

    def local(zb, zd, y, i, w, state):
      loss, new_state, aux, (gb, gd) = _step_with_grads(axis_name="i", where=w)(
          zb, zd, y, i, state, DATASET_LABELS)
      stacked = jax.tree.map(lambda x: x[None], new_state)
      return jax.lax.pmean(loss, "i"), stacked, aux.weights, gb / 8, gd / 8

    rows = P("i")
    loss, states, weights, grad_b, grad_d = jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=(rows, rows, rows, rows, rows, P()),
        out_specs=(P(), rows, rows, rows, rows), check_vma=False))(zb, zd, labels, idx, where,
                                                                   state)
    loss1, state1, aux1, (grad_b1, grad_d1) = jax.jit(_step_with_grads(where=where))(
        zb, zd, labels, idx, state, DATASET_LABELS)
    np.testing.assert_allclose(loss, loss1, rtol=1e-6)
    np.testing.assert_allclose(weights, aux1.weights, rtol=1e-6)
    np.testing.assert_allclose(grad_b, grad_b1, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(grad_d, grad_d1, rtol=1e-5, atol=1e-9)
    for device in range(8):  # identical on every device; the one-device state up to rounding
      chex.assert_trees_all_equal(jax.tree.map(lambda x: x[device], states),
                                  jax.tree.map(lambda x: x[0], states))
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[0], states), state1, rtol=1e-6)
