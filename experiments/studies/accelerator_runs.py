"""Issue 39's 200-epoch studies on one accelerator, several `experiments.compare` processes at once,
within a deadline, packed to come back from the device tool's $OUT.

    python3 -m experiments.studies.accelerator_runs --data_dir=.data/cifar10_slim \
        --workdir=/tmp/work --out="$OUT" --deadline_s=480 --jobs=6

A *chain* is one `experiments.compare` process: a study's config, its methods (a deferred method after
the run it starts from: the reweighting after CE, from CE's epoch-160 checkpoint) and one seed. A
ResNet-32 step at batch 128 is too small to fill an H200, so `--jobs` chains share the GPU (each
allocates as it goes: XLA_PYTHON_CLIENT_PREALLOCATE=false), queued in `CHAINS` order: issue 39's
first (`cifar10_lt_200`, `cifar10_balanced_200`, the method specs of `standard_size.sh --specs`),
then the reference script's parts 1 and 2 (`experiments/reference.sh`). At `--deadline_s` the
chains still running are stopped (SIGTERM to their process groups); every run folder is then packed
into at most `MAX_FILES` tar files of at most `MAX_FILE_BYTES` each under `--out`, without its
checkpoints, except a run that has not finished (its checkpoints: `standard_size.sh` resumes it on
the CPU from `experiments/studies/results/<study>/unfinished/`) or one a later method of its chain
still has to start from. Each chain's output is in `logs/<chain>.log` inside the first tar.

`--slim_data_to=DIR` (run here, before the call): the CIFAR-10 JPEG files with every training image
that no chain trains on replaced by a 164-byte grey JPEG, so that the checkout and the data fit the
device tool's 64 MiB. The indices and labels are unchanged, so every chain selects the same images
(`experiments.data.long_tail.long_tail_indices` reads labels only). Make it with the same `--seeds` and
`--only` as the call: the balanced selection differs per seed. For seed 0 the copy is 32 MiB; for
seeds 0-2 of every chain 40 MiB (30,775 of the 50,000 training images), which with the checkout
(about 22 MiB in December 2026) is near the limit: check `du` before the call.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import time

from absl import app
from absl import flags

REPO = pathlib.Path(__file__).resolve().parents[2]
MAX_FILES = 7  # the device tool returns 8 files; the driver's own log is the 8th
MAX_FILE_BYTES = 15 * 2**20  # under its 16 MiB per file


def _specs(study: str) -> list[str]:
  """STUDY's method specs from standard_size.sh (one list of the 200-epoch methods)."""
  out = subprocess.run(["bash", str(REPO / "experiments/studies/standard_size.sh"), "--specs", study],
                       check=True, capture_output=True, text=True).stdout.split()
  if not out:
    raise ValueError(f"standard_size.sh --specs {study} printed no method")
  return out


@dataclasses.dataclass(frozen=True)
class Chain:
  """One `experiments.compare` process: `methods` of `study` (configs/<config>.py) for `seed`."""
  name: str
  study: str
  config: str
  methods: tuple[str, ...]
  seed: int = 0
  flags: tuple[str, ...] = ()


def chains(seeds: tuple[int, ...] = (0,)) -> list[Chain]:
  """Issue 39's chains for each seed (named `<chain>_seed<s>` for s > 0), then the reference script's
  parts 1 and 2 (its commands, split by method; seed 0)."""
  lt200 = _specs("cifar10_lt_200")  # ce, inverse_reweight (from CE at 160), logit_adjust, ldam_drw
  balanced200 = _specs("cifar10_balanced_200")
  assert lt200[:2] == ["ce", "inverse_reweight"], lt200
  out = []
  for seed in seeds:
    tag = f"_seed{seed}" if seed else ""
    out += [Chain(f"lt200_ce{tag}", "cifar10_lt_200", "cifar10_lt_200", tuple(lt200[:2]), seed)]
    out += [Chain(f"lt200_{spec.split('=')[0]}{tag}", "cifar10_lt_200", "cifar10_lt_200", (spec,),
                  seed) for spec in lt200[2:]]
    out += [Chain(f"balanced200_{spec.split('=')[0]}{tag}", "cifar10_balanced_200",
                  "cifar10_balanced_200", (spec,), seed) for spec in balanced200]
  ref_lt = ("--config.num_epochs=200",)
  out += [Chain("ref_lt_ce", "reference_cifar10_lt", "cifar10_lt_cosine",
                ("ce", "inverse_reweight", "mr2+inverse_reweight"), flags=ref_lt),
          Chain("ref_lt_ldam_drw", "reference_cifar10_lt", "cifar10_lt_cosine", ("ldam_drw",),
                flags=ref_lt)]
  out += [Chain(f"ref_balanced_{spec.split('=')[0]}", "reference_cifar10_balanced",
                "cifar10_balanced", (spec,), flags=("--config.num_epochs=100",))
          for spec in ("ce", "mr2", "mr2_released=mr2:mr2.form=released",
                       "gamma_only=mr2:mr2.lam=0.0")]
  return out


