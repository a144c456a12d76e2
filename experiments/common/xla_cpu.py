"""XLA CPU settings for the trainer and the benchmarks (issue 7, 'the CPU gap').

On the development CPU (2 cores, x86-64 with AVX2) the jitted plain-CE ResNet-32 step (batch 128) runs
1.15 s with XLA's defaults and 0.70 s with `TUNED_FLAGS`; the PyTorch eager step is 0.40 s. A profile
of the default step (`experiments/benchmarks/run.py --only cpu_gap`, section notes in
`results/benchmarks/RESULTS.md`) shows where the time goes:

* every convolution — forward, input gradient and weight gradient — runs as a YNNPACK 'individual
  convolution' fusion, which on this machine runs single-threaded and slower than the Eigen
  convolution XLA otherwise calls (multi-threaded): `-individual_convolution` hands them back;
* the element-wise work of BatchNorm / ReLU / residual adds is emitted as many separate loop fusions;
  `+eltwise,+reduce` lets YNNPACK fuse it, with its vectorised kernels.

The flags change only how XLA executes the same HLO (results agree to float32 rounding; checked by
`tests/harness/common/test_xla_cpu.py`), and only the CPU backend reads them. They must be in `XLA_FLAGS` before
JAX creates its CPU client, i.e. before the first computation: `configure()` does that and refuses
to run after.
"""

from __future__ import annotations

import os

from jax._src import xla_bridge

TUNED_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce,-individual_convolution",)


def _flag_names(flags: str) -> set[str]:
  return {f.split("=", 1)[0] for f in flags.split()}


def configure(enable: bool = True) -> str:
  """Adds `TUNED_FLAGS` to `XLA_FLAGS` (a flag the user already set wins); returns `XLA_FLAGS`.

  Raises:
    RuntimeError: if JAX's backends are already initialised (the flags would be ignored silently).
  """
  current = os.environ.get("XLA_FLAGS", "")
  if not enable:
    return current
  if xla_bridge.backends_are_initialized():
    if all(flag in current.split() for flag in TUNED_FLAGS):
      return current
    raise RuntimeError("xla_cpu.configure() must run before the first JAX computation; "
                       "XLA reads XLA_FLAGS once, when it creates the CPU client.")
  user = _flag_names(current)
  added = [flag for flag in TUNED_FLAGS if flag.split("=", 1)[0] not in user]
  os.environ["XLA_FLAGS"] = " ".join([current, *added]).strip()
  return os.environ["XLA_FLAGS"]
