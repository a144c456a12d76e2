"""Section 'cpu_gap' of `experiments.benchmarks.run`: the plain-CE ResNet-32 step (batch 128, SGD +
momentum) with JAX under XLA's default flags, JAX under `experiments.common.xla_cpu.TUNED_FLAGS`
(and any `--gap_variant` flags) and PyTorch eager (optional: `pip install ".[bench]"`), each in its
own long-lived worker process (`python -m experiments.benchmarks.cpu_gap --gap_worker=KIND`),
interleaved round by round; plus an XLA op profile of the JAX variants (where the time goes)."""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags
from jax._src.lib import _profile_data

from experiments.benchmarks.timing import REPO, summarize_times, time_calls, warm_up
from experiments.common import cli
from experiments.common import xla_cpu
from experiments import models

def _profile_categories(step, args, repeats: int = 3) -> dict[str, float]:
  """Busy time per XLA op category (fusion kind, numbering stripped), ms per step, both threads."""
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    for _ in range(repeats):
      args = step(*args)
      jax.block_until_ready(args)
    jax.profiler.stop_trace()
    path = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
    data = _profile_data.ProfileData.from_file(path)
  busy = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      if "Eigen" not in line.name:
        continue
      for event in line.events:
        if not event.name.startswith(("ThunkExecutor", "end:")):
          busy[re.sub(r"\.\d+$", "", event.name)] += event.duration_ns
  return {k: v / repeats / 1e6 for k, v in busy.most_common(8)}


def gap_worker(kind: str) -> None:
  """Worker: builds one ResNet-32 CE step, then times `run N` requests read from stdin."""
  batch = 128
  rng = np.random.default_rng(0)
  images = rng.normal(size=(batch, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 10, batch).astype(np.int32)
  info: dict[str, Any] = {"kind": kind}
  if kind == "torch":
    # optional: the PyTorch reference only (pip install ".[bench]")
    import torch  # pylint: disable=g-import-not-at-top
    # optional: torch_resnet is the PyTorch network (it imports torch), for a torch worker only
    from experiments.benchmarks import torch_resnet
    torch.manual_seed(0)
    net = torch_resnet.ResNet32(10)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
    y = torch.from_numpy(labels.astype(np.int64))

    def one_step():
      optimizer.zero_grad(set_to_none=True)
      logits, _ = net(x)
      torch.nn.functional.cross_entropy(logits, y).backward()
      optimizer.step()
    info.update(torch=torch.__version__, threads=torch.get_num_threads(),
                mkldnn=torch.backends.mkldnn.is_available(), params=torch_resnet.num_params(net))
    profile = None
  else:
    model = models.ResNet32(10)
    variables = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    tx = optax.sgd(0.1, momentum=0.9)
    x, y = jnp.asarray(images), jnp.asarray(labels)

    @jax.jit
    def step(params, batch_stats, opt_state):
      def loss_fn(p):
        (logits, _), new = model.apply({"params": p, "batch_stats": batch_stats}, x, train=True,
                                       mutable=["batch_stats"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), new
      (_, new), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), new["batch_stats"], opt_state

    carry = [(variables["params"], variables["batch_stats"], tx.init(variables["params"]))]

    def one_step():
      carry[0] = step(*carry[0])
      jax.block_until_ready(carry[0])
    info.update(jax=jax.__version__, xla_flags=os.environ.get("XLA_FLAGS", ""))
    profile = lambda: _profile_categories(step, carry[0])
  warm_up([one_step], calls=2)
  print(json.dumps({"ready": info}), flush=True)
  for line in sys.stdin:
    command = line.split()
    if not command or command[0] == "quit":
      break
    if command[0] == "profile":
      print(json.dumps({"profile": profile() if profile else None}), flush=True)
      continue
    times = time_calls(one_step, int(command[1]), warmup=0)
    print(json.dumps({"times": times}), flush=True)


def bench_cpu_gap(quick: bool, extra_variants: dict[str, str] | None = None) -> dict:
  base_env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  base_env["PYTHONPATH"] = str(REPO)
  variants = {"jax_default_flags": {**base_env, "XLA_FLAGS": ""},
              "jax_tuned_flags": {**base_env, "XLA_FLAGS": " ".join(xla_cpu.TUNED_FLAGS)}}
  for name, xla_flags in (extra_variants or {}).items():
    variants[f"jax_{name}"] = {**base_env, "XLA_FLAGS": xla_flags}
  try:
    # optional: the PyTorch reference only (pip install ".[bench]")
    import torch  # pylint: disable=g-import-not-at-top,unused-import
    variants["pytorch_eager"] = base_env
  except ImportError:
    print("  cpu_gap: torch not installed (pip install '.[bench]'); JAX variants only", flush=True)
  workers, infos = {}, {}
  for name, env in variants.items():
    kind = "torch" if name == "pytorch_eager" else "jax"
    workers[name] = subprocess.Popen(
        [sys.executable, "-m", "experiments.benchmarks.cpu_gap", f"--gap_worker={kind}"], cwd=REPO,
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    infos[name] = json.loads(workers[name].stdout.readline())["ready"]  # one at a time: 2 cores

  def ask(name, command):
    workers[name].stdin.write(command + "\n")
    workers[name].stdin.flush()
    return json.loads(workers[name].stdout.readline())

  rounds, per_round = (2, 2) if quick else (6, 4)
  times = {name: [] for name in workers}
  for _ in range(rounds):
    for name in workers:
      times[name] += ask(name, f"run {per_round}")["times"]
  profiles = {name: ask(name, "profile")["profile"] for name in workers if name.startswith("jax")}
  for name in workers:
    ask_quit = workers[name]
    ask_quit.stdin.write("quit\n")
    ask_quit.stdin.flush()
    ask_quit.wait(timeout=60)
  rows = {name: summarize_times(t) for name, t in times.items()}
  if "pytorch_eager" in rows:
    torch_ms = rows["pytorch_eager"]["median_ms"]
    for row in rows.values():
      row["speed_vs_pytorch"] = torch_ms / row["median_ms"]
  return {"batch": 128, "rows": rows, "workers": infos, "profiles_ms_per_step": profiles}


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_enum("gap_worker", None, ("jax", "torch"), "The step this worker times (started by "
                    "`bench_cpu_gap`, which sends it `run N`, `profile` and `quit` on stdin).",
                    required=True, flag_values=flag_values)


def main(argv=None) -> int:
  """A worker process of the cpu_gap benchmark."""
  return cli.run_command(define_flags, lambda args: gap_worker(args.gap_worker), argv)


if __name__ == "__main__":
  sys.exit(main())
