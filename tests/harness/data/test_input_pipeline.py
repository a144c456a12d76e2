"""experiments.data.input_pipeline: the grain and NumPy pipelines give the run's batches (one `BatchAt`),
uint8 pixels are normalised on the device bit for bit as on the host, grain's iterator state is
checkpointed with the train state and a resumed run continues exactly, its position checked."""

import functools
import json
import os
import pathlib
import shutil

import chex
import jax
import numpy as np
import pytest

from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.configs import digits_lt
from experiments.data import batches as batches_lib
from experiments.data import image_files
from experiments.data import input_pipeline
from experiments.data import lazy_images
from experiments.data import loading
from experiments.data import normalization
from experiments.train import checkpoints
from experiments.train import loop
from experiments.train import steps
from tests import checkpoints as checkpoint_files
from tests.harness.data import test_sources


@functools.lru_cache(maxsize=None)
def digits():
  return loading.load_split("digits", "train")


def draw_pair(rng, global_rows, height, width):
  """A GLMC-like partner draw (rows, λ, box) from the batch's generator."""
  return batches_lib.PairDraw(rng.integers(0, len(digits()), len(global_rows)), float(rng.random()),
                              (1, 3, 2, 5))


def batch_at(split=None, **kwargs):
  split = split or digits()
  options = dict(seed=3, augment=True)
  options.update(kwargs)
  batch_size = options.pop("batch_size", 16)
  spe = batches_lib.steps_per_epoch(split, batch_size, options.get("process_count", 1),
                                    options.get("sample"))
  return input_pipeline.BatchAt(split, batch_size, spe, **options), spe


@pytest.mark.parametrize("options", [
    {},
    dict(views=2, process_index=1, process_count=2),
    dict(sample=np.concatenate([np.arange(200), np.arange(50)]), pair=draw_pair),
    dict(views=3, normalized=False),
], ids=["plain", "views_processes", "sample_pair", "views_uint8"])
def test_batch_at_step_is_the_epoch_batch_of_train_batches(options):
  at, spe = batch_at(**options)
  kwargs = {k: v for k, v in options.items() if k != "batch_size"}
  for epoch in (0, 2):
    expected = list(batches_lib.train_batches(digits(), 16, epoch=epoch, **dict(
        dict(seed=3, augment=True), **kwargs)))
    assert len(expected) == spe
    for b in (0, spe - 1):
      step, batch = at(epoch * spe + b)
      assert step == epoch * spe + b
      chex.assert_trees_all_equal(batch, expected[b])


def test_uint8_images_are_normalised_on_the_device_exactly_as_on_the_host():
  images = np.random.default_rng(0).integers(0, 256, (4, 5, 6, 3), dtype=np.uint8)
  for name in ("cifar10_jpeg", "digits", "tfds:cifar100", "imagenet_lt"):
    task = steps.Task((1.0,), 1, normalization=normalization.normalization(name))
    host = normalization.normalize(images if name != "digits" else images[..., :1], name)
    device = jax.jit(steps.device_images, static_argnums=1)(
        images if name != "digits" else images[..., :1], task)
    assert device.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(device), host)
  floats = host.astype(np.float32)
  assert steps.device_images(floats, task) is floats  # host-normalised images pass unchanged


def take(pipeline, start, count, place=lambda b: b):
  items = []
  batches = pipeline.batches(start, place)
  for item in batches:
    items.append(item)
    if len(items) == count:
      break
  batches.close()
  return items


def test_grain_and_numpy_pipelines_give_the_same_batches():
  at, spe = batch_at()
  total = 3 * spe
  numpy_items = take(input_pipeline.make("numpy", at, total), spe - 2, 4)
  grain_at, _ = batch_at(normalized=False)
  grain_items = take(input_pipeline.make("grain", grain_at, total), spe - 2, 4)
  assert [s for s, _, _ in numpy_items] == [s for s, _, _ in grain_items] == list(
      range(spe - 2, spe + 2))
  for (_, expected, no_state), (step, batch, state) in zip(numpy_items, grain_items):
    assert no_state is None and state["start"] == spe - 2
    assert batch["image"].dtype == np.uint8
    batch = dict(batch, image=normalization.normalize(batch["image"], "digits"))
    chex.assert_trees_all_equal(batch, expected)



