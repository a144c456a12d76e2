"""Start N local processes of `experiments.main` as one multi-host JAX job (CPU collectives).

    python -m experiments.launch --num_processes=2 --devices_per_process=4 -- \
        --config=experiments/configs/digits_lt.py --config.parallel=shard_map --workdir=workdirs/mh

Each process gets `--xla_force_host_platform_device_count=devices_per_process` fake CPU devices,
joins the job through `jax.distributed.initialize` on 127.0.0.1, and feeds its own shard of every
global batch (`experiments.data.batches.train_batches` with its process index). This tests multi-host
behaviour on one machine; on a real pod, run `experiments.main` once per host with the same
`--coordinator_address`, `--num_processes` and that host's `--process_id` (or let
`jax.distributed.initialize()` discover them on Cloud TPU / SLURM).
If any process fails, the others are stopped and the launcher exits with its status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from absl import flags

from experiments.common import cli


def free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def launch(num_processes: int, devices_per_process: int, main_args: list[str],
           timeout: float | None = None) -> int:
  """Runs the processes to completion; returns 0 or the first non-zero exit status."""
  address = f"127.0.0.1:{free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}")
  processes = [
      subprocess.Popen([sys.executable, "-m", "experiments.main", *main_args,
                        f"--coordinator_address={address}", f"--num_processes={num_processes}",
                        f"--process_id={i}"], env=env)
      for i in range(num_processes)]
  deadline = None if timeout is None else time.time() + timeout
  status = 0
  while any(p.poll() is None for p in processes):
    failed = [p.returncode for p in processes if p.returncode not in (None, 0)]
    if failed or (deadline is not None and time.time() > deadline):
      status = failed[0] if failed else 124
      for p in processes:
        if p.poll() is None:
          p.kill()
      break
    time.sleep(0.2)
  for p in processes:
    p.wait()
  return status or next((p.returncode for p in processes if p.returncode), 0)


def define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_integer("num_processes", 2, "Processes of the job.", flag_values=flag_values)
  flags.DEFINE_integer("devices_per_process", 4, "Fake CPU devices per process.",
                       flag_values=flag_values)
  flags.DEFINE_float("timeout", None, "Seconds before every process is stopped (exit status 124).",
                     flag_values=flag_values)


def launch_command(args: flags.FlagValues, main_args: list[str]) -> int:
  """Runs `experiments.main` with `main_args` (the arguments after `--`) in every process."""
  return launch(args.num_processes, args.devices_per_process, main_args, args.timeout)


def main(argv=None) -> int:
  """`python -m experiments.launch [flags] -- <arguments of experiments.main>`."""
  return cli.run_command(define_flags, launch_command, argv, passthrough=True)


if __name__ == "__main__":
  sys.exit(main())
