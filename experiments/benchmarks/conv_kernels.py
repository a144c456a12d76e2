"""The three convolutions of a ResNet-32 3×3 layer, JAX (this process's XLA_FLAGS) vs PyTorch eager.

    XLA_FLAGS= python -m experiments.benchmarks.conv_kernels
    XLA_FLAGS="$(python -c 'from experiments.common import xla_cpu; print(*xla_cpu.TUNED_FLAGS)')" \
        python -m experiments.benchmarks.conv_kernels

For each stage shape (batch 128; 32×32×16, 16×16×32, 8×8×64; 3×3, stride 1, 'SAME'): forward, input
gradient (dx) and weight gradient (dw), median ms of 10 calls after warm-up, interleaved with the
PyTorch calls of the same shapes (needs the optional `bench` extra).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np

from experiments.benchmarks.timing import summarize_times, time_calls

STAGES = ((32, 16), (16, 32), (8, 64))


def _median_ms(fn) -> float:
  """Median ms of 10 calls after two warm-up calls (`time_calls`; a PyTorch result is not JAX's
  and passes `jax.block_until_ready` unchanged: eager PyTorch on the CPU returns when done)."""
  return summarize_times(time_calls(fn, 10, warmup=2))["median_ms"]


def main():
  # optional: the PyTorch reference only (pip install ".[bench]")
  import torch  # pylint: disable=g-import-not-at-top
  dims = ("NHWC", "HWIO", "NHWC")
  conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)
  forward = jax.jit(conv)
  input_grad = jax.jit(lambda x, w, g: jax.vjp(lambda x: conv(x, w), x)[1](g)[0])
  weight_grad = jax.jit(lambda x, w, g: jax.vjp(lambda w: conv(x, w), w)[1](g)[0])
  rng = np.random.default_rng(0)
  rows = []
  for size, channels in STAGES:
    x = rng.normal(size=(128, size, size, channels)).astype(np.float32)
    w = rng.normal(size=(3, 3, channels, channels)).astype(np.float32)
    g = rng.normal(size=(128, size, size, channels)).astype(np.float32)
    xj, wj, gj = map(jax.numpy.asarray, (x, w, g))
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    wt = torch.from_numpy(w.transpose(3, 2, 0, 1).copy())
    gt = torch.from_numpy(g.transpose(0, 3, 1, 2).copy())
    row = {"input": [128, size, size, channels]}
    row["jax_fwd_ms"] = _median_ms(lambda: forward(xj, wj))
    row["torch_fwd_ms"] = _median_ms(lambda: torch.nn.functional.conv2d(xt, wt, padding=1))
    row["jax_dx_ms"] = _median_ms(lambda: input_grad(xj, wj, gj))
    row["torch_dx_ms"] = _median_ms(
        lambda: torch.nn.grad.conv2d_input(xt.shape, wt, gt, padding=1))
    row["jax_dw_ms"] = _median_ms(lambda: weight_grad(xj, wj, gj))
    row["torch_dw_ms"] = _median_ms(
        lambda: torch.nn.grad.conv2d_weight(xt, wt.shape, gt, padding=1))
    rows.append(row)
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}))
  print(json.dumps({"xla_flags": os.environ.get("XLA_FLAGS", ""), "torch": torch.__version__}))


if __name__ == "__main__":
  main()
