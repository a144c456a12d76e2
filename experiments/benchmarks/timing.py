"""Timing helpers of the benchmarks: one timed call (`time_calls`: warm-up calls, then each call
waited for with `jax.block_until_ready`), methods timed interleaved, round by round; medians with
their min–max; the share of CPU time the hypervisor stole while timing; and `REPO`, the folder the
sections' worker processes run in."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]


def summarize_times(seconds: list[float]) -> dict[str, float]:
  ms = 1e3 * np.asarray(seconds)
  return {"median_ms": float(np.median(ms)), "min_ms": float(ms.min()), "max_ms": float(ms.max()),
          "n": int(ms.size)}


def warm_up(fns: Iterable[Callable[[], Any]], calls: int = 1,
            block: Callable[[Any], Any] = jax.block_until_ready) -> None:
  """Calls each fn `calls` times, untimed (compilation, caches, a worker's start), waiting for each
  result with `block`."""
  for fn in fns:
    for _ in range(calls):
      block(fn())


def time_calls(fn: Callable[[], Any], repeats: int, *, warmup: int = 1,
               block: Callable[[Any], Any] = jax.block_until_ready) -> list[float]:
  """Seconds of each of `repeats` calls of `fn` after `warmup` untimed ones (`warm_up`).

  Each call is waited for with `block` inside its time: JAX dispatches asynchronously, so an
  unblocked call would time the dispatch only (a non-JAX result passes through unchanged).
  """
  warm_up([fn], warmup, block)
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    block(fn())
    seconds.append(time.perf_counter() - start)
  return seconds


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, per_round: int,
                block: Callable[[Any], Any] = jax.block_until_ready, *,
                warmup: int = 0) -> dict[str, list[float]]:
  """Seconds of each fn's calls: after `warmup` untimed calls of each, `per_round` timed calls
  (`time_calls`) per round, round-robin over fns for `rounds` rounds — a drift of this shared
  machine's speed falls on every fn alike."""
  warm_up(fns.values(), warmup, block)
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      times[name] += time_calls(fn, per_round, warmup=0, block=block)
  return times


def call_floor(fn, args):
  """A compiled function of `fn`'s signature that computes nothing: it returns zeros of `fn`'s
  output shapes. Its call time is the dispatch and buffer handling a call of this signature costs
  whatever it computes (`call_floor.py` times it beside the loss); a version whose state holds one
  more array pays for that array here."""
  shapes = jax.eval_shape(fn, *args)
  return jax.jit(lambda *a: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)).lower(
      *args).compile()


def cpu_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
  """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is none.

  Steal is the time the hypervisor ran other guests while this machine had work: on this shared
  virtual machine it is what makes one run's step times 1.5–2× another's. A timed block records
  the share of its CPU time that was stolen (`steal_share`).
  """
  try:
    with open(path) as f:
      fields = [int(x) for x in f.readline().split()[1:]]
  except OSError:
    return None
  return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(start: tuple[int, int] | None, path: str = "/proc/stat") -> float | None:
  """The stolen share of the CPU time since `start` (`cpu_ticks()`), or None."""
  end = cpu_ticks(path)
  if start is None or end is None or end[1] == start[1]:
    return None
  return (end[0] - start[0]) / (end[1] - start[1])


def timed_config(config, seed: int, device_input: bool, window: int):
  """A copy of `config` for a timed training run of the trainer's own loop: `seed`, the input on the
  device or not, logged every `window` steps, no evaluation pass, no checkpoint but the last."""
  config = config.copy_and_resolve_references()
  config.seed, config.input_on_device, config.progress_bar = seed, device_input, False
  config.log_every_steps, config.checkpoint_every_steps = window, 10**9
  config.test_every_epochs = config.class_loss_every_epochs = 0
  config.keep_checkpoints = 1
  return config
