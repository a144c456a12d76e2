"""Sections 'overhead' and 'compile' of `experiments.benchmarks.run`: the trainer's ResNet-32 train
step (batch 128, CIFAR shapes, `steps.train_step`) per method — CE, MR2, inverse reweighting and
both — timed interleaved in steady state (ratio to CE), and its trace + lower, XLA compile and first
step times (how many steady-state steps the start-up is worth)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks.timing import interleaved, summarize_times
from experiments.configs import cifar10_lt
from experiments.methods import registry
from experiments import models
from experiments.train import steps
from experiments.train import train_state

STEP_METHODS = ("ce", "mr2", "inverse_reweight", "mr2+inverse_reweight")


def _resnet_steps(batch_size: int):
  """(config, state, batch, {method: jitted step}) for the trainer's ResNet-32 CIFAR setting."""

  base = cifar10_lt.get_config()
  base.batch_size = batch_size
  base.reweight.start_epoch = 0  # reweighting active from the first step
  rng = np.random.default_rng(0)
  batch = {"image": jnp.asarray(rng.normal(size=(batch_size, 32, 32, 3)), jnp.float32),
           "label": jnp.asarray(rng.integers(0, 10, batch_size), jnp.int32)}
  counts = tuple(float(c) for c in np.round(5000 * 0.01 ** (np.arange(10) / 9)))
  task = steps.Task(class_counts=counts, steps_per_epoch=100)
  model = models.create_model(base.model, 10, head=base.head, cosine_scale=base.cosine_scale)
  lr = train_state.create_learning_rate_fn(base, task.steps_per_epoch)
  base.loss = "mr2+inverse_reweight"  # the loss state every method's step can take
  state = train_state.create_train_state(base, model, (32, 32, 3), 10, lr, jax.random.key(0))
  method_steps = {}
  for method in STEP_METHODS:  # each by name from the loss registry, as the trainer runs it
    config = base.copy_and_resolve_references()
    config.loss = method
    loss_fn = registry.make_loss_fn(config)
    fields = registry.init_loss_state(config, 10).keys()
    def step(s, b, loss_fn=loss_fn, fields=tuple(fields)):
      s = s.replace(loss_state={f: s.loss_state[f] for f in fields})
      return steps.train_step(s, b, loss_fn=loss_fn, task=task, learning_rate_fn=lr)
    method_steps[method] = jax.jit(step)
  return state, batch, method_steps


def bench_compile_and_overhead(quick: bool) -> tuple[dict, dict]:
  state, batch, steps = _resnet_steps(128)
  compile_rows, executables = {}, {}
  for method, step in steps.items():
    start = time.perf_counter()
    lowered = step.lower(state, batch)
    traced = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    jax.block_until_ready(compiled(state, batch))
    first = time.perf_counter()
    compile_rows[method] = {"trace_lower_s": traced - start, "compile_s": compiled_at - traced,
                            "first_step_s": first - compiled_at, "total_to_first_step_s": first - start}
    executables[method] = compiled

  rounds, per_round = (3, 2) if quick else (7, 3)
  fns = {m: (lambda c=c: c(state, batch)) for m, c in executables.items()}
  times = interleaved(fns, rounds, per_round, warmup=1)
  overhead = {m: summarize_times(t) for m, t in times.items()}
  ce = overhead["ce"]["median_ms"]
  for method, row in overhead.items():
    row["ratio_to_ce"] = row["median_ms"] / ce
    # Per-round ratios: the spread of the ratio itself, free of drifts between rounds.
    per_round_ratio = [sum(times[method][i:i + per_round]) / sum(times["ce"][i:i + per_round])
                       for i in range(0, len(times["ce"]), per_round)]
    row["ratio_per_round_min"] = min(per_round_ratio)
    row["ratio_per_round_max"] = max(per_round_ratio)
  for method, row in compile_rows.items():
    row["steady_step_ms"] = overhead[method]["median_ms"]
    row["startup_in_steps"] = row["total_to_first_step_s"] / (overhead[method]["median_ms"] / 1e3)
  return ({"batch": 128, "model": "resnet32 (cosine head, CIFAR shapes)", "rows": overhead},
          {"batch": 128, "rows": compile_rows})
