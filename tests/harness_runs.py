"""Short digits runs through the whole trainer, reduced to what must not change when the harness is
reorganised (issue 37): a plain CE run, a paired GLMC run with the inverse reweighting, a JTT run
(its error set from the CE run) and a mixup run (recorded before the move into packages, 7eba1b5);
and, recorded at 78ada7d before the methods' trainer hooks became recipes (issue 37.4), every other
hook: SupCon (two views, projection head), LfF (biased twin, dataset positions, per-example state),
FairDRO (epoch-end pass), ETF-DR + reweighting with mixup (ETF head wrapper, deferred start, mixed
batches) and MR2 on the released recipe's three views (the loss on view 0 only). Each run's record is the SHA-256 of its whole train
state at the end, the losses of metrics.jsonl and the test summary. `python -m tests.harness_runs` writes the records to tests/fixtures/harness_move/; the test
that reads them is tests/test_harness_runs.py."""

import json
import pathlib
import sys
import tempfile

from experiments.train import loop as train
from experiments.configs import digits_lt

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "harness_move"
NAMES = ("ce", "glmc_inverse_reweight", "jtt", "mixup", "supcon", "lff", "fairdro", "etf_dr_mixup",
         "mr2_views3")


def config_of(name: str, workdirs: pathlib.Path):
  config = digits_lt.get_config()
  config.num_epochs = 2
  config.batch_size = 32
  config.log_every_steps = 5
  config.checkpoint_every_steps = 1000
  config.progress_bar = False
  config.reweight.start_epoch = 1
  if name == "glmc_inverse_reweight":
    config.loss = "glmc+inverse_reweight"
    config.glmc.projection_dim = 16
  elif name == "jtt":
    config.loss = "jtt"
    config.jtt.stage1 = str(workdirs / "ce")
  elif name == "mixup":
    config.mixup_alpha = 1.0
  elif name in ("supcon", "lff", "fairdro"):
    config.loss = name
  elif name == "etf_dr_mixup":
    config.loss = "etf_dr+inverse_reweight"
    config.head = "etf"
    config.mixup_alpha = 1.0
  elif name == "mr2_views3":
    config.loss = "mr2"
    config.views = 3
    config.augmentation = "released"
  return config


def final_digest(workdir: pathlib.Path) -> str:
  """The SHA-256 the trainer stores with its last checkpoint (`checkpoints.digest` of the whole train
  state: parameters, batch statistics, optimizer and loss state, step)."""
  last = max((int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()))
  integrity = workdir / "checkpoints" / str(last) / "integrity"
  return json.loads(next(f for f in integrity.iterdir() if f.is_file()).read_text())["sha256"]


def record(name: str, workdirs: pathlib.Path) -> dict:
  """Trains run `name` in workdirs/name and returns its record."""
  workdir = workdirs / name
  summary = train.train_and_evaluate(config_of(name, workdirs), workdir)
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  return {"state_sha256": final_digest(workdir), "losses": [r["loss"] for r in rows if "loss" in r],
          "overall_accuracy": summary["overall_accuracy"],
          "per_class_accuracy": summary["per_class_accuracy"],
          "train_class_loss": summary["train_class_loss"]}


def record_all(workdirs: pathlib.Path) -> dict[str, dict]:
  return {name: record(name, workdirs) for name in NAMES}


if __name__ == "__main__":
  # `python -m tests.harness_runs [NAME ...]`: (re)writes the records of NAMES (default: all).
  FIXTURES.mkdir(parents=True, exist_ok=True)
  names = sys.argv[1:] or NAMES
  with tempfile.TemporaryDirectory() as tmp:
    workdirs = pathlib.Path(tmp)
    if "jtt" in names and "ce" not in names:
      record("ce", workdirs)  # JTT's error set
    for name, rec in ((n, record(n, workdirs)) for n in names):
      (FIXTURES / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
      print(name, rec["state_sha256"][:16], rec["overall_accuracy"])
  sys.exit(0)
