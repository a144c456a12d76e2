"""mr2_jax.class_moments: the batch's class moments by slot sums and by the class sort agree, and
the rows whose features are finite are found from the moments, with a pass over [B, d] for them
only on a batch that has a non-finite row."""

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mr2_jax
from mr2_jax import class_moments
from mr2_jax import class_stats
from mr2_reweight_core import checks
from mr2_reweight_core import class_order
from mr2_reweight_core import class_sums
from tests.covering import covering


def _labels_with_counts(counts, num_classes, seed):
  """Labels with the given class counts, classes drawn from [0, K), rows shuffled."""
  rng = np.random.default_rng(seed)
  classes = rng.choice(num_classes, size=len(counts), replace=False)
  return rng.permutation(np.repeat(classes, counts)).astype(np.int32)


@pytest.mark.parametrize("counts, prefix", [  # every 7th row masked
    ((1,) * 64, 8),                          # all singletons: the P/8 prefix, nothing summed
    ((2,) * 4 + (1,) * 56, 8),               # pairs among singletons (4 rows with a partner): P/8
    ((3,) * 3 + (2,) * 1 + (1,) * 51, 15),   # 10 of 62 rows: P/4 (P/8 = 7 rows)
    ((2,) * 16 + (1,) * 32, 32),             # 20 of 64: P/2
    ((5,) * 12 + (4,), 64),                  # every valid row has a partner: all P
    ((64,), 64),                             # one class
])
@pytest.mark.parametrize("p", [2.0, 5.0])
def test_sorted_moments_equal_the_slot_sums(counts, prefix, p):
  """K > B on one device: the class-sorted moments (singletons without a sum, the rows with a
  partner summed in the smallest prefix that holds them) are the slot sums' values, with masked
  rows, a common offset of 1e4 and spreads from 1e-3 to 10: bit for bit for p = 2; for p = 5 to
  within 2 ulp (the one-pass Σ|x|^p of `lp_sq_norm` is fused differently in the two programs, and
  XLA may contract its multiply-adds differently: 1 ulp apart in 2 of 1,000 values here)."""
  num_classes = 1000
  labels = _labels_with_counts(counts, num_classes, seed=len(counts))
  rng = np.random.default_rng(prefix)
  batch = labels.shape[0]
  spread = 10.0 ** rng.uniform(-3, 1, size=(num_classes, 1))[labels]
  features = (1e4 + rng.normal(size=(num_classes, 6))[labels] + spread * rng.normal(size=(batch, 6))
              ).astype(np.float32)
  valid = jnp.asarray(np.arange(batch) % 7 != 3)
  order, _ = class_order.class_order(jnp.asarray(labels), valid)

  def per_class(slots, a, v):
    state = mr2_jax.init_class_stats(num_classes)
    present = slots.counts > 0
    return [np.asarray(class_sums.scatter_to_classes(x, values, slots, present))
            for x, values in ((state.sq_mean_norm, a), (state.mean_sq_deviation, v),
                              (state.sq_mean_norm, slots.counts))]

  sorted_moments = jax.jit(class_moments.sorted_moments, static_argnums=(3, 4))
  slot_moments = jax.jit(class_moments.slot_moments, static_argnums=(3, 4, 5))
  got = per_class(*sorted_moments(jnp.asarray(features), jnp.asarray(labels), valid, num_classes, p))
  want = per_class(*slot_moments(jnp.asarray(features), jnp.asarray(labels), valid, num_classes, p,
                                 None))
  for g, w in zip(got, want):
    if p == 2.0:
      np.testing.assert_array_equal(g, w)
    else:
      np.testing.assert_allclose(g, w, rtol=2.5e-7, atol=0)
  # The valid rows' classes are the present ones, and a collapsed-free class has v > 0.
  np.testing.assert_array_equal(np.nonzero(want[2])[0], np.unique(labels[np.asarray(valid)]))
  sizes = class_order.prefix_sizes(batch)
  assert sizes[int(class_order.smallest_prefix(sizes, order.active))] == prefix
  assert np.all(got[1][np.bincount(labels[np.asarray(valid)], minlength=num_classes) > 1] > 0)


@pytest.mark.parametrize("labels, valid", [([3], [True]), ([3], [False]), ([3, 3], [True, True]),
                                           ([3, 7], [True, True]), ([4, 4, 1], [True, False, True])])
