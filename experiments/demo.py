"""The main job: each method where its paper makes its claim, on embedded data, in about two minutes on 2 CPU cores.

    python -m experiments.demo [--workdir=workdirs/demo] [--seeds=0,1,2]

1. Balanced digits (MR2's setting: no imbalance, yet some classes are harder): ERM vs MR2. Easy /
   Medium / Hard are fixed from ERM; MR2's claim is Hard up without Easy down.
2. Long-tailed digits, imbalance factor 10 (the reweighting's setting): CE vs the inverse
   reweighting, deferred to epoch 20 of 30 as in the reference recipe; its runs start from CE's
   checkpoint at epoch 20 (`config.init_from`, bit-for-bit the epochs it would train itself). The
   claim: per-class training losses equalised (ρ down), the rarest classes (Few) up.

Each setting is an `experiments.studies.method_comparison.compare` run (same reports: `<workdir>/<setting>/report`).
"""

from __future__ import annotations

import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

from experiments.common import cli
from experiments.report import claims
from experiments.report import run_tables
from experiments.studies import method_comparison
from experiments.common import xla_cpu
from experiments.configs import digits
from experiments.configs import digits_lt

_WORKDIR = flags.DEFINE_string("workdir", "workdirs/demo", "Output folder.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds per method.")

# (name, title, config, methods, the claim, the paired-Δ metrics that read it).
SETTINGS = (
    ("balanced", "Balanced digits — MR2's setting", digits.get_config, ("ce", "mr2"),
     "MR2's claim: the classes ERM finds hardest gain (Hard), and Easy is not traded for it.",
     ("hard", "easy")),
    ("long_tailed", "Long-tailed digits (IF 10) — the reweighting's setting", digits_lt.get_config,
     ("ce", "inverse_reweight"),
     "The reweighting's claim: per-class training losses equalised (ρ falls) and the rarest "
     "classes gain (Few-shot). Its runs are deferred: each starts from CE's checkpoint at epoch 20 "
     "of 30 (the same run as CE until then) and trains its last 10 epochs reweighted.",
     ("few_shot", "overall", "rho")),
)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  xla_cpu.configure(True)
  seeds = [int(s) for s in _SEEDS.value]
  workdir = pathlib.Path(_WORKDIR.value)
  tables = []
  counter = method_comparison.RunCounter(sum(len(s[3]) for s in SETTINGS) * len(seeds))
  print(f"{counter.total} runs (the first compiles the step: it takes longest)", flush=True)
  with cli.one_line_errors():
    for name, title, get_config, methods, claim, metrics in SETTINGS:
      print(f"== {title}: {', '.join(methods)}, seeds {seeds}", flush=True)
      markdown = method_comparison.compare(get_config(), list(methods), seeds, workdir / name,
                                           workdir / name / "report", counter=counter)
      # The summary table and the paired Δ table (the per-class table stays in the report).
      head = markdown.split("\nPer-class test accuracy")[0].strip()
      reference_run = method_comparison.run_dir(workdir / name, methods[0], seeds[0])
      counts = run_tables.load_summaries([reference_run])[0]["train_class_counts"]
      supports = claims.what_the_table_supports(workdir / name / "report", metrics, counts)
      tables.append(f"## {title} (seeds {seeds})\n\n{head}\n\n{claim}\n{supports}\n\n"
                    f"Report: {workdir / name / 'report'}")
  print("\n\n" + "\n\n".join(tables))


if __name__ == "__main__":
  cli.run_app(main, sys.argv)
