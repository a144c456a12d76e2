"""reweight_jax.baselines.supcon against the float64 loop reference (COMPARISONS spec, 'SupCon').

JAX runs in float32, the references in float64. Tolerances: values rtol 1e-5; gradients against
central differences of the reference rtol 1e-4, atol 1e-5 (float32 rounding of logits up to ~1/τ
and of the O(1) gradient entries; the differences themselves are accurate to ~1e-9).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mr2_jax
import reweight_jax
from tests.reference import numpy_supcon as ref

VIEWS, IMAGES, DIM = 2, 6, 5
N = VIEWS * IMAGES


def _unit_rows(rng, n, d, scale=1.0):
  z = rng.normal(size=(n, d))
  return (scale * z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)


def _cases():
  """(name, z [N, D], labels [N], where [N] or None, τ, τ_b), all of one shape (one compile)."""
  rng = np.random.default_rng(0)
  # Per image: class 0 twice, class 2 three times, class 5 once (its two views are each other's
  # only positive); classes 1, 3, 4 absent.
  mixed = np.tile(np.array([0, 2, 5, 2, 0, 2], np.int32), VIEWS)
  # Image 2 (class 5) keeps view 0 only: an anchor without positives, still counted in the mean.
  # Image 3 keeps view 1 only: its view still has class-2 positives.
  partial = np.ones(N, bool)
  partial[IMAGES + 2] = False
  partial[3] = False
  unnormalised = rng.normal(size=(N, DIM)).astype(np.float32) * 1.5
  return [
      ("mixed", _unit_rows(rng, N, DIM), mixed, None, 0.1, 0.07),
      ("mixed_where", _unit_rows(rng, N, DIM), mixed, partial, 0.1, 0.07),
      ("one_class", _unit_rows(rng, N, DIM), np.full(N, 3, np.int32), None, 0.1, 0.07),
      ("code_default_tau", _unit_rows(rng, N, DIM), mixed, partial, 0.07, 0.07),
      ("unnormalised", unnormalised, mixed, partial, 0.1, 0.07),
  ]


class SupConTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference_loss_and_gradient(self):
    fn = self.variant(jax.value_and_grad(
        lambda z, y, w, tau, tau_b: reweight_jax.baselines.supcon_loss(z, y, where=w, temperature=tau,
                                                        base_temperature=tau_b), has_aux=True),
        static_argnums=(3, 4))
    for name, z, labels, where, tau, tau_b in _cases():
      w = np.ones(N, bool) if where is None else where
      (loss, aux), grad = fn(z, labels, w, tau, tau_b)
      per_anchor, expected = ref.supcon_per_anchor(z, labels, tau, tau_b, where)
      expected_grad = ref.numerical_gradient(
          lambda x: ref.supcon_mean(x, labels, tau, tau_b, where), z)
      np.testing.assert_allclose(loss, expected, rtol=1e-5, err_msg=name)
      np.testing.assert_allclose(grad, expected_grad, rtol=1e-4, atol=1e-5, err_msg=name)
      np.testing.assert_allclose(aux.per_anchor, per_anchor, rtol=1e-5, atol=1e-6, err_msg=name)
      self.assertEqual(int(aux.num_anchors), int(np.sum(w)))
      if name == "mixed_where":
        # Row 2 (class 5, its other view padded out): no positive, ℓ = 0, counted in the mean.
        self.assertEqual(int(aux.num_positives[2]), 0)
        self.assertEqual(float(aux.per_anchor[2]), 0.0)
        self.assertEqual(int(aux.num_anchors), N - 2)
        # Image 3 (class 2) keeps view 1: its positives are both views of images 1 and 5.
        self.assertEqual(int(aux.num_positives[IMAGES + 3]), 4)

  def test_distinct_labels_give_nt_xent(self):
    rng = np.random.default_rng(1)
    z = _unit_rows(rng, N, DIM)
    labels = np.tile(np.arange(IMAGES, dtype=np.int32), VIEWS)  # each class: one image, two views
    partner = [(i + IMAGES) % N for i in range(N)]
    fn = jax.jit(lambda z, y, tau, tau_b: reweight_jax.baselines.supcon_loss(
        z, y, temperature=tau, base_temperature=tau_b)[0], static_argnums=(2, 3))
    for tau, tau_b in ((0.1, 0.07), (0.5, 0.5)):
      loss = fn(z, labels, tau, tau_b)
      np.testing.assert_allclose(loss, ref.nt_xent(z, partner, tau, tau_b), rtol=1e-5)

  def test_permuting_rows_changes_nothing(self):
    _, z, labels, where, _, _ = _cases()[1]
    order = np.random.default_rng(2).permutation(N)
    fn = jax.jit(jax.value_and_grad(lambda z, y, w: reweight_jax.baselines.supcon_loss(z, y, where=w)[0]))
    loss, grad = fn(z, labels, where)
    loss_p, grad_p = fn(z[order], labels[order], where[order])
    np.testing.assert_allclose(loss_p, loss, rtol=1e-6)
    np.testing.assert_allclose(grad_p, np.asarray(grad)[order], rtol=1e-5, atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  def test_padding_rows_change_nothing(self):
    # In float64: the padded and unpadded batches sum in different orders, and float32 kernels of
    # another CPU (another instruction set) differ from this one's in the last bits.
    with jax.enable_x64(True):
      self._padding_rows_change_nothing()

  def _padding_rows_change_nothing(self):
    _, z, labels, where, _, _ = _cases()[1]
    z = z.astype(np.float64)
    pad_at = np.array([0, 5, 9, 13])  # positions in the padded batch, interleaved
    padded_n = N + len(pad_at)
    real_at = np.setdiff1d(np.arange(padded_n), pad_at)
    z_pad = np.zeros((padded_n, DIM), np.float64)
    z_pad[real_at] = z
    z_pad[pad_at] = [[np.nan] * DIM, [np.inf] * DIM, [-np.inf] * DIM, [1e30] * DIM]
    labels_pad = np.zeros(padded_n, np.int32)
    labels_pad[real_at] = labels
    labels_pad[pad_at] = labels[:len(pad_at)]  # real classes: they would be positives if counted
    where_pad = np.zeros(padded_n, bool)
    where_pad[real_at] = where
    fn = self.variant(jax.value_and_grad(lambda z, y, w: reweight_jax.baselines.supcon_loss(z, y, where=w)[0]))
    loss, grad = fn(z_pad, labels_pad, where_pad)
    loss_ref, grad_ref = jax.value_and_grad(
        lambda z: reweight_jax.baselines.supcon_loss(z, labels, where=where)[0])(z)
    self.assertEqual(np.asarray(grad).dtype, np.float64)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grad)[real_at], grad_ref, rtol=1e-10, atol=1e-13)
    np.testing.assert_array_equal(np.asarray(grad)[pad_at], 0.0)
    # No valid row at all: loss 0, gradient 0.
    loss, grad = fn(z_pad, labels_pad, np.zeros(padded_n, bool))
    self.assertEqual(float(loss), 0.0)
    np.testing.assert_array_equal(grad, 0.0)

  def test_out_of_range_labels_and_argument_errors(self):
    z = _unit_rows(np.random.default_rng(3), 4, DIM)
    labels = np.array([0, 1, 0, 1], np.int32)
    jitted = jax.jit(lambda z, y, w: reweight_jax.baselines.supcon_loss(z, y, where=w, num_classes=2)[0])
    bad = np.array([0, 7, 0, 1], np.int32)
    self.assertTrue(np.isnan(jitted(z, bad, np.ones(4, bool))))  # NaN, never a clipped class
    self.assertTrue(np.isnan(jitted(z, np.array([0, -1, 0, 1], np.int32), np.ones(4, bool))))
    # The same bad label on a padding row counts nowhere.
    self.assertTrue(np.isfinite(jitted(z, bad, np.array([True, False, True, True]))))
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.supcon_loss(z, bad, num_classes=2)
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.supcon_loss(z, np.array([0, -1, 0, 1], np.int32))
    with self.assertRaisesRegex(ValueError, "projections"):
      reweight_jax.baselines.supcon_loss(z[0], labels)
    with self.assertRaisesRegex(ValueError, "projections"):
      reweight_jax.baselines.supcon_loss(z[:3], labels)
    with self.assertRaisesRegex(ValueError, "labels"):
      reweight_jax.baselines.supcon_loss(z, labels[:, None])
    with self.assertRaisesRegex(TypeError, "labels"):
      reweight_jax.baselines.supcon_loss(z, labels.astype(np.float32))
    with self.assertRaisesRegex(ValueError, "where"):
      reweight_jax.baselines.supcon_loss(z, labels, where=np.ones(3, bool))
    with self.assertRaisesRegex(ValueError, "temperature"):
      reweight_jax.baselines.supcon_loss(z, labels, temperature=0.0)
    with self.assertRaisesRegex(ValueError, "base_temperature"):
      reweight_jax.baselines.supcon_loss(z, labels, base_temperature=-1.0)

  def test_shard_map_equals_one_device(self):
    # Global positives and denominators: pmean of the shares is the loss on the concatenated batch,
    # pmean of a replicated parameter's gradient is its gradient, and each device's input gradient
    # is N_devices × the one-device gradient of its rows (the all-gather's transpose sums over
    # every device's share).
    rng = np.random.default_rng(4)
    rows, raw_dim = 32, 6
    x = rng.normal(size=(rows, raw_dim)).astype(np.float32)
    w = rng.normal(size=(raw_dim, DIM)).astype(np.float32)
    labels = rng.integers(0, 5, rows).astype(np.int32)
    labels[7] = 9  # a class with one row: an anchor without positives
    where = np.ones(rows, bool)
    where[[3, 20, 21]] = False
    x[20] = 1e4  # padding: no effect on the loss or any other row

    def loss_fn(w, x, y, m, axis_name=None):
      z = mr2_jax.l2_normalize(x @ w)
      return reweight_jax.baselines.supcon_loss(z, y, where=m, axis_name=axis_name)[0]

    loss1, (grad_w1, grad_x1) = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))(
        w, x, labels, where)
    for devices in (8, 2):  # 4 is between; each split is a compile
      mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:devices]), ("i",))

      def local(w, x, y, m, devices=devices):
        loss, (grad_w, grad_x) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, x, y, m, "i")
        return jax.lax.pmean(loss, "i"), jax.lax.pmean(grad_w, "i"), grad_x / devices

      loss, grad_w, grad_x = jax.jit(jax.shard_map(
          local, mesh=mesh, in_specs=(P(), P("i"), P("i"), P("i")), out_specs=(P(), P(), P("i")),
          check_vma=False))(w, x, labels, where)
      np.testing.assert_allclose(loss, loss1, rtol=1e-6, err_msg=f"{devices} devices")
      np.testing.assert_allclose(grad_w, grad_w1, rtol=1e-5, atol=1e-6, err_msg=f"{devices}")
      np.testing.assert_allclose(grad_x, grad_x1, rtol=1e-5, atol=1e-6, err_msg=f"{devices}")
      self.assertTrue(np.all(np.isfinite(grad_w)) and np.all(np.isfinite(grad_x)))
      np.testing.assert_array_equal(np.asarray(grad_x)[[3, 20, 21]], 0.0)
    # With check_vma (the default) JAX psums a replicated parameter's cotangent itself: the gradient
    # of pmean(share) is then the one-device gradient (the recipe the docstring gives).
    grad_w = jax.jit(jax.shard_map(
        lambda w, x, y, m: jax.grad(lambda w: jax.lax.pmean(loss_fn(w, x, y, m, "i"), "i"))(w),
        mesh=mesh, in_specs=(P(), P("i"), P("i"), P("i")), out_specs=P()))(w, x, labels, where)
    np.testing.assert_allclose(grad_w, grad_w1, rtol=1e-5, atol=1e-6)

  def test_stack_views_is_view_major(self):
    views = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    z, labels, where = reweight_jax.baselines.stack_views(views, np.array([5, 6, 7]),
                                                where=np.array([True, False, True]))
    np.testing.assert_array_equal(z, np.concatenate([views[:, 0], views[:, 1]]))
    np.testing.assert_array_equal(labels, [5, 6, 7, 5, 6, 7])
    np.testing.assert_array_equal(where, [True, False, True, True, False, True])
    with self.assertRaisesRegex(TypeError, "positional argument"):  # `where` is keyword-only
      reweight_jax.baselines.stack_views(views, np.array([5, 6, 7]),  # pyright: ignore[reportCallIssue]
                                         np.ones(3, bool))
    self.assertIsNone(reweight_jax.baselines.stack_views(views, np.array([5, 6, 7]))[2])
    with self.assertRaisesRegex(ValueError, "views"):
      reweight_jax.baselines.stack_views(views[:2], np.array([5, 6, 7]))

  def test_projection_head_is_unit_norm(self):
    pytest.importorskip("flax")
    x = np.random.default_rng(5).normal(size=(2, 3, 7)).astype(np.float32)
    x[0, 0] = 0.0  # a zero input row (zero output at initialisation): 0, not NaN

    @jax.jit
    def init_and_apply(x):
      head = mr2_jax.SupConProjection()
      params = head.init(jax.random.PRNGKey(0), x)
      return params, head.apply(params, x)

    params, out = init_and_apply(x)
    self.assertEqual(params["params"]["hidden"]["kernel"].shape, (7, 7))  # Linear(d → d)
    self.assertEqual(params["params"]["output"]["kernel"].shape, (7, 128))
    self.assertEqual(out.shape, (2, 3, 128))
    norms = np.asarray(jnp.linalg.norm(out, axis=-1))
    self.assertEqual(norms[0, 0], 0.0)
    np.testing.assert_allclose(norms.reshape(-1)[1:], 1.0, rtol=1e-5)
    shapes = jax.eval_shape(lambda x: mr2_jax.SupConProjection(features=16).init_with_output(
        jax.random.PRNGKey(1), x)[0], x[0])
    self.assertEqual(shapes.shape, (3, 16))
