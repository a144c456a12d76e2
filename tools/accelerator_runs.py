"""Issue 39's 200-epoch studies on one accelerator, several `experiments.compare` processes at once,
within a deadline, packed to come back from the device tool's $OUT.

    python3 -m tools.accelerator_runs --data_dir=.data/cifar10_slim \
        --workdir=/tmp/work --out="$OUT" --deadline_s=520 --jobs=6

A *chain* is one `experiments.compare` process: a study's config, its methods (a deferred method after
the run it starts from: the reweighting after CE, from CE's epoch-160 checkpoint) and its seeds
(`chains`). A ResNet-32 step at batch 128 is too small to fill an H200, so `--jobs` chains share the
GPU (each allocates as it goes: XLA_PYTHON_CLIENT_PREALLOCATE=false), started in `chains` order:
issue 39's (`cifar10_lt_200`, `cifar10_balanced_200`, the method specs of `standard_size.sh
--specs`) for each of `--seeds`, then the reference script's parts 1 and 2
(`tools/reference.sh`). No chain starts with less than `START_MARGIN_S` left. At
`--deadline_s` the running chains get SIGTERM (their process groups), and SIGKILL `GRACE_S` later.
Sizing: on an H200 shared by six chains a 200-epoch CIFAR-10-LT run took 490 s and the reweighting's
40 epochs after CE about 30 s more, so CE + reweighting needs a deadline of about 530 s with six
co-tenants (the device tool's call limit is 600 s; leave about 40 s for the start and the packing).

Issue 49.6's call, seeds on a batch axis (`--stack_seeds`: one process per chain trains all
`--seeds` as one vmapped program, `experiments.train.seed_axis`) with the training split in device
memory (`--extra=--config.input_on_device=True`), every chain given a job:

    python3 -m tools.accelerator_runs --data_dir=DATA_SLIM --workdir=WORK --out="$OUT" \
        --seeds=1,2 --stack_seeds --plan --fill_seeds=0,1,2 --jobs=7 --deadline_s=480 \
        --data_workers=2 \
        --only=lt200_ce_seeds1-2,lt200_logit_adjust_seeds1-2,lt200_ldam_drw_seeds1-2,\
balanced200_ce_seeds1-2,balanced200_mr2_released_seeds1-2,balanced200_mr2_seeds1-2 \
        --extra=--config.input_on_device=True

With `--plan`, once every running chain has logged a window after its compilation (the first
tens of seconds), `call_plan` reads their images/s and the images they have left. Taking the
device's aggregate images/s as fixed (saturated), it keeps the chains, in their order, that finish
before the deadline, stops the others (their share goes to the kept), and with `--fill_seeds`
starts MR2 then MR2 + reweighting (`fill_chain`, long-tailed 200-epoch recipe) for as many of
those seeds as fit in the room left (`seeds_that_fit`). The plan is in the driver's log. Make the slim copy with the same `--seeds`, `--stack_seeds`, `--only` and
`--fill_seeds`.

Then every run comes back, packed by `pack` into at most `MAX_FILES` tar files of at most
`MAX_FILE_BYTES` each and `MAX_TOTAL_BYTES` together, in this order of priority: the chains' logs,
each run's files without checkpoints, the reports, then whole checkpoint steps (the latest of each
run first). Checkpoints come back only for a chain's first run when it has not finished (to be
resumed on the CPU: with the same `--config.data_dir` and `--config.data_workers`, the fields
`experiments.train.checkpoints` checks) or when a later method of its chain has not finished (it
starts from this run's checkpoint). A deferred run that has not finished is left out: it restarts
from its source's checkpoint in seconds, and its config records the source's path on the device.

`--slim_data_to=DIR` (run here, before the call): a copy of the CIFAR-10 JPEG folder `--data_dir`
with every training image that no chain selects replaced by a 162-byte grey JPEG (`grey_jpeg`), so
that the checkout and the data fit the device tool's 64 MiB. The indices and labels are unchanged,
so every chain selects the same images (`experiments.data.long_tail.long_tail_indices` reads labels
only). Make it with the same `--seeds` and `--only` as the call: the balanced selection differs per
seed. A run first checks that no image its chains select is the grey one (`check_data`). For seed 0
the copy is 32 MiB; for seeds 0-2 of every chain 40 MiB (30,775 of the 50,000 training images),
which with the checkout (about 22 MiB in December 2026) is near the limit: check `du` before the call.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import time
from typing import Sequence

from absl import flags
import numpy as np
from PIL import Image

from experiments.methods import registry
from experiments.common import cli
from experiments.common.errors import DataError
from experiments.data import loading
from experiments.studies import method_comparison

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_FILES = 7  # the device tool returns 8 files; the driver's own log is the 8th
MAX_FILE_BYTES = 15 * 2**20  # under its 16 MiB per file
MAX_TOTAL_BYTES = 60 * 2**20  # under its 64 MiB together
TAR_END_BYTES = 20 * 1024  # a tar's end-of-archive blocks and record padding (at most)
START_MARGIN_S = 60  # a chain started with less time left would not reach a checkpoint
GRACE_S = 30  # between SIGTERM and SIGKILL at the deadline


def _specs(study: str) -> list[str]:
  """STUDY's method specs from standard_size.sh (one list of the 200-epoch methods)."""
  out = subprocess.run(["bash", str(REPO / "tools/standard_size.sh"), "--specs", study],
                       check=True, capture_output=True, text=True).stdout.split()
  if not out:
    raise ValueError(f"standard_size.sh --specs {study} printed no method")
  return out


