"""Benchmark: bytes crossing devices per step for the MR2 class statistics, and the drift of the cheap
'per_device' reduction.

    python -m experiments.benchmarks.communication          # sets 8 fake CPU devices itself

Part 1 compiles `update_class_stats` and a full MR2 gradient step under `jax.pmap` on 8 devices for
several (K, d) and counts, from the compiled HLO, the bytes of every collective (all-reduce: its
buffers; all-gather: its output; reduce-scatter: its input), per device and step.
Part 2 streams one epoch of long-tailed digits (8 devices × 8 examples) through a fixed random ReLU
feature map and updates the statistics with both reductions; it reports how far A, V, γ and s̄ of
'per_device' end from the exact ones, for p = 2 and p = 5.
"""

from __future__ import annotations

import json
import os
import re

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mr2_jax  # noqa: E402
from experiments.data import batches  # noqa: E402
from experiments.data import loading  # noqa: E402
from experiments.data import long_tail  # noqa: E402

DEVICES = 8
DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "pred": 1, "f64": 8, "s64": 8, "bf16": 2, "f16": 2,
               "u8": 1, "s8": 1}
COLLECTIVE = re.compile(r"=\s*(.+?)\s+(all-reduce|all-gather|reduce-scatter)(?:-start)?\(")
SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")


def _bytes(type_text: str) -> int:
  total = 0
  for dtype, dims in SHAPE.findall(type_text):
    size = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
    total += size * DTYPE_BYTES.get(dtype, 4)
  return total


def collective_bytes(hlo_text: str) -> dict[str, int]:
  """Bytes per collective kind in a compiled HLO module: the result buffers of all-reduce and
  all-gather, and the input of reduce-scatter (its result × the number of devices)."""
  totals = {"all-reduce": 0, "all-gather": 0, "reduce-scatter": 0}
  for result_type, kind in COLLECTIVE.findall(hlo_text):
    totals[kind] += _bytes(result_type) * (DEVICES if kind == "reduce-scatter" else 1)
  return totals


def compiled_text(fn, *args) -> str:
  return jax.pmap(fn, axis_name="batch").lower(*args).compile().as_text()


def communication_table(configs):
  rows = []
  for num_classes, dim, local_batch in configs:
    features = jax.ShapeDtypeStruct((DEVICES, local_batch, dim), jnp.float32)
    labels = jax.ShapeDtypeStruct((DEVICES, local_batch), jnp.int32)
    stats = jax.tree.map(lambda x: jax.ShapeDtypeStruct((DEVICES, *x.shape), x.dtype),
                         mr2_jax.init_class_stats(num_classes))
    head = jax.ShapeDtypeStruct((DEVICES, dim, num_classes), jnp.float32)
    for reduction in ("exact", "per_device"):
      update = lambda s, f, y, r=reduction: mr2_jax.update_class_stats(s, f, y, axis_name="batch",
                                                                       reduction=r)

      def grad_step(w, s, f, y, r=reduction):
        def loss_fn(w, f):
          loss, new_stats, _ = mr2_jax.mr2_loss(f @ w, f, y, s, axis_name="batch",
                                                stats_reduction=r)
          return loss, new_stats
        (_, new_stats), grads = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(w, f)
        return jax.lax.pmean(grads[0], "batch"), grads[1], new_stats

      stats_bytes = collective_bytes(compiled_text(update, stats, features, labels))
      step_bytes = collective_bytes(compiled_text(grad_step, head, stats, features, labels))
      step_bytes["all-reduce"] -= dim * num_classes * 4  # the head's own gradient pmean
      rows.append({"K": num_classes, "d": dim, "global_batch": DEVICES * local_batch,
                   "reduction": reduction, "class_stats_bytes": sum(stats_bytes.values()),
                   "class_stats_by_kind": stats_bytes,
                   "mr2_loss_bytes_excluding_head_grad": sum(step_bytes.values()),
                   "mr2_loss_by_kind": step_bytes})
  return rows


def drift(p: float, decay: float = 0.9):
  """Exact vs per-device statistics on the same feature stream; relative errors at the end."""
  split = loading.load_split("digits", "train")
  split = split.subset(long_tail.long_tail_indices(split.labels, 10, 10.0, 0))
  rng = np.random.default_rng(0)
  projection = rng.normal(size=(64, 128)).astype(np.float32) / 8.0
  per_device = 8
  update = {
      r: jax.pmap(lambda s, f, y, r=r: mr2_jax.update_class_stats(
          s, f, y, decay=decay, p=p, axis_name="batch", reduction=r), axis_name="batch",
                  in_axes=(None, 0, 0), out_axes=None)
      for r in ("exact", "per_device")}
  stats = {r: mr2_jax.init_class_stats(10) for r in update}
  for batch in batches.train_batches(split, DEVICES * per_device, seed=0, epoch=0, augment=False):
    images = batch["image"].reshape(len(batch["label"]), -1)
    features = np.maximum(images @ projection, 0.0).reshape(DEVICES, per_device, -1)
    labels = batch["label"].reshape(DEVICES, per_device)
    for r in update:
      stats[r] = update[r](stats[r], features, labels)
  exact, cheap = stats["exact"], stats["per_device"]
  rel = lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))
  return {
      "p": p, "steps": len(split) // (DEVICES * per_device),
      "max_rel_error_A": rel(cheap.sq_mean_norm, exact.sq_mean_norm),
      "max_rel_error_V": rel(cheap.mean_sq_deviation, exact.mean_sq_deviation),
      "max_rel_error_gamma": rel(mr2_jax.class_margins(cheap), mr2_jax.class_margins(exact)),
      "rel_error_s_bar": rel(mr2_jax.mean_class_deviation(cheap),
                             mr2_jax.mean_class_deviation(exact)),
      "mean_V_ratio_per_device_over_exact": float(np.mean(np.asarray(cheap.mean_sq_deviation)
                                                          / np.asarray(exact.mean_sq_deviation))),
  }


def main():
  assert jax.local_device_count() == DEVICES, "needs 8 (fake) devices"
  for row in communication_table([(10, 64, 32), (1000, 2048, 32), (8142, 2048, 32),
                                  (8142, 2048, 256)]):
    print(json.dumps(row))
  for p in (2.0, 5.0):
    print(json.dumps(drift(p)))


if __name__ == "__main__":
  main()
