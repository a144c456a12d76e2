"""The training input with the training split in device memory (`config.input_on_device`): the
host sends each step's rows, labels and crop + flip draws, and the images are cut on the devices
that train on them (`experiments.data.device_crop_flip`), laid out as the runner's step takes them.

On an accelerator the host then does no pixel work at all (a few int32 per example per step),
so it stops being the bottleneck of the small-image recipes; the split is copied to each device
once (CIFAR-10's 50,000 × 32 × 32 × 3: 147 MiB per device). The crops are bit for bit the host
path's, and so are the float32 images the step normalises them into (`steps.device_images`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from experiments.common.errors import ConfigError
from experiments.data import device_crop_flip

P = jax.sharding.PartitionSpec


class DeviceCrops:
  """`place(batch)` for the loop: the runner's `place_batch` of a host batch of draws
  (`batches.train_batch(..., crops_on_device=True)`), its images then cut on the devices from the
  split `images`, copied there at the first batch (whose layout says where: `cut_for`)."""

  def __init__(self, parallel: str, images: np.ndarray, place_batch: Callable[[dict], dict]):
    if not isinstance(images, np.ndarray):  # a lazy split decodes on index: nothing to copy
      raise ConfigError("config.input_on_device: the training split is decoded on index, not held "
                        "in host memory")
    self.parallel, self.host_images, self.place_batch = parallel, images, place_batch
    self.device_images, self.cut = None, None

  def __call__(self, batch: dict) -> dict:
    placed = self.place_batch(batch)
    if self.cut is None:
      self.device_images, self.cut = cut_for(self.parallel, self.host_images, placed)
    return self.cut(self.device_images, placed)


def cut_for(parallel: str, images: np.ndarray, placed: dict):
  """(the split on the devices, the compiled cut: (split, placed batch) → batch with images) for
  a batch placed as `parallel`'s runner places it (`runners.make_runner`):

    'none'              the split on the default device, one jit;
    'jit', 'shard_map'  the split replicated over the batch's mesh, each device cutting its own
                        rows (`shard_map` over the batch's axis): no image crosses devices;
    'pmap'              a copy of the split on each of the local devices, the cut pmapped.
  """
  cut = device_crop_flip.with_device_images
  if parallel == "none":
    return jax.device_put(images), jax.jit(cut)
  if parallel == "pmap":
    devices = jax.local_devices()[:placed["label"].shape[0]]  # the runner's (all local) devices
    copies = jax.pmap(lambda split, _: split, in_axes=(None, 0), devices=devices)(
        images, np.zeros(len(devices)))
    return copies, jax.pmap(cut, devices=devices)
  batch_sharding = placed["label"].sharding  # rows split over the mesh's batch axis
  mesh, spec = batch_sharding.mesh, batch_sharding.spec
  replicated = jax.sharding.NamedSharding(mesh, P())
  split = jax.make_array_from_callback(images.shape, replicated, lambda index: images[index])
  return split, jax.jit(jax.shard_map(cut, mesh=mesh, in_specs=(P(), spec), out_specs=spec))
