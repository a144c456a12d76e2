"""experiments.data.device_crop_flip and experiments.train.device_input (`config.input_on_device`):
crops cut on the device from the split in device memory, at the draws the host makes, are the host
path's batches bit for bit — the uint8 crops and the float32 images normalised from them — for
several seeds and steps, views, processes and paired batches, under every runner's layout; and a
short digits run trains the same per-step losses either way."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.common.errors import ConfigError
from experiments.common.errors import DataError
from experiments.configs import digits_lt
from experiments.data import batches as batches_lib
from experiments.data import crop_flip
from experiments.data import device_crop_flip
from experiments.data import input_pipeline
from experiments.data import normalization
from experiments.data.split import Split
from experiments.train import device_input
from experiments.train import loop
from experiments.train import runners
from experiments.train import steps
from experiments.configs import schema


@functools.lru_cache(maxsize=None)
def split(name="cifar10_jpeg", shape=(40, 32, 32, 3)):
  """A CIFAR-like split (random pixels, 32×32×3) or a digits-like one (8×8×1)."""
  rng = np.random.default_rng(sum(shape))
  return Split(rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 10, shape[0]), 10,
               tuple(map(str, range(10))), name)


DIGITS_LIKE = dict(name="digits", shape=(40, 8, 8, 1))


def draw_pair(rng, global_rows, height, width):
  """A GLMC-like partner draw (rows, λ, box) from the batch's generator."""
  del height, width
  return batches_lib.PairDraw(rng.integers(0, 40, len(global_rows)), float(rng.random()),
                              (1, 3, 2, 5))


def batch_pair(data, step, **options):
  """Batch `step` of a run as the host path gives it (uint8, and float32 normalised) and as the
  device path does (the draws, the images cut on the device)."""
  batch_size = options.pop("batch_size", 8)
  spe = batches_lib.steps_per_epoch(data, batch_size, options.get("process_count", 1))
  at = functools.partial(input_pipeline.BatchAt, data, batch_size, spe, **options)
  _, host_uint8 = at(normalized=False)(step)
  _, host_float = at()(step)
  _, draws = at(crops_on_device=True)(step)
  cut = jax.jit(device_crop_flip.with_device_images)(jnp.asarray(data.images), draws)
  return host_uint8, host_float, draws, cut


@pytest.mark.parametrize("data", [{}, DIGITS_LIKE], ids=["cifar_like", "digits_like"])
@pytest.mark.parametrize("options", [
    dict(augment=True),
    dict(augment=True, views=3),
    dict(augment=True, views=2, process_index=1, process_count=2),
    dict(augment=True, pair=draw_pair),
    dict(augment=False, views=2),
], ids=["crop_flip", "three_views", "process_1_of_2", "paired", "no_augmentation"])
def test_device_crops_are_the_host_crops_bit_for_bit(data, options):
  data = split(**data)
  task = steps.Task((1.0,), 1, normalization=normalization.normalization(data.name))
  normalise = jax.jit(steps.device_images, static_argnums=1)
  for seed in (0, 7, 1234):
    for step in (0, 3, 11):  # 5 steps per epoch (2 per process of 2): steps of several epochs
      host_uint8, host_float, draws, cut = batch_pair(data, step, seed=seed, **options)
      assert "image" not in draws and draws["crop"].dtype == np.int32
      assert set(cut) == set(host_uint8)
      for field in host_uint8:
        assert cut[field].dtype == host_uint8[field].dtype, field
        np.testing.assert_array_equal(np.asarray(cut[field]), host_uint8[field], err_msg=field)
      for field in ("image", "image_b"):
        if field in cut:  # the float32 images the step trains on, normalised on the device
          normalised = np.asarray(normalise(cut[field], task))
          assert normalised.dtype == host_float[field].dtype == np.float32
          np.testing.assert_array_equal(normalised, host_float[field], err_msg=field)


def test_the_draws_are_the_ones_random_crop_flip_cuts_with():
  images = split().images[:6]
  draws = crop_flip.crop_flip_draws(np.random.default_rng(5), 6)
  top, left, flip = draws.T
  assert draws.dtype == np.int32 and draws.min() >= 0 and top.max() <= 8 and set(flip) <= {0, 1}
  padded = np.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  by_hand = np.stack([padded[i, t:t + 32, l:l + 32][:, ::-1 if f else 1]
                      for i, (t, l, f) in enumerate(draws)])
  np.testing.assert_array_equal(crop_flip.random_crop_flip(images, np.random.default_rng(5)),
                                by_hand)
  on_device = device_crop_flip.crop_flip_rows(jnp.asarray(images), jnp.arange(6), draws)
  np.testing.assert_array_equal(np.asarray(on_device), by_hand)


