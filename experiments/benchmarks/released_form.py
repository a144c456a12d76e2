"""Section 'released_form' of `experiments.benchmarks.run`: the MR2 loss + statistics step in the
paper form, the released form, and the released form as it was before each of five changes, each
compiled for one random batch and timed per call, interleaved in one run, beside the authors'
PyTorch figures and the share of CPU time stolen while timing."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

from experiments.benchmarks.loss_scaling import AUTHORS_MS, AUTHORS_SOURCES, _loss_fns
from experiments.benchmarks.timing import (cpu_ticks, interleaved, steal_share, summarize_times,
                                           warm_up)
from mr2_jax import class_moments
from mr2_jax import lp_norm
from mr2_jax import margins
from mr2_reweight_core import class_order
from mr2_reweight_core import cross_entropy


def released_form_variants(batch: int, dim: int, classes: int) -> dict:
  """MR2 loss + statistics steps (forward + backward): the paper form (p = 2), the released form
  (p = 5) with integer powers (`mr2_jax.lp_norm.abs_pow`), and the released form as it was
  before each of five changes — the float power (`jnp.abs(x) ** 5.0`, exp/log), the autodiff
  cross-entropy (z / γ_y formed, the label's gather scattered back), the two-pass cross-entropy
  (shifted by the row maximum: max, then exp-sum), the statistics by slot sums over every row, and
  ℓ_s̄ and the statistics on all rows instead of the prefix holding the rows with a partner —
  each compiled (the earlier ones under their patch) for one random batch.

  Returns:
    {name: (label, compiled step, its arguments)}.
  """

  def autodiff_label_log_softmax(logits, labels, temperature=None, flag_non_finite=False):
    """The label log-softmax before its written-out derivative: z / T formed, then autodiff."""
    del flag_non_finite  # not yet
    scaled = logits if temperature is None else logits / temperature[:, None]
    shifted = scaled - jax.lax.stop_gradient(jnp.max(scaled, axis=-1, keepdims=True))
    return (jnp.take_along_axis(shifted, labels[:, None], axis=-1)[:, 0]
            - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1)))

  @contextlib.contextmanager
  def patched(module, name, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
      yield
    finally:
      setattr(module, name, original)

  def two_pass_value(logits, labels, temperature, flag_non_finite=False):
    """The label log-softmax's value shifted by the row maximum (before 2026-12-01, 23:00)."""
    del flag_non_finite  # not yet
    top = jnp.max(logits, axis=-1)
    shifted = logits - top[:, None]
    if temperature is not None:
      shifted = shifted / temperature[:, None]
    log_norm = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))
    return jnp.take_along_axis(shifted, labels[:, None], axis=-1)[:, 0] - log_norm, top, log_norm

  def slot_moments(features, labels, valid, num_classes, p, sorted_by=None):
    """The statistics by slot sums over every row, as for K ≤ B (and before 2026-12-01, 23:10)."""
    del sorted_by  # no sort
    return class_moments.slot_moments(features, labels, valid, num_classes, p, None)

  # Earlier code of the released form, each traced (and compiled) under its patch; once compiled
  # the patch is not needed to run it.
  before = {
      "mr2_released_float_power": (
          "released, p = 5, float power (before)",
          lambda: patched(lp_norm, "abs_pow", lambda x, p: jnp.abs(x) ** p)),
      "mr2_released_autodiff_ce": (
          "released, p = 5, autodiff cross-entropy (before)",
          lambda: patched(margins, "label_log_softmax", autodiff_label_log_softmax)),
      "mr2_released_two_pass_ce": (
          "released, p = 5, two-pass cross-entropy (before)",
          lambda: patched(cross_entropy, "_label_log_softmax_value", two_pass_value)),
      "mr2_released_slot_sums": (
          "released, p = 5, statistics by slot sums (before)",
          lambda: patched(class_moments, "sorted_moments", slot_moments)),
      "mr2_released_all_rows": (
          "released, p = 5, ℓ_s̄ and statistics on all rows, no prefix (before)",
          lambda: patched(class_order, "prefix_sizes", lambda rows: (rows,))),
  }

  fns, _ = _loss_fns(batch, dim, classes, loop=1)
  labels = {"mr2": "paper, p = 2", "mr2_released": "released, p = 5, integer powers"}
  variants = {}
  for name, label in labels.items():
    fn, args, _ = fns[name]
    variants[name] = (label, fn.lower(*args).compile(), args)
  for name, (label, patch) in before.items():
    fn, args, _ = _loss_fns(batch, dim, classes, loop=1)[0]["mr2_released"]
    with patch():
      variants[name] = (label, fn.lower(*args).compile(), args)
  return variants


def bench_released_form(quick: bool) -> dict:
  """The steps of `released_form_variants`, interleaved in one run, per call."""
  sizes = [(512, 2048, 1000), (512, 2048, 8142)] + ([] if quick else [(128, 64, 10), (128, 64, 100)])
  rows = []
  for batch, dim, classes in sizes:
    variants = released_form_variants(batch, dim, classes)
    calls = {name: (lambda fn=fn, args=args: fn(*args)) for name, (_, fn, args) in variants.items()}
    warm_up(calls.values())  # before the CPU ticks: the stolen share is the timed calls' own
    ticks = cpu_ticks()
    times = interleaved(calls, 3 if quick else 7, 10)
    stolen = steal_share(ticks)
    for name, (label, _, _) in variants.items():
      row = {"loss": name, "form": label, "batch": batch, "dim": dim, "classes": classes,
             "per_call": summarize_times(times[name]), "steal_share": stolen}
      authors = AUTHORS_MS.get((batch, dim, classes), {}).get("mr2_released")
      if authors is not None and name.startswith("mr2_released"):
        row["authors_pytorch_ms"], source = authors
        row["authors_source"] = AUTHORS_SOURCES[source]
        row["speedup_per_call"] = row["authors_pytorch_ms"] / row["per_call"]["median_ms"]
      rows.append(row)
      print(f"  released_form {label:40s} B={batch} d={dim} K={classes}: "
            f"{row['per_call']['median_ms']:.2f} ms", flush=True)
  return {"rows": rows}
