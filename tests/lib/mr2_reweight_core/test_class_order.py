"""mr2_reweight_core.class_order: the class-sorted batch with the rows without a partner last, and the
prefix sizes the per-class work is bucketed into."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mr2_reweight_core import class_order


def test_runs():
  first, length = class_order.runs(jnp.asarray([2, 2, 5, 7, 7, 7]))
  np.testing.assert_array_equal(first, [0, 0, 2, 3, 3, 3])
  np.testing.assert_array_equal(length, [2, 2, 1, 3, 3, 3])


# Batch sizes from a few lengths, edge ones included: each new length compiles the eager ops again.
@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 3, 5, 8, 17, 40]).flatmap(
    lambda rows: st.lists(st.integers(0, 9), min_size=rows, max_size=rows)), st.data())
def test_class_order_against_numpy(labels, data):
  """Stable; rows with a partner first by class, then the valid singletons by label, then the rest;
  `first`, `active`, `inverse` and the largest count as written from their definitions; the same
  when the sort reads a wider mask `sorted_by` (the valid rows and others, e.g. rows with a label
  but a non-finite feature), whose extra rows are then moved after the valid ones."""
  labels = np.asarray(labels, np.int32)
  valid, extra = (np.asarray(data.draw(st.lists(st.booleans(), min_size=len(labels),
                                                max_size=len(labels)))) for _ in range(2))
  sorted_by = valid | extra if data.draw(st.booleans()) else valid
  order, largest = class_order.class_order(
      jnp.asarray(labels), jnp.asarray(valid),
      sorted_by=None if sorted_by is valid else jnp.asarray(sorted_by))
  counts = np.bincount(labels[valid], minlength=10)
  paired = valid & (counts[labels] > 1)
  # The rows without a partner: the valid ones by label, then the others by the sort's key.
  key = np.where(sorted_by, labels, np.iinfo(np.int32).max)
  expected = sorted(range(len(labels)), key=lambda i: (not paired[i], not valid[i], key[i], i))
  np.testing.assert_array_equal(order.order, expected)
  np.testing.assert_array_equal(np.asarray(order.inverse)[expected], np.arange(len(labels)))
  sorted_key = np.where(paired, labels, class_order.MASKED)[expected]
  np.testing.assert_array_equal(order.key, sorted_key)
  np.testing.assert_array_equal(order.first, [np.argmax(sorted_key == k) for k in sorted_key])
  assert int(order.active) == int(paired.sum())
  assert int(largest) == int(counts.max(initial=0))


@pytest.mark.parametrize("rows, sizes", [(512, (64, 128, 256, 512)), (62, (7, 15, 31, 62)),
                                         (4, (1, 2, 4)), (1, (1,))])
def test_prefix_sizes(rows, sizes):
  assert class_order.prefix_sizes(rows) == sizes


def test_smallest_prefix_holds_the_active_rows():
  sizes = (64, 128, 256, 512)
  for active, index in ((0, 0), (64, 0), (65, 1), (193, 2), (256, 2), (257, 3), (512, 3)):
    assert int(class_order.smallest_prefix(sizes, jnp.int32(active))) == index


def test_centred_prefix_and_padding():
  """Rows minus their class's first row (batch order), zero without a partner; padded positions
  read row 0 and match nothing."""
  labels = jnp.asarray([4, 2, 4, 9, 4], jnp.int32)
  features = jnp.asarray(np.arange(10.0).reshape(5, 2) ** 2, jnp.float32)
  order, _ = class_order.class_order(labels, jnp.ones(5, bool))
  order = class_order.padded(order, 8)
  np.testing.assert_array_equal(order.order, [0, 2, 4, 1, 3, 0, 0, 0])
  np.testing.assert_array_equal(order.first, [0, 0, 0, 3, 3, 5, 6, 7])
  centred, live = class_order.centred_prefix(features, order, 8)
  np.testing.assert_array_equal(live, [True] * 3 + [False] * 5)
  f = np.asarray(features)
  np.testing.assert_array_equal(centred[:3], f[[0, 2, 4]] - f[0])
  np.testing.assert_array_equal(centred[3:], 0.0)
  small, small_live = class_order.centred_prefix(features, order, 2)
  np.testing.assert_array_equal(small, centred[:2])
  np.testing.assert_array_equal(small_live, [True, True])


def test_centred_prefix_unpaired_rows_zeroed_or_left():
  """`zero_unpaired=False` leaves the unpaired rows as they fall (here a NaN singleton) and the
  paired rows bit for bit as with zeroing."""
  labels = jnp.asarray([4, 2, 4, 9, 4], jnp.int32)
  features = np.arange(10.0, dtype=np.float32).reshape(5, 2) ** 2
  features[3] = np.nan  # class 9, a singleton
  order, _ = class_order.class_order(labels, jnp.ones(5, bool))
  zeroed, live = class_order.centred_prefix(jnp.asarray(features), order, 5)
  left, _ = class_order.centred_prefix(jnp.asarray(features), order, 5, zero_unpaired=False)
  np.testing.assert_array_equal(np.asarray(left)[np.asarray(live)], np.asarray(zeroed)[np.asarray(live)])
  np.testing.assert_array_equal(zeroed[3:], 0.0)
  assert np.isnan(np.asarray(left)[3:]).any()


def test_pair_count():
  """Σ_k n_k (n_k − 1)/2 over the valid rows (masked rows pair with nothing)."""
  labels = jnp.asarray([4, 2, 4, 9, 4, 2, 7, 7], jnp.int32)
  valid = jnp.asarray([True, True, True, True, True, True, True, False])
  order, _ = class_order.class_order(labels, valid)
  assert int(class_order.pair_count(order)) == 3 + 1  # class 4: 3 rows, class 2: 2, class 7: 1 valid