@pytest.mark.parametrize("options", [
    {}, dict(sample=np.concatenate([np.arange(200), np.arange(50)]), pair=draw_pair, views=2),
], ids=["plain", "sample_pair_views"])
def test_numpy_pipeline_threads_give_the_one_thread_batches(options):
  at, spe = batch_at(**options)
  total = 3 * spe
  start = spe - 3  # across an epoch boundary, to the end of the run
  one = take(input_pipeline.make("numpy", at, total), start, total)
  assert [s for s, _, _ in one] == list(range(start, total))
  for workers in (1, 3):
    threaded = take(input_pipeline.make("numpy", at, total, workers=workers), start, total)
    assert [s for s, _, _ in threaded] == list(range(start, total))
    for (_, expected, _), (_, batch, state) in zip(one, threaded):
      assert state is None
      chex.assert_trees_all_equal(batch, expected)

@pytest.mark.parametrize("workers", [0, 2])
def test_grain_resumes_from_its_saved_state(workers):
  at, spe = batch_at(normalized=False, views=2)
  total = 2 * spe
  first = take(input_pipeline.make("grain", at, total, workers=workers), 1, 6)
  saved = json.loads(json.dumps(first[2][2]))  # as the checkpoint stores it
  resumed = take(input_pipeline.make("grain", at, total, workers=workers, restored_state=saved),
                 4, 3)  # the saved state, not the start step, fixes the position
  assert [s for s, _, _ in resumed] == [4, 5, 6]
  for (_, expected, _), (_, batch, _) in zip(first[3:], resumed):
    chex.assert_trees_all_equal(batch, expected)
  with pytest.raises(DataError, match="unknown 'tf'"):
    input_pipeline.make("tf", at, total)


def test_grain_workers_decode_a_lazy_image_folder(tmp_path):
  root, _ = test_sources.tree.__wrapped__(tmp_path)
  split = loading.load_split(image_files.IMAGENET_LT, "train", root, image_size=16, resize=20)
  assert isinstance(split.images, lazy_images.LazyImages)
  at, spe = batch_at(split, batch_size=4, augment=False, normalized=False)
  in_process = [at(step)[1] for step in range(2 * spe)]
  items = take(input_pipeline.make("grain", at, 2 * spe, workers=2), 0, 2 * spe)
  for expected, (_, batch, _) in zip(in_process, items):
    chex.assert_trees_all_equal(batch, expected)
  np.testing.assert_array_equal(  # the rows decoded in the workers are the split's
      items[0][1]["image"], split.images[items[0][1]["index"]])


