"""Train and evaluate one configuration.

    python -m experiments.main --config=experiments/configs/cifar10_lt.py \
        --config.data_dir=../shared/data/cifar10_jpeg --config.loss=mr2 --workdir=workdirs/c10lt_mr2

A bad configuration or data set ends with one line naming the problem and exit status 2, before any
file of the workdir is touched.
"""

from __future__ import annotations

import json
import sys

import jax
from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.configs import schema
from experiments.train import loop
from experiments.common import xla_cpu

_CONFIG = schema.define_config_flag("config", "experiments/configs/default.py",
                                    "Training configuration (a Python file).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder; resumes from its checkpoints.")
_MAX_STEPS = flags.DEFINE_integer("max_steps", None, "Stop after this many steps (tests).")
_RESUME_FROM_PREVIOUS = flags.DEFINE_bool(
    "resume_from_previous", False,
    "If the latest checkpoint cannot be read or fails its digest, set it aside (corrupt-<step>) "
    "and resume from the newest checkpoint that reads.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "Multi-process: host:port of process 0 (see experiments.launch).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 1, "Multi-process: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", 0, "Multi-process: this process's index.")
_XLA_CPU_TUNING = flags.DEFINE_bool(
    "xla_cpu_tuning", True, "Add experiments.common.xla_cpu.TUNED_FLAGS to XLA_FLAGS (CPU backend only).")


def initialize_distributed():
  """Joins a multi-process job; on CPU the collectives across processes go through gloo."""
  # Only the CPU backend reads this option; accelerators use their own collectives.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                             process_id=_PROCESS_ID.value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  xla_cpu.configure(_XLA_CPU_TUNING.value)
  if not _WORKDIR.value:
    cli.fail("--workdir is required")
  if _NUM_PROCESSES.value > 1:
    initialize_distributed()
  with cli.one_line_errors():
    summary = loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value, max_steps=_MAX_STEPS.value,
                                       resume_from_previous=_RESUME_FROM_PREVIOUS.value)
  print(json.dumps({k: summary[k] for k in ("loss", "overall_accuracy", "worst_class_accuracy",
                                            "steps")}))


if __name__ == "__main__":
  cli.run_app(main, sys.argv)
