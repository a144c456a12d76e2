"""Padding rows (`where` False) count nowhere whatever their labels, eagerly as under `jit` (docs:
"Failure modes"): every function that reads labels under a mask (tests/batch_calls.py) gives the
same result when its padding rows carry −1, K or a huge label as when they carry 0, raises nothing
eagerly, and inside `traced_checks()` `checkify` flags nothing. The labels of real rows are still
checked (tests/lib/test_bad_rows.py)."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import reweight_jax
from tests import batch_calls
from tests.covering import covering

K = 5
BAD_LABELS = (-1, K, 2**31 - 1)
NAMES = sorted(batch_calls.CALLS)


def test_every_function_that_reads_labels_under_a_mask_is_called():
  assert set(batch_calls.CALLS) == batch_calls.labelled_functions()


def _batch():
  return batch_calls.make_batch(9, K, padding=3)


def _assert_same(got, want):
  chex.assert_trees_all_equal_structs(got, want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-6,
                               atol=1e-7)


# Every function and every bad label in the default run (under `jit` below, every function with
# every label); the rest of the product in the slow run.
@pytest.mark.parametrize("name, bad", covering((name, bad) for bad in BAD_LABELS for name in NAMES))
def test_padding_labels_are_ignored_eagerly(name, bad):
  call = batch_calls.CALLS[name]
  batch = _batch()
  _assert_same(call(batch.with_padding_labels(bad)), call(batch.with_padding_labels(0)))


def _jitted(name, batch):
  call = batch_calls.CALLS[name]
  return jax.jit(lambda labels, labels_b: call(dataclasses.replace(batch, labels=labels,
                                                                   labels_b=labels_b)))


@pytest.mark.parametrize("name", sorted(set(NAMES) - batch_calls.HOST_ONLY))
def test_padding_labels_are_ignored_under_jit_and_checkify_flags_nothing(name):
  batch = _batch()
  step = _jitted(name, batch)
  clean = batch.with_padding_labels(0)
  want = step(jnp.asarray(clean.labels), jnp.asarray(clean.labels_b))
  # Traced (and compiled) once, inside `traced_checks()`, then called with each bad label.
  checked = jax.jit(checkify.checkify(_jitted(name, batch), errors=checkify.user_checks))
  for bad in BAD_LABELS:
    padded = batch.with_padding_labels(bad)
    labels, labels_b = jnp.asarray(padded.labels), jnp.asarray(padded.labels_b)
    _assert_same(step(labels, labels_b), want)
    with reweight_jax.traced_checks():
      err, got = checked(labels, labels_b)
    assert err.get() is None, (name, bad, err.get())
    _assert_same(got, want)