@dataclasses.dataclass(frozen=True)
class Chain:
  """One `experiments.compare` process: `methods` of `study` (configs/<config>.py) for `seeds`,
  stacked on a vmapped axis in one program when there are several (`--stack_seeds`)."""
  name: str
  study: str
  config: str
  methods: tuple[str, ...]
  seeds: tuple[int, ...] = (0,)
  flags: tuple[str, ...] = ()


def _tag(seeds: Sequence[int]) -> str:
  """'' for seed 0 alone (the first calls' names), `_seed<s>` for another seed, `_seeds<a>-<b>`."""
  if len(seeds) > 1:
    return f"_seeds{'-'.join(str(s) for s in seeds)}"
  return f"_seed{seeds[0]}" if seeds[0] else ""


def chains(seeds: Sequence[int] = (0,), stack: bool = False) -> list[Chain]:
  """Issue 39's chains for each seed (named `<chain>_seed<s>` for s > 0) or, with `stack`, for
  all `seeds` in one process each (`<chain>_seeds<a>-<b>`); then the reference script's parts 1
  and 2 (its commands, one chain per method but the reweighting after CE; seed 0)."""
  lt200 = _specs("cifar10_lt_200")  # ce, inverse_reweight (from CE at 160), logit_adjust, ldam_drw
  balanced200 = _specs("cifar10_balanced_200")
  assert lt200[:2] == ["ce", "inverse_reweight"], lt200
  out = []
  for group in [tuple(seeds)] if stack else [(seed,) for seed in seeds]:
    tag = _tag(group)
    out += [Chain(f"lt200_ce{tag}", "cifar10_lt_200", "cifar10_lt_200", tuple(lt200[:2]), group)]
    out += [Chain(f"lt200_{spec.split('=')[0]}{tag}", "cifar10_lt_200", "cifar10_lt_200", (spec,),
                  group) for spec in lt200[2:]]
    out += [Chain(f"balanced200_{spec.split('=')[0]}{tag}", "cifar10_balanced_200",
                  "cifar10_balanced_200", (spec,), group) for spec in balanced200]
  ref_lt = ("--config.num_epochs=200",)
  out += [Chain("ref_lt_ce", "reference_cifar10_lt", "cifar10_lt_cosine", ("ce", "inverse_reweight"),
                flags=ref_lt),
          Chain("ref_lt_ldam_drw", "reference_cifar10_lt", "cifar10_lt_cosine", ("ldam_drw",),
                flags=ref_lt),
          # Its deferred part starts from MR2's own run, not CE's: a chain of its own.
          Chain("ref_lt_mr2_inverse_reweight", "reference_cifar10_lt", "cifar10_lt_cosine",
                ("mr2+inverse_reweight",), flags=ref_lt)]
  out += [Chain(f"ref_balanced_{spec.split('=')[0]}", "reference_cifar10_balanced",
                "cifar10_balanced", (spec,), flags=("--config.num_epochs=100",))
          for spec in ("ce", "mr2", "mr2_released=mr2:mr2.form=released",
                       "gamma_only=mr2:mr2.lam=0.0")]
  return out


