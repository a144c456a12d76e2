"""Tests for reweight_jax.neural_collapse (NC1–NC4, streaming) and ρ (mr2_reweight_core.metrics)."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized
from hypothesis import given
from hypothesis import strategies as st

import reweight_jax as rw
from tests.reference import numpy_reweight as ref

RTOL = 1e-5
METRICS = ("nc1", "nc2", "nc2_classifier", "nc3", "nc4")
REF_KEYS = {"nc2_classifier": "nc2_w"}


def _assert_matches_reference(metrics, expected, rtol=RTOL, atol=0.0):
  for name in METRICS:
    np.testing.assert_allclose(getattr(metrics, name), expected[REF_KEYS.get(name, name)],
                               rtol=rtol, atol=atol, err_msg=name)


def _random_set(seed, num_classes, dim, counts, spread=3.0, noise=1.0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(num_classes), counts).astype(np.int32)
  rng.shuffle(labels)
  means = spread * rng.normal(size=(num_classes, dim))
  features = (means[labels] + noise * rng.normal(size=(labels.shape[0], dim))).astype(np.float32)
  classifier = (means + rng.normal(size=means.shape)).astype(np.float32)
  return features, labels, classifier


def _simplex_etf(num_classes, dim, per_class, seed=0):
  rng = np.random.default_rng(seed)
  basis, _ = np.linalg.qr(rng.normal(size=(dim, num_classes)))
  vertices = np.sqrt(num_classes / (num_classes - 1)) * basis @ (
      np.eye(num_classes) - np.ones((num_classes, num_classes)) / num_classes)
  means = 3.0 * vertices.T                                      # [K, d], centred at 0
  labels = np.tile(np.arange(num_classes), per_class).astype(np.int32)
  # A classifier scale with O(1) cross-entropy, so that float32 rounding of the loss stays ≪ 1e-6.
  return means[labels].astype(np.float32), labels, (0.1 * means).astype(np.float32)


def _ce(logits, labels):
  return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)[:, 0]


class OneShotTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference(self):
    features, labels, classifier = _random_set(1, 5, 8, [12] * 5)
    metrics = self.variant(rw.nc_metrics)(features, labels, classifier)
    _assert_matches_reference(metrics, ref.nc_metrics(features, labels, classifier, 5), rtol=1e-4)
    self.assertTrue(np.isnan(metrics.rho))  # no losses given

  @parameterized.named_parameters(
      ("long_tailed", 6, 10, [40, 20, 10, 5, 3, 2]),
      ("dim_below_classes", 7, 4, [9, 8, 7, 6, 5, 4, 3]),
  )
  def test_matches_reference_shapes(self, num_classes, dim, counts):
    features, labels, classifier = _random_set(1, num_classes, dim, counts)
    metrics = jax.jit(rw.nc_metrics)(features, labels, classifier)
    expected = ref.nc_metrics(features, labels, classifier, num_classes)
    _assert_matches_reference(metrics, expected, rtol=1e-4)

  def test_simplex_etf_is_zero(self):
    features, labels, classifier = _simplex_etf(5, 8, per_class=6)
    losses = _ce(features @ classifier.T, labels)
    metrics = jax.jit(rw.nc_metrics)(features, labels, classifier, per_example_loss=losses)
    for name in METRICS + ("rho",):
      self.assertLess(abs(float(getattr(metrics, name))), 1e-6, name)
    expected = ref.nc_metrics(features, labels, classifier, 5)
    _assert_matches_reference(metrics, expected, atol=1e-6)

  def test_perturbed_etf_is_positive(self):
    features, labels, classifier = _simplex_etf(5, 8, per_class=6)
    rng = np.random.default_rng(2)
    features = features + 2.5 * rng.normal(size=features.shape).astype(np.float32)
    classifier = classifier + rng.normal(size=classifier.shape).astype(np.float32)
    losses = _ce(features @ classifier.T, labels)
    metrics = jax.jit(rw.nc_metrics)(features, labels, classifier, per_example_loss=losses)
    for name in METRICS + ("rho",):
      self.assertGreater(float(getattr(metrics, name)), 1e-3, name)
    _assert_matches_reference(metrics, ref.nc_metrics(features, labels, classifier, 5), rtol=1e-4)
    class_losses, _, _ = ref.batch_class_losses(losses, labels, 5)
    np.testing.assert_allclose(metrics.rho, ref.rho(class_losses), rtol=RTOL)

  def test_absent_class_is_left_out(self):
    """Convention: an absent class is dropped; equal to the problem without it."""
    features, labels, classifier = _random_set(3, 5, 6, [10, 9, 8, 7, 6])
    keep = labels != 2
    metrics = jax.jit(rw.nc_metrics)(features[keep], labels[keep], classifier)
    reduced_labels = np.where(labels[keep] > 2, labels[keep] - 1, labels[keep])
    expected = ref.nc_metrics(features[keep], reduced_labels, np.delete(classifier, 2, axis=0), 4)
    for name in ("nc1", "nc2", "nc2_classifier", "nc3"):
      np.testing.assert_allclose(getattr(metrics, name), expected[REF_KEYS.get(name, name)],
                                 rtol=1e-4, err_msg=name)

  def test_bias_enters_nc4_only(self):
    features, labels, classifier = _random_set(4, 4, 6, [8, 8, 8, 8])
    bias = np.array([0.0, 1e4, 0.0, 0.0], np.float32)  # classifier always predicts class 1
    metrics = jax.jit(rw.nc_metrics)(features, labels, classifier, bias=bias)
    plain = jax.jit(rw.nc_metrics)(features, labels, classifier)
    np.testing.assert_allclose(metrics.nc1, plain.nc1)
    nearest = np.argmin(np.linalg.norm(
        features[:, None] - np.stack([features[labels == c].mean(0) for c in range(4)])[None],
        axis=-1), axis=1)
    np.testing.assert_allclose(metrics.nc4, np.mean(nearest != 1), rtol=RTOL)

  def test_bad_inputs_name_argument(self):
    features, labels, classifier = _random_set(5, 4, 6, [5, 5, 5, 5])
    with self.assertRaisesRegex(ValueError, "classifier"):
      rw.nc_metrics(features, labels, classifier[:, :5])
    with self.assertRaisesRegex(ValueError, "labels"):
      rw.nc_metrics(features, labels + 4, classifier)
    with self.assertRaisesRegex(ValueError, "features"):
      rw.nc_metrics(features[:-1], labels, classifier)
    with self.assertRaisesRegex(ValueError, "per_example_loss"):
      rw.nc_metrics(features, labels, classifier, per_example_loss=np.ones(3, np.float32))
    with self.assertRaisesRegex(ValueError, "features"):
      rw.NCAccumulator.init(4, 6).update(features[:, :5], labels)


class StreamingTest(chex.TestCase):

  def _one_shot_and_batches(self, seed=6):
    features, labels, classifier = _random_set(seed, 6, 10, [30, 18, 10, 7, 4, 3])
    losses = np.random.default_rng(seed).uniform(0.1, 3, labels.shape[0]).astype(np.float32)
    return features, labels, classifier, losses

  def test_streaming_equals_one_shot(self):
    features, labels, classifier, losses = self._one_shot_and_batches()
    one_shot = jax.jit(rw.nc_metrics)(features, labels, classifier, per_example_loss=losses)
    update = jax.jit(lambda acc, h, y, l, m: acc.update(h, y, per_example_loss=l, where=m))
    update_ncc = jax.jit(lambda acc, h, w, m: acc.update_ncc(h, w, where=m))
    batch = 16
    padded = -(-labels.shape[0] // batch) * batch
    pad = lambda a: np.concatenate([a, np.zeros((padded - a.shape[0],) + a.shape[1:], a.dtype)])
    h, y, l = pad(features), pad(labels), pad(losses)
    mask = np.arange(padded) < labels.shape[0]
    acc = rw.NCAccumulator.init(6, 10)
    for start in range(0, padded, batch):
      s = slice(start, start + batch)
      acc = update(acc, h[s], y[s], l[s], mask[s])
    for start in range(0, padded, batch):
      s = slice(start, start + batch)
      acc = update_ncc(acc, h[s], classifier, mask[s])
    streamed = jax.jit(lambda a, w: a.finalize(w))(acc, classifier)
    chex.assert_trees_all_close(streamed, one_shot, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(acc.counts, np.bincount(labels, minlength=6))
    np.testing.assert_allclose(acc.ncc_examples, labels.shape[0])
    _assert_matches_reference(streamed, ref.nc_metrics(features, labels, classifier, 6), rtol=1e-4)
    class_losses, _, _ = ref.batch_class_losses(losses, labels, 6)
    np.testing.assert_allclose(streamed.rho, ref.rho(class_losses), rtol=RTOL)

  def test_near_collapse_precision(self):
    """Within-class spread 1e-3 of the mean norm: the merged scatter keeps NC1 accurate."""
    features, labels, classifier = _random_set(7, 5, 8, [40] * 5, spread=30.0, noise=0.03)
    acc = rw.NCAccumulator.init(5, 8)
    update = jax.jit(lambda acc, h, y: acc.update(h, y))
    for start in range(0, labels.shape[0], 20):
      acc = update(acc, features[start:start + 20], labels[start:start + 20])
    expected = ref.nc_metrics(features, labels, classifier, 5)
    np.testing.assert_allclose(acc.finalize(classifier).nc1, expected["nc1"], rtol=1e-3)
    self.assertLess(expected["nc1"], 1e-4)

  @parameterized.named_parameters(("dense", 6, 4), ("compact", 40, 2))
  def test_pmap_equals_single_device(self, num_classes, per_device):
    num_devices, steps = 8, 2
    global_batch = num_devices * per_device
    rng = np.random.default_rng(8)
    labels = rng.integers(0, num_classes, steps * global_batch).astype(np.int32)
    features = rng.normal(size=(labels.shape[0], 5)).astype(np.float32) + labels[:, None] % 3
    losses = rng.uniform(0.1, 2, labels.shape[0]).astype(np.float32)
    where = rng.random(labels.shape[0]) < 0.9
    classifier = rng.normal(size=(num_classes, 5)).astype(np.float32)

    def step(acc, h, y, l, m, axis_name=None):
      return acc.update(h, y, per_example_loss=l, where=m, axis_name=axis_name)

    def ncc_step(acc, h, m, axis_name=None):
      return acc.update_ncc(h, classifier, where=m, axis_name=axis_name)

    single = rw.NCAccumulator.init(num_classes, 5)
    for t in range(steps):
      s = slice(t * global_batch, (t + 1) * global_batch)
      single = jax.jit(step)(single, features[s], labels[s], losses[s], where[s])
    for t in range(steps):
      s = slice(t * global_batch, (t + 1) * global_batch)
      single = jax.jit(ncc_step)(single, features[s], where[s])

    replicate = lambda tree: jax.tree.map(lambda a: jnp.stack([a] * num_devices), tree)
    split = lambda a: a.reshape((num_devices, per_device) + a.shape[1:])
    p_step = jax.pmap(functools.partial(step, axis_name="i"), axis_name="i")
    p_ncc = jax.pmap(functools.partial(ncc_step, axis_name="i"), axis_name="i")
    sharded = replicate(rw.NCAccumulator.init(num_classes, 5))
    for t in range(steps):
      s = slice(t * global_batch, (t + 1) * global_batch)
      sharded = p_step(sharded, split(features[s]), split(labels[s]), split(losses[s]),
                       split(where[s]))
    for t in range(steps):
      s = slice(t * global_batch, (t + 1) * global_batch)
      sharded = p_ncc(sharded, split(features[s]), split(where[s]))
    for device in range(num_devices):
      chex.assert_trees_all_close(jax.tree.map(lambda a: a[device], sharded), single,
                                  rtol=1e-5, atol=1e-5)
    self.assertGreater(float(single.ncc_examples), 0)


class RhoTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_reference(self):
    class_losses = np.array([0.3, 1.2, 2.5, 0.9, 4.0], np.float32)
    np.testing.assert_allclose(self.variant(rw.rho)(class_losses), ref.rho(class_losses),
                               rtol=RTOL)

  def test_equal_losses_and_mask(self):
    self.assertEqual(float(rw.rho(np.full(4, 1.3, np.float32))), 0.0)
    self.assertEqual(float(rw.rho(np.zeros(4, np.float32))), 0.0)
    np.testing.assert_allclose(
        rw.rho(np.array([1.0, 3.0, 100.0], np.float32), np.array([True, True, False])), 0.5,
        rtol=RTOL)
    self.assertTrue(np.isnan(rw.rho(np.ones(3, np.float32), np.zeros(3, bool))))

  def test_bad_inputs_name_argument(self):
    with self.assertRaisesRegex(ValueError, "present"):
      rw.rho(np.ones(3, np.float32), np.ones(2, bool))
    with self.assertRaisesRegex(ValueError, "class_losses"):
      rw.rho(np.ones((3, 1), np.float32))


def _unequal_simplex(counts, dim=12, seed=0):
  """Features exactly at the K vertices of a simplex ETF (centred at 0), n_c rows of class c, and a
  classifier equal to the vertices: a perfect collapse at unequal class counts."""
  num_classes = len(counts)
  rng = np.random.default_rng(seed)
  basis, _ = np.linalg.qr(rng.normal(size=(dim, num_classes)))
  vertices = (np.sqrt(num_classes / (num_classes - 1)) * basis @ (
      np.eye(num_classes) - np.ones((num_classes, num_classes)) / num_classes)).T
  labels = np.repeat(np.arange(num_classes), counts).astype(np.int32)
  return (3.0 * vertices[labels]).astype(np.float32), labels, vertices.astype(np.float32)


CIFAR10_LT_COUNTS = [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]


class CentringTest(chex.TestCase):
  """`centring='class_balanced'`: the class means centred on the mean of the class means."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_the_float64_reference_on_long_tailed_sets(self):
    for seed, counts in ((1, [40, 20, 10, 5, 3, 2]), (2, [9, 8, 7, 6, 5, 4, 3])):
      features, labels, classifier = _random_set(seed, len(counts), 5, counts)
      metrics = self.variant(functools.partial(rw.nc_metrics, centring="class_balanced"))(
          features, labels, classifier)
      expected = ref.nc_metrics(features, labels, classifier, len(counts),
                                centring="class_balanced")
      _assert_matches_reference(metrics, expected, rtol=1e-4)
      sample = ref.nc_metrics(features, labels, classifier, len(counts))
      self.assertGreater(abs(expected["nc2"] - sample["nc2"]), 1e-3)  # the two differ here

  def test_an_exact_simplex_scores_zero_at_cifar10_lt_counts_and_the_sample_centring_does_not(self):
    features, labels, classifier = _unequal_simplex(CIFAR10_LT_COUNTS)
    balanced = jax.jit(functools.partial(rw.nc_metrics, centring="class_balanced"))(
        features, labels, classifier)
    # Zero up to float32 rounding over 12,406 rows (the float64 reference, on the float32 inputs,
    # gives about 3e-8).
    reference = ref.nc_metrics(features, labels, classifier, 10, centring="class_balanced")
    for name in ("nc1", "nc2", "nc2_classifier", "nc3", "nc4"):
      self.assertLess(abs(float(getattr(balanced, name))), 1e-4, name)
      self.assertLess(abs(reference[REF_KEYS.get(name, name)]), 1e-6, name)
    sample = jax.jit(rw.nc_metrics)(features, labels, classifier)
    expected = ref.nc_metrics(features, labels, classifier, 10)
    # The sample-weighted convention's values for a perfect collapse (its floor at these counts).
    np.testing.assert_allclose([sample.nc2, sample.nc3], [expected["nc2"], expected["nc3"]],
                               rtol=1e-4)
    np.testing.assert_allclose([expected["nc2"], expected["nc3"]], [0.648, 0.151], atol=5e-4)
    np.testing.assert_allclose(sample.nc2_classifier, 0.0, atol=1e-5)  # W alone: no centring

  def test_equal_counts_make_the_centrings_agree_and_streaming_equals_one_shot(self):
    features, labels, classifier = _random_set(3, 5, 6, [12] * 5)
    sample = rw.nc_metrics(features, labels, classifier)
    balanced = rw.nc_metrics(features, labels, classifier, centring="class_balanced")
    chex.assert_trees_all_close(sample, balanced, rtol=1e-5, atol=1e-6)
    features, labels, classifier = _random_set(4, 6, 10, [30, 18, 10, 7, 4, 3])
    acc = rw.NCAccumulator.init(6, 10)
    for start in range(0, labels.shape[0], 16):
      acc = acc.update(features[start:start + 16], labels[start:start + 16])
    chex.assert_trees_all_close(
        acc.finalize(classifier, centring="class_balanced"),
        rw.nc_metrics(features, labels, classifier, centring="class_balanced")._replace(
            nc4=jnp.nan), rtol=1e-5, atol=1e-6)

  def test_an_absent_class_is_left_out_of_the_balanced_mean(self):
    features, labels, classifier = _random_set(5, 5, 6, [10, 9, 8, 7, 6])
    keep = labels != 2
    metrics = rw.nc_metrics(features[keep], labels[keep], classifier, centring="class_balanced")
    reduced = np.where(labels[keep] > 2, labels[keep] - 1, labels[keep])
    expected = ref.nc_metrics(features[keep], reduced, np.delete(classifier, 2, axis=0), 4,
                              centring="class_balanced")
    for name in ("nc1", "nc2", "nc3"):
      np.testing.assert_allclose(getattr(metrics, name), expected[name], rtol=1e-4, err_msg=name)

  def test_an_unknown_centring_is_an_error_naming_it(self):
    features, labels, classifier = _random_set(6, 3, 4, [4, 4, 4])
    with self.assertRaisesRegex(ValueError, "centring: expected one of"):
      rw.nc_metrics(features, labels, classifier, centring="weighted")


@given(data=st.data())
def test_property_balanced_centring_matches_the_reference(data):
  """Random class counts (one to nine rows a class), K and d ≥ K: the class-balanced NC1–NC4 equal
  the float64 reference's."""
  num_classes = data.draw(st.integers(2, 6), label="K")
  dim = data.draw(st.integers(num_classes, 8), label="d")
  counts = data.draw(st.lists(st.integers(1, 9), min_size=num_classes, max_size=num_classes),
                     label="counts")
  seed = data.draw(st.integers(0, 2 ** 16), label="seed")
  features, labels, classifier = _random_set(seed, num_classes, dim, counts)
  metrics = rw.nc_metrics(features, labels, classifier, centring="class_balanced")
  expected = ref.nc_metrics(features, labels, classifier, num_classes, centring="class_balanced")
  for name in ("nc2", "nc2_classifier", "nc3", "nc4"):
    np.testing.assert_allclose(getattr(metrics, name), expected[REF_KEYS.get(name, name)],
                               rtol=1e-4, atol=1e-5, err_msg=name)
  np.testing.assert_allclose(metrics.nc1, expected["nc1"], rtol=1e-3, err_msg="nc1")