def test_sorted_moments_on_batches_of_one_to_three_rows(labels, valid):
  """K > B for the smallest batches (one row: no prefix to sum at all): the slot sums' values."""
  features = jnp.asarray(np.random.default_rng(len(labels)).normal(size=(len(labels), 5)),
                         jnp.float32)
  labels, valid = jnp.asarray(labels, jnp.int32), jnp.asarray(valid)
  state = mr2_jax.init_class_stats(10)

  def per_class(slots, *values):
    present = slots.counts > 0
    return [np.asarray(class_sums.scatter_to_classes(state.sq_mean_norm, x, slots, present))
            for x in (*values, slots.counts)]

  sorted_moments = jax.jit(class_moments.sorted_moments, static_argnums=(3, 4))
  slot_moments = jax.jit(class_moments.slot_moments, static_argnums=(3, 4, 5))
  update = jax.jit(mr2_jax.update_class_stats, static_argnames="p")
  for p in (2.0, 5.0):
    got = per_class(*sorted_moments(features, labels, valid, 10, p))
    want = per_class(*slot_moments(features, labels, valid, 10, p, None))
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)
    stats = update(state, features, labels, where=valid, p=p)
    np.testing.assert_array_equal(stats.seen, np.isin(np.arange(10), np.asarray(labels)[valid]))


def _moments(features, labels, num_classes, p=2.0):
  """`class_moments.moments` of one device, exact reduction, as `class_stats` binds it."""
  return lambda valid: class_moments.moments(
      features, labels, valid, sorted_by=jnp.ones(labels.shape, bool), num_classes=num_classes,
      p=p, axis_name=None, reduction="exact")


def _defer_at(elements):
  """Patches the B·d from which the statistics defer the features' finite-row check."""
  return mock.patch.object(class_stats, "DEFER_MIN_ELEMENTS", elements)


def _bad_batch(kind, batch=24, dim=5, num_classes=4, bad_rows=(0, 7)):
  rng = np.random.default_rng(batch + dim)
  features = rng.normal(size=(batch, dim)).astype(np.float32)
  labels = rng.integers(0, num_classes, batch).astype(np.int32)
  labels[list(bad_rows)] = 1  # two bad rows of one class, with other rows of that class
  for row in bad_rows:
    features[row, 2] = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf, "clean": features[row, 2],
                        "huge": 3e19}[kind]
  return jnp.asarray(features), jnp.asarray(labels)


# K > B (40): the class sort. Every kind and size under jit, and eager once, in the default run;
# the rest of the product slow.
@pytest.mark.parametrize("kind, jit, num_classes, p", covering(
    (kind, jit, num_classes, p) for jit in (True, False) for num_classes, p in ((4, 2.0), (4, 5.0),
                                                                                (40, 2.0))
    for kind in ("nan", "+inf", "-inf", "huge", "clean")))
def test_moments_of_finite_rows_equal_those_of_an_up_front_check(kind, jit, num_classes, p):
  """The mask is `labelled & finite_rows(features)` and the moments are those of that mask, bit for
  bit: with non-finite rows (NaN, ±inf), finite rows whose moments overflow (3e19² > float32's
  max), and a clean batch."""
  features, labels = _bad_batch(kind, num_classes=num_classes)
  labelled = jnp.arange(labels.shape[0]) % 5 != 4  # some rows unlabelled (padding)
  moments = _moments(features, labels, num_classes, p)

  def deferred(features, labelled):
    return class_moments.moments_of_finite_rows(features, labelled, moments)

  def up_front(features, labelled):
    valid = labelled & checks.finite_rows(features)
    return (valid, *moments(valid))

  if jit:
    deferred, up_front = jax.jit(deferred), jax.jit(up_front)
  got, want = deferred(features, labelled), up_front(features, labelled)
  jax.tree.map(np.testing.assert_array_equal, got, want)
  finite = np.ones(labels.shape, bool) if kind in ("clean", "huge") else ~np.isin(
      np.arange(labels.shape[0]), (0, 7))  # `_bad_batch`'s rows
  expect_valid = np.asarray(labelled) & finite
  np.testing.assert_array_equal(got[0], expect_valid)