@pytest.mark.parametrize("parallel", runners.PARALLEL)
def test_each_runner_layout_gets_the_host_images_where_its_step_reads_them(parallel):
  """8 fake devices (tests/conftest.py): the images are cut on the devices of the batch's layout
  ('jit' and 'shard_map': each device its rows of the mesh; 'pmap': [devices, rows, ...])."""
  data = split()
  runner = runners.make_runner(parallel, None, None, None)  # only its layouts are used
  place = device_input.DeviceCrops(parallel, data.images, runner.place_batch)
  for step in (0, 5):
    host_uint8, _, draws, _ = batch_pair(data, step, seed=3, augment=True, views=2,
                                         batch_size=16)
    placed = place(draws)
    images = (np.asarray(placed["image"]) if parallel == "none"
              else runner.batch_to_host(placed["image"]))
    np.testing.assert_array_equal(images, host_uint8["image"])
    if parallel != "none":  # each device holds its own rows' images, as the step reads them
      shards = placed["image"].addressable_shards
      assert len(shards) == jax.device_count() == 8
      assert {shard.data.size for shard in shards} == {placed["image"].size // 8}


def test_input_on_device_is_checked():
  config = digits_lt.get_config()
  assert config.input_on_device is False  # default: the host path, nothing changes
  schema.validate(dict_update(config, input_on_device=True, augment=True))
  for overrides, message in (
      (dict(augment=True, augmentation="released"), "'crop_flip' crops only"),
      (dict(input_pipeline="grain"), "'numpy' pipeline"),
      (dict(dataset="tfds:cifar100"), "decodes its images on index")):
    with pytest.raises(ConfigError, match=rf"^config\.input_on_device: .*{message}"):
      schema.validate(dict_update(config, input_on_device=True, **overrides))
  schema.validate(dict_update(config, augment=True, augmentation="released"))  # off: anything
  with pytest.raises(DataError, match="'crop_flip' only"):
    batches_lib.train_batch(split(), np.arange(4), key=[0, 0, 0], augment=True,
                            augmentation="simclr", crops_on_device=True)


def dict_update(config, **overrides):
  config = config.copy_and_resolve_references()
  config.update(overrides)
  return config


def per_step_losses(workdir):
  return np.array([record["loss"] for record in map(json.loads, (
      workdir / "metrics.jsonl").read_text().splitlines()) if "loss" in record])


# |Δ loss| per logged step between the two paths: measured 0.0 on 2 CPU cores (the images are the
# same bit for bit). The bound leaves room for a backend that compiles the two steps — different
# programs: the normalisation table sits in one — with another float order or convolution
# algorithm.
LOSS_TOLERANCE = 1e-5


def test_a_digits_run_trains_the_same_losses_with_the_input_on_the_device(tmp_path):
  """The host path, the device path, and the host path stopped after 5 steps and resumed on the
  device (a resumable field: where the same crops are cut)."""
  config = digits_lt.get_config()
  config.update(dict(num_epochs=2, batch_size=32, nc_metrics=False, progress_bar=False,
                     augment=True, log_every_steps=1, checkpoint_every_steps=5,
                     class_loss_every_epochs=0))
  on_device = dict_update(config, input_on_device=True)
  host = loop.train_and_evaluate(config, tmp_path / "host")
  device = loop.train_and_evaluate(on_device, tmp_path / "device")
  loop.train_and_evaluate(config, tmp_path / "switched", max_steps=5)
  switched = loop.train_and_evaluate(on_device, tmp_path / "switched")
  host_losses = per_step_losses(tmp_path / "host")
  assert len(host_losses) == host["steps"] == device["steps"] == switched["steps"] > 10
  for run in ("device", "switched"):
    losses = per_step_losses(tmp_path / run)
    np.testing.assert_allclose(losses, host_losses, rtol=0, atol=LOSS_TOLERANCE, err_msg=run)
  saved = json.loads((tmp_path / "device" / "config.json").read_text())
  assert saved["input_on_device"] is True