def fill_chain(seeds: Sequence[int]) -> Chain:
  """Issue 49.6's last chain: MR2 alone, then MR2 + reweighting from MR2's epoch-160 checkpoint,
  on the long-tailed 200-epoch recipe, for the seeds that fit (`seeds_that_fit`)."""
  return Chain(f"lt200_mr2{_tag(tuple(seeds))}", "cifar10_lt_200", "cifar10_lt_200",
               ("mr2", "mr2+inverse_reweight"), tuple(seeds))


def command(chain: Chain, data_dir: str, workdir: pathlib.Path, data_workers: int,
            extra: tuple[str, ...] = ()) -> list[str]:
  return [sys.executable, "-m", "experiments.compare",
          f"--config=experiments/configs/{chain.config}.py", f"--config.data_dir={data_dir}",
          f"--workdir={workdir / chain.study}",
          f"--report_dir={workdir / chain.study / 'report_' / chain.name}",
          f"--methods={','.join(chain.methods)}", f"--seeds={','.join(map(str, chain.seeds))}",
          *(["--stack_seeds"] if len(chain.seeds) > 1 else []),
          f"--config.data_workers={data_workers}", "--config.progress_bar=False", *chain.flags, *extra]


def run_folders(workdir: pathlib.Path, chain: Chain, spec: str) -> list[pathlib.Path]:
  """`<workdir>/<study>/<method>/seed<s>` for each seed, where `experiments.compare` writes the
  runs."""
  method = method_comparison.parse_method(spec)[0]
  return [method_comparison.run_dir(workdir / chain.study, method, seed) for seed in chain.seeds]


def window(run: pathlib.Path) -> dict | None:
  """The run's last logging window after its first (which holds the compilation) from
  metrics.jsonl — images/s of this seed, step, epoch — with its config.json; None before that."""
  try:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    config = json.loads((run / "config.json").read_text())
  except (OSError, ValueError):
    return None
  lines = [line for line in lines if "images_per_sec" in line]
  if len(lines) < 2:
    return None
  last = lines[-1]
  return {"images_per_sec": last["images_per_sec"], "step": last["step"],
          "steps_per_epoch": last["step"] / last["epoch"], "config": config}


def chain_load(workdir: pathlib.Path, chain: Chain) -> tuple[float, float] | None:
  """(images/s now, images left) of a started chain, over its seeds and methods, from the windows
  of the run training now; a deferred method left to train counts its epochs after its start
  (`registry.start_epoch`). None before a first window after the compilation."""
  rate = left = 0.0
  for runs in zip(*(run_folders(workdir, chain, spec) for spec in chain.methods)):
    current = next((i for i, run in enumerate(runs) if not (run / "summary.json").exists()), None)
    if current is None:
      continue
    now = window(runs[current])
    if now is None:
      return None
    config, spe = now["config"], now["steps_per_epoch"]
    rate += now["images_per_sec"]
    left += (config["num_epochs"] * spe - now["step"]) * config["batch_size"]
    left += sum(deferred_images(chain.config, config, spe, spec)
                for spec in chain.methods[current + 1:])
  return rate, left


