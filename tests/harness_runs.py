"""Short digits runs through the whole trainer, reduced to what a refactor of the harness must not
change. `NAMES`, one per trainer hook: a plain CE run, a paired GLMC run with the inverse
reweighting, a JTT run (its error set from the CE run), a mixup run, SupCon (two views, projection
head), LfF (biased twin, dataset positions, per-example state), FairDRO (epoch-end pass), ETF-DR +
reweighting with mixup (ETF head wrapper, deferred start, mixed batches) and MR2 on the released
recipe's three views; `ENTRY_RUNS`, one for each other entry of the loss registry (deferred ones
start at epoch 1, so both phases train); `NEW_RUNS`, the inverse reweighting around the methods
with a per-example loss that no earlier registry listed (recorded at the working tree only). A
run's record is the SHA-256 of its whole train state at the end, the losses of metrics.jsonl and
the test summary.

Two uses, because XLA:CPU's float summation order depends on the CPU it compiles for (a last-bit
difference grows over training steps; see docs/guides/harness.md, "Checking a refactor"):

* **Before/after a refactor, bit for bit, on one machine** (not a test: a command whose output a
  refactor's closing note quotes)::

      python -m tests.harness_runs --against <base commit> --recorder head [NAME ...]

  clones this repository at the base commit into a temporary folder, records the runs there (its
  own code, imported from the clone, with this environment's packages), records them at the
  working tree, and prints, per run, whether the state's SHA-256, every logged loss and the test
  summary are identical; the exit status is 1 if any differs. `--recorder head` (the recorder of
  the working tree in both; needed for the runs past the nine of `NAMES`) records every run; a run
  of `NEW_RUNS` is recorded at the working tree only and printed as new.
* **The default test run** (`tests/harness/test_harness_runs.py`) trains short versions of the runs (2
  epochs of 5 steps, JTT's of 12: `config_of(short=True)`) and compares them with the records committed in
  tests/fixtures/harness_runs/ within the tolerances stated there, which hold on any x86-64 CPU
  (measured under XLA's AVX-512, AVX2 and SSE4.2 code generation).

`python -m tests.harness_runs [--short] --out DIR [NAME ...]` writes the records (one JSON per run)
to DIR; the committed fixtures are made with `--short --out tests/fixtures/harness_runs`;
`--spread DIR DIR ...` prints the largest differences between record folders.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import ml_collections
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "harness_runs"
NAMES = ("ce", "glmc_inverse_reweight", "jtt", "mixup", "supcon", "lff", "fairdro", "etf_dr_mixup",
         "mr2_views3")
# Run name → registry entry, for the entries the runs above do not train themselves.
ENTRY_RUNS = {"inverse_reweight": "inverse_reweight", "mr2": "mr2",
              "mr2_inverse_reweight": "mr2+inverse_reweight", "inv_freq": "inv_freq",
              "class_balanced": "class_balanced", "focal": "focal", "ldam": "ldam",
              "ldam_drw": "ldam_drw", "logit_adjust": "logit_adjust",
              "balanced_softmax": "balanced_softmax", "ib": "ib", "group_dro": "group_dro",
              "eql": "eql", "glmc": "glmc", "etf_dr": "etf_dr"}
# The inverse reweighting around the methods with a per-example loss that the registry of the
# earlier commits did not list: recorded at the working tree only.
NEW_RUNS = {"focal_inverse_reweight": "focal+inverse_reweight",
            "ldam_inverse_reweight": "ldam+inverse_reweight",
            "logit_adjust_inverse_reweight": "logit_adjust+inverse_reweight",
            "balanced_softmax_inverse_reweight": "balanced_softmax+inverse_reweight",
            "eql_inverse_reweight": "eql+inverse_reweight",
            "jtt_inverse_reweight": "jtt+inverse_reweight"}
ALL = (*NAMES, *ENTRY_RUNS, *NEW_RUNS)
# The packages a record imports, which must come from the checkout being recorded.
PACKAGES = ("experiments", "mr2_jax", "reweight_jax", "mr2_reweight_core")


def _set(config, field: str, value) -> None:
  """config.<field> = value; a method's field ('jtt.stage1') made with its sub-tree where the
  config holds none (a config holds the sub-trees of the methods its runs train,
  experiments/configs/schema.py; the trainer adds the rest of the fields). The same assignment at
  a commit whose configs held every method's sub-tree."""
  key, _, field = field.rpartition(".")
  if key and key not in config:
    config[key] = ml_collections.ConfigDict()
  (config[key] if key else config)[field] = value