def command(chain: Chain, data_dir: str, workdir: pathlib.Path, data_workers: int,
            extra: tuple[str, ...] = ()) -> list[str]:
  return [sys.executable, "-m", "experiments.compare",
          f"--config=experiments/configs/{chain.config}.py", f"--config.data_dir={data_dir}",
          f"--workdir={workdir / chain.study}", f"--report_dir={workdir / chain.study / 'report_' / chain.name}",
          f"--methods={','.join(chain.methods)}", f"--seeds={chain.seed}",
          f"--config.data_workers={data_workers}", "--config.progress_bar=False", *chain.flags, *extra]


def run_folder(workdir: pathlib.Path, chain: Chain, spec: str) -> pathlib.Path:
  """`<workdir>/<study>/<method>/seed<s>` (compare's layout: the name before `=`, `+` as `_`)."""
  return workdir / chain.study / spec.split("=")[0].replace("+", "_") / f"seed{chain.seed}"


def run_chains(todo: list[Chain], data_dir: str, workdir: pathlib.Path, jobs: int,
               deadline_s: float, data_workers: int, log, extra: tuple[str, ...] = ()
               ) -> dict[str, str]:
  """Runs the chains, `jobs` at a time, until done or the deadline; {chain: outcome}."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
  (workdir / "logs").mkdir(parents=True, exist_ok=True)
  start = time.monotonic()
  queue, running, outcome = list(todo), {}, {}
  while queue or running:
    for name, (proc, began) in list(running.items()):
      if proc.poll() is not None:
        outcome[name] = f"exit {proc.returncode} after {time.monotonic() - began:.0f} s"
        log(f"{name}: {outcome[name]}")
        del running[name]
    late = time.monotonic() - start > deadline_s
    if late:
      for name, (proc, began) in running.items():
        os.killpg(proc.pid, signal.SIGTERM)
        outcome[name] = f"stopped at the deadline after {time.monotonic() - began:.0f} s"
        log(f"{name}: {outcome[name]}")
      for proc, _ in running.values():
        try:
          proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
          os.killpg(proc.pid, signal.SIGKILL)
      outcome.update({c.name: "not started (deadline)" for c in queue})
      break
    while queue and len(running) < jobs:
      chain = queue.pop(0)
      logfile = open(workdir / "logs" / f"{chain.name}.log", "w")
      proc = subprocess.Popen(command(chain, data_dir, workdir, data_workers, extra), cwd=REPO, env=env,
                              stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
      running[chain.name] = (proc, time.monotonic())
      log(f"{chain.name}: started ({' '.join(chain.methods)})")
    time.sleep(2)
  return outcome


def _checkpoint_steps(run: pathlib.Path) -> list[pathlib.Path]:
  folder = run / "checkpoints"
  return sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)) \
      if folder.is_dir() else []


def members(workdir: pathlib.Path, todo: list[Chain]) -> list[tuple[pathlib.Path, int]]:
  """(file, bytes) to pack: each run's files; checkpoints only where a run will go on from them."""
  out = []
  for chain in todo:
    runs = [run_folder(workdir, chain, spec) for spec in chain.methods]
    for i, run in enumerate(runs):
      if not run.is_dir():
        continue
      finished = (run / "summary.json").exists()
      needed = not finished or any(not (r / "summary.json").exists() for r in runs[i + 1:])
      for path in sorted(run.rglob("*")):
        if not path.is_file():
          continue
        if "checkpoints" in path.relative_to(run).parts and not needed:
          continue
        out.append((path, path.stat().st_size))
  for folder in ("logs",):
    out += [(p, p.stat().st_size) for p in sorted((workdir / folder).rglob("*")) if p.is_file()]
  for report in sorted(workdir.glob("*/report_")):
    out += [(p, p.stat().st_size) for p in sorted(report.rglob("*")) if p.is_file()]
  return out


def pack(workdir: pathlib.Path, out: pathlib.Path, files: list[tuple[pathlib.Path, int]], log):
  """Bins the files (logs first) into <= MAX_FILES tars of <= MAX_FILE_BYTES; reports what is left."""
  logs = [f for f in files if f[0].is_relative_to(workdir / "logs")]
  rest = [f for f in files if f not in logs]
  # A run's files stay together where they fit: grouped by run folder, largest groups first.
  groups: dict[pathlib.Path, list] = {}
  for path, size in rest:
    key = path.relative_to(workdir).parts[:3]
    groups.setdefault(pathlib.Path(*key), []).append((path, size))
  order = [logs] + sorted(groups.values(), key=lambda g: -sum(s for _, s in g))
  bins: list[list] = [[] for _ in range(MAX_FILES)]
  sizes = [0] * MAX_FILES
  left = []
  for group in order:
    for path, size in group:  # a group larger than a bin is split file by file
      target = next((b for b in range(MAX_FILES) if sizes[b] + size <= MAX_FILE_BYTES), None)
      if target is None:
        left.append(path)
        continue
      bins[target].append(path)
      sizes[target] += size
  out.mkdir(parents=True, exist_ok=True)
  for b, paths in enumerate(bins):
    if paths:
      with tarfile.open(out / f"runs{b}.tar", "w") as tar:
        for path in paths:
          tar.add(path, arcname=str(path.relative_to(workdir)))
  log(f"packed {sum(len(b) for b in bins)} files, {sum(sizes) / 2**20:.1f} MiB in "
      f"{sum(1 for b in bins if b)} tar files; left out {len(left)}: {[str(p) for p in left[:20]]}")