def deferred_images(study_config: str, config: dict, steps_per_epoch: float, spec: str) -> float:
  """The images a chain's deferred method `spec` trains after its start epoch
  (`registry.start_epoch`, as `experiments.compare` sets it from the study's config file
  `configs/<study_config>.py`; a run's config.json holds its own methods' sub-trees alone) at the
  recipe of `config` (a run's config.json)."""
  study = importlib.import_module(f"experiments.configs.{study_config}").get_config()
  method = method_comparison.method_config(study, spec, seed=0)[1]
  epochs = config["num_epochs"] - registry.start_epoch(method)
  return epochs * steps_per_epoch * config["batch_size"]


def seeds_that_fit(rate: float, left: float, per_seed: float, time_left: float,
                   candidates: Sequence[int]) -> tuple[int, ...]:
  """The first k of `candidates` for the largest k with (left + k · per_seed) / rate ≤ time_left:
  the device's aggregate images/s `rate` taken as fixed (saturated: one more process shares it,
  it does not add to it), `left` the images the started chains still train, `per_seed` one more
  seed's images."""
  if rate <= 0:
    return ()
  k = int(max(0.0, time_left * rate - left) // per_seed) if per_seed > 0 else len(candidates)
  return tuple(candidates[:min(k, len(candidates))])


def chains_that_fit(loads: Sequence[tuple[float, float]], time_left: float) -> int:
  """How many of the chains, in their (priority) order, finish within `time_left` at the summed
  images/s of `loads` ((images/s, images left) per chain), the device's aggregate rate taken as
  fixed (saturated: a chain stopped gives its share to the others)."""
  rate = sum(r for r, _ in loads)
  kept, left = 0, 0.0
  for _, chain_left in loads:
    if left + chain_left > rate * time_left:
      break
    kept, left = kept + 1, left + chain_left
  return kept


def call_plan(workdir: pathlib.Path, running: Sequence[Chain], fill: Chain | None, elapsed: float,
              deadline_s: float, log) -> tuple[list[Chain], Chain | None] | None:
  """(the running chains to stop, the fill chain with the seeds that fit or None), planned from
  the images/s the running chains show and the images they have left (`chain_load`), or None while
  one has no window after its compilation yet (chains queued behind `jobs` are not counted: give
  every chain a job). The chains are kept in their order while they finish before the deadline
  less `START_MARGIN_S` (`chains_that_fit`); the rest are stopped, their share of the device going
  to the kept; then `fill` gets the seeds that fit in the room left (`seeds_that_fit`), one more
  seed's images being those of its methods at the recipe of a run of its study (running or
  finished) that has logged a window."""
  loads = [load for load in (chain_load(workdir, chain) for chain in running) if load is not None]
  if not running or len(loads) < len(running):
    return None
  rate = sum(r for r, _ in loads)
  time_left = deadline_s - elapsed - START_MARGIN_S
  kept = chains_that_fit(loads, time_left)
  left = sum(l for _, l in loads[:kept])
  log(f"plan at {elapsed:.0f} s: {rate:.0f} images/s over {len(running)} chains, "
      f"{sum(l for _, l in loads) / 1e6:.2f} M images left; {time_left:.0f} s to the deadline less "
      f"the margin: {kept} of them finish" + (f", stopping {[c.name for c in running[kept:]]}"
                                              if kept < len(running) else ""))
  if fill is None:
    return list(running[kept:]), None
  now = next((w for w in map(window, sorted((workdir / fill.study).glob("*/seed*")))
              if w is not None), None)
  if now is None:
    log(f"plan: no run of {fill.study} with a window to size {fill.name} by; not started")
    return list(running[kept:]), None
  config, spe = now["config"], now["steps_per_epoch"]
  per_seed = config["num_epochs"] * spe * config["batch_size"] + sum(
      deferred_images(fill.config, config, spe, spec) for spec in fill.methods[1:])
  seeds = seeds_that_fit(rate, left, per_seed, time_left, fill.seeds)
  log(f"plan: {per_seed / 1e6:.2f} M images per seed of {fill.name}: seeds {list(seeds)} of "
      f"{list(fill.seeds)} fit")
  return list(running[kept:]), (fill_chain(seeds) if seeds else None)


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
  """SIGTERM to the process group of `proc`, SIGKILL after `grace_s`."""
  if proc.poll() is None:
    os.killpg(proc.pid, signal.SIGTERM)
  try:
    proc.wait(timeout=grace_s)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_chains(todo: list[Chain], data_dir: str, workdir: pathlib.Path, jobs: int,
               deadline_s: float, data_workers: int, log, extra: tuple[str, ...] = (),
               grace_s: float = GRACE_S, start_margin_s: float = START_MARGIN_S,
               plan=None) -> dict[str, str]:
  """Runs the chains, `jobs` at a time, until done or the deadline; {chain: outcome}. Whatever
  ends it (the deadline, an error, an interrupt), no chain outlives it. `plan(elapsed, running)`,
  called until it answers (`call_plan`), names running chains to stop now and one more chain to
  run next."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
  (workdir / "logs").mkdir(parents=True, exist_ok=True)
  start = time.monotonic()
  queue, running, outcome = list(todo), {}, {}

  def finished(name, proc, began):
    outcome[name] = f"exit {proc.returncode} after {time.monotonic() - began:.0f} s"
    log(f"{name}: {outcome[name]}")

  try:
    while True:
      for name, (proc, began, logfile) in list(running.items()):
        if proc.poll() is not None:
          logfile.close()
          finished(name, proc, began)
          del running[name]
      left = deadline_s - (time.monotonic() - start)
      if plan is not None and running and left > start_margin_s:
        decided = plan(time.monotonic() - start, [c for c in todo if c.name in running])
        if decided is not None:
          plan = None
          to_stop, more = decided
          for chain in to_stop:
            proc, began, logfile = running.pop(chain.name)
            _stop(proc, grace_s)
            logfile.close()
            outcome[chain.name] = f"stopped by the plan after {time.monotonic() - began:.0f} s"
            log(f"{chain.name}: {outcome[chain.name]}")
          if more is not None:
            queue.insert(0, more)
            todo = [*todo, more]
      while queue and len(running) < jobs and left > start_margin_s:
        chain = queue.pop(0)
        logfile = open(workdir / "logs" / f"{chain.name}.log", "w")
        proc = subprocess.Popen(command(chain, data_dir, workdir, data_workers, extra), cwd=REPO,
                                env=env, stdout=logfile, stderr=subprocess.STDOUT,
                                start_new_session=True)
        running[chain.name] = (proc, time.monotonic(), logfile)
        log(f"{chain.name}: started ({' '.join(chain.methods)})")
      if left <= 0 or not running:
        break
      time.sleep(min(2, max(left, 0.1)))
  finally:
    # SIGTERM to every process group still running, SIGKILL to those left after one shared grace.
    stopped = {}
    for name, (proc, began, _) in running.items():
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        stopped[name] = began
    grace_end = time.monotonic() + grace_s
    for name, (proc, began, logfile) in running.items():
      try:
        proc.wait(timeout=max(grace_end - time.monotonic(), 0.1))
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
      logfile.close()
      if name in stopped:
        outcome[name] = f"stopped at the deadline after {time.monotonic() - began:.0f} s"
        log(f"{name}: {outcome[name]}")
      else:
        finished(name, proc, began)
    for chain in queue:
      outcome[chain.name] = "not started (deadline)"
      log(f"{chain.name}: {outcome[chain.name]}")
  return outcome


def _steps(run: pathlib.Path) -> list[pathlib.Path]:
  """A run's checkpoint step folders (digit names: an interrupted save's temporary folder is not one),
  latest first."""
  folder = run / "checkpoints"
  if not folder.is_dir():
    return []
  return sorted((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()),
                key=lambda p: -int(p.name))


def _files(folder: pathlib.Path, skip: str | None = None) -> list[tuple[pathlib.Path, int]]:
  return [(p, p.stat().st_size) for p in sorted(folder.rglob("*"))
          if p.is_file() and not (skip and skip in p.relative_to(folder).parts)]


def members(workdir: pathlib.Path, todo: list[Chain]) -> list[tuple[int, list[tuple[pathlib.Path, int]]]]:
  """What to pack, as (priority, files packed together or not at all), lower priority first: 0 the
  chains' logs, 1 each run's files without checkpoints, 2 the reports, 3 the latest checkpoint step
  of a run that will go on from it, 4 its other steps (a finished run's are all 3: the step a
  deferred method starts from need not be its latest)."""
  units = [(0, [f]) for f in _files(workdir / "logs")] if (workdir / "logs").is_dir() else []
  for chain in todo:
    for runs in zip(*(run_folders(workdir, chain, spec) for spec in chain.methods)):
      units += _run_members(list(runs))
  for report in sorted(workdir.glob("*/report_/*")):
    units += [(2, [f]) for f in _files(report)]
  return [(priority, files) for priority, files in units if files]


def _run_members(runs: list[pathlib.Path]) -> list[tuple[int, list[tuple[pathlib.Path, int]]]]:
  """`members`' units of one seed's runs of a chain, in the chain's order."""
  units = []
  for i, run in enumerate(runs):
    if not run.is_dir():
      continue
    done = (run / "summary.json").exists()
    if i > 0 and not done:
      continue  # a deferred run restarts from its source's checkpoint (module docstring)
    units.append((1, _files(run, skip="checkpoints")))
    followers_pending = any(not (r / "summary.json").exists() for r in runs[i + 1:])
    if i == 0 and (not done or followers_pending):
      for k, step in enumerate(_steps(run)):
        units.append((3 if done or k == 0 else 4, _files(step)))
  return units