def config_of(name: str, workdirs: pathlib.Path, short: bool = False):
  """Run `name`'s config: 2 epochs of the long-tailed digits (20 steps each), or with `short` 2
  epochs of 5 steps (at most 40 training images per class; JTT's up-sampled epochs 12), every
  step's loss logged."""
  from experiments.configs import digits_lt
  config = digits_lt.get_config()
  config.num_epochs = 2
  config.batch_size = 32
  config.log_every_steps = 5
  config.checkpoint_every_steps = 1000
  config.progress_bar = False
  _set(config, "reweight.start_epoch", 1)
  if short:
    config.max_train_per_class = 40
    config.log_every_steps = 1
    _set(config, "jtt.upweight", 2)  # the error set 3 times, not 21: 2 epochs of about 12 steps
  if name == "glmc_inverse_reweight":
    config.loss = "glmc+inverse_reweight"
    _set(config, "glmc.projection_dim", 16)
  elif name == "jtt":
    config.loss = "jtt"
    _set(config, "jtt.stage1", str(workdirs / "ce"))
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
  elif name in ENTRY_RUNS or name in NEW_RUNS:
    config.loss = {**ENTRY_RUNS, **NEW_RUNS}[name]
    _set(config, "ldam.drw_epoch", 1)  # both phases of a deferred entry train
    _set(config, "ib.start_epoch", 1)
    if config.loss.startswith("etf_dr"):
      config.head = "etf"
    if config.loss.startswith("glmc"):
      _set(config, "glmc.projection_dim", 16)
    if config.loss.startswith("jtt"):
      _set(config, "jtt.stage1", str(workdirs / "ce"))
  return config


def final_digest(workdir: pathlib.Path) -> str:
  """The SHA-256 the trainer stores with its last checkpoint (`checkpoints.digest` of the whole train
  state: parameters, batch statistics, optimizer and loss state, step)."""
  last = max((int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()))
  integrity = workdir / "checkpoints" / str(last) / "integrity"
  return json.loads(next(f for f in integrity.iterdir() if f.is_file()).read_text())["sha256"]


def leaf_digests(workdir: pathlib.Path) -> dict[str, str]:
  """SHA-256 of each leaf of the final checkpoint's state (path → digest of shape and float64
  values, as `checkpoints.digest`): what tells a state that gained a leaf (a new counter) from one
  whose numbers moved."""
  import jax
  from experiments.train import checkpoints
  from tests import checkpoints as checkpoint_files
  _, state = checkpoint_files.restore_latest(workdir)
  return {jax.tree_util.keystr(path): checkpoints.digest(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]}


def record(name: str, workdirs: pathlib.Path, short: bool = False) -> dict:
  """Trains run `name` (`config_of`) in workdirs/name and returns its record."""
  from experiments.train import loop
  workdir = workdirs / name
  summary = loop.train_and_evaluate(config_of(name, workdirs, short), workdir)
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  return {"state_sha256": final_digest(workdir), "state_leaves": leaf_digests(workdir),
          "losses": [r["loss"] for r in rows if "loss" in r],
          "overall_accuracy": summary["overall_accuracy"],
          "per_class_accuracy": summary["per_class_accuracy"],
          "train_class_loss": summary["train_class_loss"]}


def record_all(workdirs: pathlib.Path, names=NAMES, short: bool = False) -> dict[str, dict]:
  """The records of `names` (JTT's error set comes from the CE run, trained first if not asked)."""
  if any(n.startswith("jtt") for n in names) and "ce" not in names:
    record("ce", workdirs, short)
  return {name: record(name, workdirs, short) for name in names}