@pytest.mark.parametrize("kind, passes", [("clean", 0), ("nan", 1), ("+inf", 1), ("huge", 1)])
def test_the_finite_rows_are_looked_for_only_when_a_class_moment_is_not_finite(kind, passes):
  """Eagerly (the branch is taken in Python there): a clean batch costs no pass over [B, d] for
  its finite rows; a batch with a non-finite row, or a class whose moments overflow, one."""
  features, labels = _bad_batch(kind)
  calls = []
  finite_rows = checks.finite_rows

  def counted(x):
    calls.append(x.shape)
    return finite_rows(x)

  with mock.patch.object(checks, "finite_rows", counted), _defer_at(0):
    stats = mr2_jax.update_class_stats(mr2_jax.init_class_stats(4), features, labels)
  assert len(calls) == passes
  assert int(stats.skipped_rows) == {"clean": 0, "nan": 2, "+inf": 2, "huge": 0}[kind] + (
      # a class whose moments overflow is left out, its rows counted
      int(np.sum(np.asarray(labels) == 1)) if kind == "huge" else 0)


def test_the_up_front_check_inside_traced_checks():
  """Inside `traced_checks()` the statistics check the rows first (the checkify check names them),
  with the same statistics as the deferred check."""
  features, labels = _bad_batch("nan")
  with _defer_at(0):
    assert class_stats.defer_finite_check(features)
    deferred = jax.jit(mr2_jax.update_class_stats)(mr2_jax.init_class_stats(4), features, labels)
    with checks.traced_checks():
      assert not class_stats.defer_finite_check(features)
      checked = jax.jit(mr2_jax.update_class_stats)(mr2_jax.init_class_stats(4), features, labels)
  jax.tree.map(np.testing.assert_array_equal, deferred, checked)


@pytest.mark.parametrize("batch, dim, passes", [(24, 5, 1), (512, 2048, 0), (1024, 1024, 0),
                                                (511, 2048, 1)])
def test_the_check_is_deferred_from_a_million_feature_values(batch, dim, passes):
  """The features' finite-row check is deferred to the moments from B·d = 2²⁰ (512 × 2,048) on:
  a clean batch below that takes the one up-front pass over [B, d], one at or above it none."""
  rng = np.random.default_rng(0)
  features = jnp.asarray(rng.normal(size=(batch, dim)).astype(np.float32))
  labels = jnp.asarray(rng.integers(0, 10, batch).astype(np.int32))
  calls = []
  finite_rows = checks.finite_rows

  def counted(x):
    calls.append(x.shape)
    return finite_rows(x)

  with mock.patch.object(checks, "finite_rows", counted):
    mr2_jax.update_class_stats(mr2_jax.init_class_stats(10), features, labels)
  assert len(calls) == passes
  assert class_stats.DEFER_MIN_ELEMENTS == 512 * 2048


@pytest.mark.parametrize("kind, jit, form, num_classes", covering(
    (kind, jit, form, num_classes) for jit in (True, False)
    for form, num_classes in (("paper", 4), ("released", 4), ("paper", 40))
    for kind in ("nan", "+inf", "-inf", "huge", "clean")))
def test_mr2_loss_is_the_same_with_the_check_deferred_or_up_front(kind, jit, form, num_classes):
  """`mr2_loss` with the check deferred (from any B·d) and up front (never deferred): the loss,
  its gradients, the statistics and aux bit for bit, with padding rows, on batches with
  non-finite rows, rows whose moments overflow, and a clean batch; and a traced label out of
  range."""
  features, labels = _bad_batch(kind, num_classes=num_classes)
  labels = labels.at[5].set(num_classes)  # out of range: only traced is it not an error
  where = jnp.arange(labels.shape[0]) % 5 != 4
  logits = jnp.asarray(np.random.default_rng(1).normal(size=(labels.shape[0], num_classes)),
                       jnp.float32)
  stats = mr2_jax.init_class_stats(num_classes)

  def loss_and_grads(logits, features, labels):  # a new function each time: traced afresh
    def loss(lg, f):
      value, new_stats, aux = mr2_jax.mr2_loss(lg, f, labels, stats, form=form, where=where)
      return value, (new_stats, aux)
    return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(logits, features)

  if not jit:
    labels = labels.at[5].set(0)
  results = []
  for elements in (0, np.iinfo(np.int64).max):
    with _defer_at(elements):
      run = jax.jit(lambda *a: loss_and_grads(*a)) if jit else loss_and_grads
      results.append(run(logits, features, labels))
  jax.tree.map(np.testing.assert_array_equal, *results)
  (value, (new_stats, _)), _ = results[0]
  if kind != "huge":  # rows 0 and 7 are real; row 5's label is out of range under jit
    assert np.isnan(value) == (kind != "clean" or jit)
  expected_skipped = 2 * (kind in ("nan", "+inf", "-inf")) + jit
  if kind != "huge":
    assert int(new_stats.skipped_rows) == expected_skipped