def _tar_size(size: int) -> int:
  """Bytes a member of `size` takes in a tar: its header, its data padded to 512, and a PAX header
  for a long name."""
  return 512 + -(-size // 512) * 512 + 1024


def pack(workdir: pathlib.Path, out: pathlib.Path,
         units: list[tuple[int, list[tuple[pathlib.Path, int]]]], log) -> list[pathlib.Path]:
  """Packs the units, by priority, each whole into the first tar with room (at most MAX_FILES of at
  most MAX_FILE_BYTES, MAX_TOTAL_BYTES together); logs and returns what was left out."""
  bins: list[list[pathlib.Path]] = [[] for _ in range(MAX_FILES)]
  sizes = [TAR_END_BYTES] * MAX_FILES
  total, left = 0, []
  for _, files in sorted(units, key=lambda unit: unit[0]):
    size = sum(_tar_size(s) for _, s in files)
    target = next((b for b in range(MAX_FILES) if sizes[b] + size <= MAX_FILE_BYTES), None)
    if target is None or total + size + (TAR_END_BYTES if not bins[target] else 0) > MAX_TOTAL_BYTES:
      left += [path for path, _ in files]
      continue
    total += size + (TAR_END_BYTES if not bins[target] else 0)
    bins[target] += [path for path, _ in files]
    sizes[target] += size
  out.mkdir(parents=True, exist_ok=True)
  for stale in out.glob("runs*.tar"):
    stale.unlink()
  for b, paths in enumerate(bins):
    if paths:
      with tarfile.open(out / f"runs{b}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
          tar.add(path, arcname=str(path.relative_to(workdir)), recursive=False)
  written = sorted(out.glob("runs*.tar"))
  log(f"packed {sum(len(b) for b in bins)} files, "
      f"{sum(p.stat().st_size for p in written) / 2**20:.1f} MiB in {len(written)} tar files; "
      f"left out {len(left)}: {[str(p.relative_to(workdir)) for p in left[:20]]}")
  return left


@functools.cache
def grey_jpeg() -> bytes:
  """The stand-in for an image no chain selects: 32 x 32 grey, quality 1."""
  buffer = io.BytesIO()
  Image.new("L", (32, 32), 128).save(buffer, format="JPEG", quality=1, optimize=True)
  return buffer.getvalue()


def _read_train(folder: pathlib.Path):
  with np.load(folder / "train.npz") as npz:
    return npz["jpeg"], npz["offsets"], npz["labels"]


def _greys(jpeg: np.ndarray, offsets: np.ndarray, indices: np.ndarray) -> np.ndarray:
  """The indices among `indices` whose image is the grey stand-in."""
  grey = grey_jpeg()
  indices = indices[(offsets[indices + 1] - offsets[indices]) == len(grey)]
  return np.array([i for i in indices if jpeg[offsets[i]:offsets[i + 1]].tobytes() == grey], int)


def selected(labels: np.ndarray, todo: list[Chain]) -> dict[str, np.ndarray]:
  """{chain: the training indices its config and seeds select}."""
  out = {}
  for chain in todo:
    config = importlib.import_module(f"experiments.configs.{chain.config}").get_config()
    picked = []
    for seed in chain.seeds:
      config.seed = seed
      picked.append(loading.train_indices(config, labels, int(labels.max()) + 1))
    out[chain.name] = np.unique(np.concatenate(picked))
  return out


def check_data(folder: pathlib.Path, todo: list[Chain]) -> None:
  """DataError if an image a chain selects is the grey stand-in (a copy made for other seeds)."""
  jpeg, offsets, labels = _read_train(folder)
  for name, indices in selected(labels, todo).items():
    if len(greys := _greys(jpeg, offsets, indices)):
      raise DataError(f"{folder}: {len(greys)} of the images chain {name} selects are the grey "
                      f"stand-in (first {greys[:5].tolist()}): make the copy with this call's "
                      "--seeds and --only")


def slim_data(source: pathlib.Path, target: pathlib.Path, todo: list[Chain]) -> None:
  """Copies source's train.npz / test.npz to target, replacing each training image no chain selects."""
  if source.resolve() == target.resolve():
    raise DataError(f"--slim_data_to is --data_dir ({source}): the copy would replace its source")
  jpeg, offsets, labels = _read_train(source)
  if len(_greys(jpeg, offsets, np.arange(len(labels)))):
    raise DataError(f"{source} is itself a slimmed copy: make the copy from the full folder")
  used = np.zeros(len(labels), bool)
  for indices in selected(labels, todo).values():
    used[indices] = True
  pieces = [jpeg[offsets[i]:offsets[i + 1]].tobytes() if used[i] else grey_jpeg()
            for i in range(len(labels))]
  new_offsets = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)
  target.mkdir(parents=True, exist_ok=True)
  np.savez(target / "train.npz", jpeg=np.frombuffer(b"".join(pieces), np.uint8),
           offsets=new_offsets, labels=labels)
  (target / "test.npz").write_bytes((source / "test.npz").read_bytes())
  print(f"{target}: {used.sum()} of {len(labels)} training images kept; "
        f"{(target / 'train.npz').stat().st_size / 2**20:.1f} MiB train.npz")


def define_flags(flag_values: flags.FlagValues) -> None:
  def define(kind, name, default, help_text, **kwargs):
    getattr(flags, f"DEFINE_{kind}")(name, default, help_text, flag_values=flag_values, **kwargs)

  define("string", "data_dir", ".data/cifar10_slim", "CIFAR-10 JPEG folder (with --slim_data_to: "
         "the full one to copy from).")
  define("string", "workdir", "/tmp/accelerator_runs", "Where the runs go.")
  define("string", "out", None, "Where the tar files go (the device tool's $OUT; default "
         "<workdir>/out).")
  define("integer", "jobs", 6, "Chains at once on the one accelerator.", lower_bound=1)
  define("float", "deadline_s", 520, "Seconds after which the running chains are stopped.")
  define("integer", "data_workers", 2, "Host threads per chain (config.data_workers).",
         lower_bound=0)
  define("list", "seeds", ["0"], "Seeds of issue 39's chains (the reference chains: seed 0).")
  define("list", "only", [], "Chain names to run (default: every chain, in order).")
  define("multi_string", "extra", [], "Flags appended to every chain's command (a smoke test's "
         "tiny sizes).")
  define("string", "slim_data_to", None, "Write the slimmed copy of --data_dir here and exit.")
  define("bool", "stack_seeds", False, "One process per chain for all --seeds, the seeds on a "
         "vmapped axis (experiments.train.seed_axis; `compare --stack_seeds`).")
  define("bool", "plan", False, "Once every running chain has logged a window after compiling, "
         "stop those (last first) that would not finish before the deadline at the images/s they "
         "show together, and start the --fill_seeds chain for the seeds that fit (`call_plan`).")
  define("list", "fill_seeds", [], "With --plan: seeds of MR2 then MR2 + reweighting on the "
         "long-tailed 200-epoch recipe, one stacked chain started with as many of them as fit.")


def accelerator_command(args: flags.FlagValues) -> int:
  try:
    seeds = [int(s) for s in args.seeds]
    fill_seeds = [int(s) for s in args.fill_seeds]
  except ValueError:
    return cli.report(f"--seeds, --fill_seeds: integers, got {args.seeds}, {args.fill_seeds}")
  todo = chains(seeds, stack=args.stack_seeds)
  if args.only:
    if unknown := sorted(set(args.only) - {c.name for c in todo}):
      return cli.report(f"--only: unknown chains {unknown}; known: {[c.name for c in todo]}")
    todo = [c for c in todo if c.name in args.only]
  fill = fill_chain(fill_seeds) if fill_seeds else None
  if args.slim_data_to:
    slim_data(pathlib.Path(args.data_dir), pathlib.Path(args.slim_data_to),
              todo + ([fill] if fill else []))
    return 0
  check_data(pathlib.Path(args.data_dir), todo + ([fill] if fill else []))
  workdir = pathlib.Path(args.workdir).resolve()
  out = pathlib.Path(args.out or workdir / "out")
  workdir.mkdir(parents=True, exist_ok=True)
  out.mkdir(parents=True, exist_ok=True)
  start = time.monotonic()
  with open(out / "driver.log", "a") as driver_log:
    def log(message):
      line = f"[{time.monotonic() - start:6.0f} s] {message}"
      print(line, flush=True)
      driver_log.write(line + "\n")
      driver_log.flush()

    def interrupted(signum, frame):
      del frame
      raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)  # chains stopped, runs packed
    log(f"chains: {[c.name for c in todo]}; jobs {args.jobs}; deadline {args.deadline_s} s"
        + ("; planned from the first windows" if args.plan else "")
        + (f", then {fill.name} for the seeds that fit" if fill and args.plan else ""))
    planned = []

    def plan(elapsed, running):
      decided = call_plan(workdir, running, fill, elapsed, args.deadline_s, log)
      if decided is not None and decided[1] is not None:
        planned.append(decided[1])
      return decided
    try:
      outcome = run_chains(todo, args.data_dir, workdir, args.jobs, args.deadline_s,
                           args.data_workers, log, tuple(args.extra),
                           plan=plan if args.plan else None)
      (workdir / "logs" / "outcome.json").write_text(json.dumps(outcome, indent=1))
    finally:
      signal.signal(signal.SIGTERM, previous)
      pack(workdir, out, members(workdir, todo + planned), log)
      log("done")
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m tools.accelerator_runs`; `argv` (without the program name) runs it
  from Python."""
  return cli.run_command(define_flags, accelerator_command, argv)


if __name__ == "__main__":
  sys.exit(main())
