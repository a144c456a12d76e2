"""Test setup: 8 fake CPU devices for pmap tests (must be set before JAX initialises its backend)."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import chex  # noqa: E402

chex.set_n_cpu_devices(8)

# Hypothesis profiles of the property tests (tests/test_properties_*.py, strategies in
# tests/strategies.py). 'default': few examples per property over a narrow pool of compiled shapes,
# deterministic (derandomize): 6 examples per property keeps them ≈ 1 min on 2 CPU cores.
# 'slow' (HYPOTHESIS_PROFILE=slow, or the @pytest.mark.slow twins of every property test, run with
# `-m slow`): 1,000 examples per property over the wide pools, random seeds. Both print the
# reproduction blob of a failure (print_blob); a random seed is printed by the pytest plugin
# ("--hypothesis-seed=N"). No example database: the working tree stays clean.
from hypothesis import HealthCheck  # noqa: E402
from hypothesis import settings  # noqa: E402

_SUPPRESSED = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
               HealthCheck.differing_executors)
settings.register_profile("default", max_examples=6, deadline=None, derandomize=True,
                          print_blob=True, database=None, suppress_health_check=_SUPPRESSED)
settings.register_profile("slow", max_examples=1000, deadline=None, derandomize=False,
                          print_blob=True, database=None, suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
