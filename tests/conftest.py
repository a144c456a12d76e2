"""Test setup: 8 fake CPU devices for pmap tests (must be set before JAX initialises its backend)."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import chex  # noqa: E402

chex.set_n_cpu_devices(8)