def write_records(out: pathlib.Path, names=NAMES, short: bool = False) -> None:
  out.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory() as tmp:
    for name, rec in record_all(pathlib.Path(tmp), names, short).items():
      (out / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
      print(name, rec["state_sha256"][:16], rec["overall_accuracy"], flush=True)


def differences(base: dict, head: dict) -> list[str]:
  """The fields of one run's record that are not bit-identical (floats compared as JSON writes
  them: Python's shortest repr, which round-trips float64 exactly). With per-leaf digests on both
  sides, the state is compared leaf by leaf: a leaf whose numbers differ is named, and leaves that
  only one side has are listed as added or removed (the whole-state SHA-256 then differs by
  construction and is not listed again)."""
  fields = [key for key in sorted(set(base) | set(head)) if key != "state_leaves"
            and base.get(key) != head.get(key)]
  if "state_leaves" not in base or "state_leaves" not in head:
    return fields
  old, new = base["state_leaves"], head["state_leaves"]
  fields = [f for f in fields if f != "state_sha256"]
  fields += [f"state leaf {k}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]
  fields += [f"added leaf {k}" for k in sorted(set(new) - set(old))]
  fields += [f"removed leaf {k}" for k in sorted(set(old) - set(new))]
  return fields


def spread(folders) -> dict[str, float]:
  """The largest difference, over the runs, between any two of the record folders `folders`: the
  relative difference of the logged losses and of the per-class training losses, and the absolute
  difference of the test accuracies (overall and per class). What tests/harness/test_harness_runs.py's
  tolerances are measured from."""
  sets = [{p.stem: json.loads(p.read_text()) for p in sorted(pathlib.Path(f).glob("*.json"))}
          for f in folders]
  names = sorted(set.intersection(*(set(s) for s in sets)))
  if not names or any(set(s) != set(names) for s in sets):
    raise SystemExit(f"harness_runs --spread: the folders hold different runs: "
                     f"{[sorted(s) for s in sets]}")
  out = {"losses_rtol": 0.0, "train_class_loss_rtol": 0.0, "accuracy_abs": 0.0}

  def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    both = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
      return float("inf")
    return float(np.max(np.abs(a[both] - b[both]) / np.abs(b[both]), initial=0.0))

  for i, a in enumerate(sets):
    for b in sets[i + 1:]:
      for name in names:
        ra, rb = a[name], b[name]
        out["losses_rtol"] = max(out["losses_rtol"], rel(ra["losses"], rb["losses"]))
        out["train_class_loss_rtol"] = max(out["train_class_loss_rtol"],
                                           rel(np.array(ra["train_class_loss"], float),
                                               np.array(rb["train_class_loss"], float)))
        acc_a = [ra["overall_accuracy"], *ra["per_class_accuracy"]]
        acc_b = [rb["overall_accuracy"], *rb["per_class_accuracy"]]
        out["accuracy_abs"] = max(out["accuracy_abs"],
                                  float(np.max(np.abs(np.subtract(acc_a, acc_b)))))
  return out


def _imports_from(checkout: pathlib.Path, env: dict) -> None:
  """Raises unless a Python started in `checkout` imports every package of PACKAGES from there
  (and not from an installed or editable copy elsewhere)."""
  code = ("import importlib, json; print(json.dumps({p: importlib.import_module(p).__file__ "
          f"for p in {PACKAGES!r}}}))")
  out = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True,
                       capture_output=True, text=True).stdout
  stray = {p: f for p, f in json.loads(out).items()
           if not pathlib.Path(f).resolve().is_relative_to(checkout.resolve())}
  if stray:
    raise SystemExit(f"harness_runs: in {checkout} these packages import from elsewhere: {stray}")


def _record_in(checkout: pathlib.Path, out: pathlib.Path, names) -> dict[str, dict]:
  """The records of `names` made by `checkout`'s tests/harness_runs.py, in a fresh process."""
  env = {**os.environ, "PYTHONPATH": str(checkout)}
  _imports_from(checkout, env)
  script = (checkout / "tests" / "harness_runs.py").read_text()
  if "--out" in script:
    command = [sys.executable, "-m", "tests.harness_runs", "--out", str(out), *names]
  else:  # a base from before this command: it writes into its own fixture folder
    command = [sys.executable, "-m", "tests.harness_runs", *names]
    out = checkout / "tests" / "fixtures" / "harness_move"
  subprocess.run(command, cwd=checkout, env=env, check=True)
  return {name: json.loads((out / f"{name}.json").read_text()) for name in names}


def against(commit: str, names=NAMES, recorder: str = "own") -> int:
  """Records `names` at `commit` (a clean clone) and at the working tree; prints the comparison.

  `recorder='head'` records the base with the working tree's recorder (this file and
  tests/checkpoints.py copied into the clone; the code under test stays the base's), so that both
  sides have the per-leaf digests of `leaf_digests`."""
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    base_dir = tmp / "base"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(base_dir)],
                   check=True)
    subprocess.run(["git", "-C", str(base_dir), "checkout", "--quiet", commit], check=True)
    sha = subprocess.run(["git", "-C", str(base_dir), "rev-parse", "--short", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()
    if recorder == "head":
      for helper in ("harness_runs.py", "checkpoints.py"):
        (base_dir / "tests" / helper).write_text((REPO / "tests" / helper).read_text())
    print(f"== base {sha}: {base_dir}", flush=True)
    compared = [n for n in names if n not in NEW_RUNS]
    base = _record_in(base_dir, tmp / "base_records", compared)
    print(f"== head: the working tree {REPO}", flush=True)
    head = _record_in(REPO, tmp / "head_records", names)
  failed = 0
  for name in compared:
    diff = differences(base[name], head[name])
    failed += bool(diff)
    print(f"{name:34s} {'identical' if not diff else 'DIFFERS in ' + ', '.join(diff)} "
          f"(state {head[name]['state_sha256'][:12]})")
  for name in names:
    if name in NEW_RUNS:
      finite = all(np.isfinite(head[name]["losses"]))
      print(f"{name:34s} new at the working tree (state {head[name]['state_sha256'][:12]}, "
            f"{len(head[name]['losses'])} losses {'finite' if finite else 'NOT FINITE'}, "
            f"test accuracy {head[name]['overall_accuracy']:.4f})")
  print(f"{len(compared) - failed} of {len(compared)} runs bit-identical to {sha}"
        + (f"; {len(names) - len(compared)} new" if len(names) > len(compared) else ""))
  return 1 if failed else 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m tests.harness_runs", description=__doc__)
  parser.add_argument("--against", metavar="COMMIT",
                      help="compare the working tree with COMMIT, bit for bit")
  parser.add_argument("--recorder", choices=("own", "head"), default="own",
                      help="with --against: record the base with its own tests/harness_runs.py "
                           "(default) or with the working tree's (per-leaf state digests on both "
                           "sides: a state that only gained a leaf shows as such)")
  parser.add_argument("--out", type=pathlib.Path, help="write the records to this folder")
  parser.add_argument("--short", action="store_true",
                      help="the default test's short runs (2 epochs of 5 steps), with --out")
  parser.add_argument("--spread", nargs="+", metavar="DIR",
                      help="print the largest differences between these record folders")
  parser.add_argument("names", nargs="*", metavar="NAME",
                      help=f"runs (default: with --against --recorder head all, {ALL}; else the "
                           f"nine of {NAMES})")
  args = parser.parse_args(argv)
  everything = args.against and args.recorder == "head"
  names = tuple(args.names) or (ALL if everything else NAMES)
  unknown = set(names) - set(ALL)
  if unknown:
    parser.error(f"unknown runs {sorted(unknown)}; expected some of {ALL}")
  if args.against and args.recorder == "own" and set(names) - set(NAMES):
    parser.error("runs past the nine of NAMES need --recorder head (the base's recorder has only "
                 "those)")
  if args.spread:
    print(json.dumps(spread(args.spread), indent=1))
    return 0
  if args.against:
    return against(args.against, names, args.recorder)
  if args.out is not None:
    write_records(args.out, names, args.short)
    return 0
  parser.error("give --against COMMIT or --out DIR")


if __name__ == "__main__":
  sys.exit(main())