def tiny_config(**overrides):
  config = digits_lt.get_config()
  config.update(dict(num_epochs=2, batch_size=32, nc_metrics=False, progress_bar=False,
                     augment=True, checkpoint_every_steps=3, class_loss_every_epochs=0))
  config.update(overrides)
  return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A NumPy-pipeline run, and a grain run killed (max_steps) after 5 steps then resumed."""
  root = tmp_path_factory.mktemp("pipelines")
  loop.train_and_evaluate(tiny_config(), root / "numpy")
  loop.train_and_evaluate(tiny_config(input_pipeline="grain"), root / "grain", max_steps=5)
  stopped = checkpoint_files.restore_latest(root / "grain")
  shutil.copytree(root / "grain", root / "grain_stopped")
  summary = loop.train_and_evaluate(tiny_config(input_pipeline="grain"), root / "grain")
  return root, stopped, summary


def test_grain_run_resumed_from_its_checkpoint_equals_the_numpy_run(runs):
  root, (stopped_at, _), summary = runs
  assert stopped_at == 5
  (step_a, a), (step_b, b) = (checkpoint_files.restore_latest(root / "numpy"),
                              checkpoint_files.restore_latest(root / "grain"))
  assert step_a == step_b == summary["steps"]
  for run, step, start in (("grain_stopped", 5, 0), ("grain", step_b, 0)):
    saved = json.loads((root / run / "checkpoints" / str(step) / "input" /
                        "process_0-of-1.json").read_text())
    assert saved == {"start": start, "grain": {"next_index": step}}  # grain counts from start
  for key in ("params", "batch_stats", "opt_state", "loss_state"):
    chex.assert_trees_all_equal(a[key], b[key])
  assert not (root / "numpy" / "checkpoints" / str(step_a) / "input").exists()


def test_a_saved_input_position_that_does_not_match_the_step_is_refused(runs, tmp_path):
  root, _, _ = runs
  shutil.copytree(root / "grain_stopped", tmp_path / "run")
  state_file = tmp_path / "run" / "checkpoints" / "5" / "input" / "process_0-of-1.json"
  saved = json.loads(state_file.read_text())
  saved["start"] = 1  # the same grain position counted from another start: step 6, not 5
  state_file.write_text(json.dumps(saved))
  with pytest.raises(DataError, match="batch of step 6 at step 5"):
    loop.train_and_evaluate(tiny_config(input_pipeline="grain"), tmp_path / "run")


def test_pipeline_config_is_checked():
  from experiments.configs import schema
  with pytest.raises(ConfigError, match="input_pipeline"):
    schema.validate(tiny_config(input_pipeline="tf"))
  with pytest.raises(ConfigError, match="data_workers"):
    schema.validate(tiny_config(data_workers=-1))
  assert checkpoints.InputState({"a": 1}).get_state() == b'{"a": 1}'


def test_the_numpy_pipeline_runs_without_grain_installed(tmp_path):
  """The accelerator image has no grain (tools/reference.sh runs from PYTHONPATH): the default
  pipeline, checkpoints included, must not import it."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  script = (
      "import sys; sys.modules['grain'] = None  # `import grain` now raises ImportError\n"
      "from experiments.train import loop\n"
      "from tests.harness.data.test_input_pipeline import tiny_config\n"
      f"summary = loop.train_and_evaluate(tiny_config(), {str(tmp_path / 'run')!r}, max_steps=3)\n"
      "assert summary['steps'] == 3\n")
  subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300,
                 cwd=pathlib.Path(__file__).resolve().parents[3])


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
  except FileNotFoundError:
    return False


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_grain_workers_exit_when_the_trainer_is_killed(tmp_path):
  """A trainer killed outright (SIGKILL, the OOM killer) closes no iterator: its grain workers must
  not run on as orphans (they did, holding memory, until `exit_with_parent`)."""
  import signal  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  script = (
      "import glob, os, time\n"
      "from experiments.data import input_pipeline\n"
      "from tests.harness.data.test_input_pipeline import batch_at\n"
      "if __name__ == '__main__':\n"
      "  at, spe = batch_at()\n"
      "  batches = input_pipeline.make('grain', at, 10 * spe, workers=2).batches(0, lambda b: b)\n"
      "  next(batches)\n"
      "  children = set()\n"
      "  for path in glob.glob(f'/proc/{os.getpid()}/task/*/children'):\n"
      "    children.update(open(path).read().split())\n"
      "  print(' '.join(sorted(children)), flush=True)\n"
      "  time.sleep(300)\n")
  (tmp_path / "trainer.py").write_text(script)
  trainer = subprocess.Popen(
      [sys.executable, str(tmp_path / "trainer.py")], stdout=subprocess.PIPE, text=True,
      cwd=pathlib.Path(__file__).resolve().parents[3],
      env=dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[3])))
  try:
    children = [int(pid) for pid in trainer.stdout.readline().split()]
    workers = [pid for pid in children
               if "spawn_main" in open(f"/proc/{pid}/cmdline").read().replace("\0", " ")]
    assert len(workers) == 2, children  # the test sees the workers it means to watch
    assert all(_alive(pid) for pid in workers)
  finally:
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
  deadline = time.monotonic() + 20 * input_pipeline.PARENT_POLL_SECONDS + 10
  while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
    time.sleep(0.1)
  survivors = [pid for pid in children if _alive(pid)]
  for pid in survivors:  # leave no orphan behind, whatever the result
    os.kill(pid, signal.SIGKILL)
  assert not survivors, f"processes of the killed trainer still running: {survivors}"