def slim_data(source: pathlib.Path, target: pathlib.Path, todo: list[Chain]):
  """Copies source's train.npz / test.npz to target, replacing each training image no chain selects."""
  import numpy as np
  from ml_collections import config_flags  # noqa: F401  (the configs import ml_collections)
  from PIL import Image
  import importlib
  from experiments.data.long_tail import long_tail_indices

  with np.load(source / "train.npz") as npz:
    jpeg, offsets, labels = npz["jpeg"], npz["offsets"], npz["labels"]
  used = np.zeros(len(labels), bool)
  for chain in todo:
    config = importlib.import_module(f"experiments.configs.{chain.config}").get_config()
    used[long_tail_indices(labels, int(labels.max()) + 1, config.imbalance_factor, chain.seed,
                           max_count=config.max_train_per_class or None,
                           selection=config.lt_selection)] = True
  buffer = io.BytesIO()
  Image.new("L", (32, 32), 128).save(buffer, format="JPEG", quality=1, optimize=True)
  grey = buffer.getvalue()
  pieces = [jpeg[offsets[i]:offsets[i + 1]].tobytes() if used[i] else grey
            for i in range(len(labels))]
  new_offsets = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)
  target.mkdir(parents=True, exist_ok=True)
  np.savez(target / "train.npz", jpeg=np.frombuffer(b"".join(pieces), np.uint8),
           offsets=new_offsets, labels=labels)
  (target / "test.npz").write_bytes((source / "test.npz").read_bytes())
  print(f"{target}: {used.sum()} of {len(labels)} training images kept; "
        f"{(target / 'train.npz').stat().st_size / 2**20:.1f} MiB train.npz")


_DATA = flags.DEFINE_string("data_dir", ".data/cifar10_slim", "CIFAR-10 JPEG folder.")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/accelerator_runs", "Where the runs go.")
_OUT = flags.DEFINE_string("out", None, "Where the tar files go (the device tool's $OUT).")
_JOBS = flags.DEFINE_integer("jobs", 6, "Chains at once on the one accelerator.")
_DEADLINE = flags.DEFINE_float("deadline_s", 480, "Seconds after which running chains are stopped.")
_DATA_WORKERS = flags.DEFINE_integer("data_workers", 2, "Host threads per chain (config.data_workers).")
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Seeds of issue 39's chains (the reference chains: seed 0).")
_ONLY = flags.DEFINE_list("only", [], "Chain names to run (default: every chain, in order).")
_EXTRA = flags.DEFINE_multi_string("extra", [], "Flags appended to every chain's command (a smoke test's "
                                    "tiny sizes).")
_SLIM = flags.DEFINE_string("slim_data_to", None,
                            "Write the slimmed CIFAR-10 copy here from --data_dir and exit.")


def main(argv):
  del argv
  todo = chains(tuple(int(s) for s in _SEEDS.value))
  if _ONLY.value:
    unknown = set(_ONLY.value) - {c.name for c in todo}
    if unknown:
      raise app.UsageError(f"unknown chains {sorted(unknown)}; known: {[c.name for c in todo]}")
    todo = [c for c in todo if c.name in _ONLY.value]
  if _SLIM.value:
    slim_data(pathlib.Path(_DATA.value), pathlib.Path(_SLIM.value), todo)
    return
  workdir = pathlib.Path(_WORKDIR.value).resolve()
  out = pathlib.Path(_OUT.value or workdir / "out")
  workdir.mkdir(parents=True, exist_ok=True)
  out.mkdir(parents=True, exist_ok=True)
  driver_log = open(out / "driver.log", "a")
  start = time.monotonic()

  def log(message):
    line = f"[{time.monotonic() - start:6.0f} s] {message}"
    print(line, flush=True)
    driver_log.write(line + "\n")
    driver_log.flush()

  log(f"chains: {[c.name for c in todo]}; jobs {_JOBS.value}; deadline {_DEADLINE.value} s")
  outcome = run_chains(todo, _DATA.value, workdir, _JOBS.value, _DEADLINE.value,
                       _DATA_WORKERS.value, log, tuple(_EXTRA.value))
  (workdir / "logs" / "outcome.json").write_text(json.dumps(outcome, indent=1))
  pack(workdir, out, members(workdir, todo), log)
  log("done")


if __name__ == "__main__":
  app.run(main)
