"""Test setup: 8 fake CPU devices for pmap tests (must be set before JAX initialises its backend)."""

import os
import sys

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
# HYPOTHESIS_SLOW_EXAMPLES=N runs the slow twins with N examples each (to time or bisect a run).
settings.register_profile("slow",
                          max_examples=int(os.environ.get("HYPOTHESIS_SLOW_EXAMPLES", 1000)),
                          deadline=None, derandomize=False, print_blob=True, database=None,
                          suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_sessionfinish(session, exitstatus):
  """With PROPERTY_REPORT_DIR set, each test process writes the property tests' worst |error| / atol
  per check (tests/strategies.py's WORST) to <dir>/worst-<worker>.json: how tight the tolerances are."""
  del exitstatus
  report_dir = os.environ.get("PROPERTY_REPORT_DIR")
  strategies = sys.modules.get("strategies") or sys.modules.get("tests.strategies")
  if not report_dir or strategies is None or not strategies.WORST:
    return
  import json
  worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
  os.makedirs(report_dir, exist_ok=True)
  with open(os.path.join(report_dir, f"worst-{worker}.json"), "w") as f:
    json.dump(dict(sorted(strategies.WORST.items())), f, indent=1)


import pytest  # noqa: E402

# XLA:CPU keeps ~200 memory mappings per compiled executable; a test worker that compiles hundreds
# of functions passes the kernel's vm.max_map_count (65,530 here) and the next compile segfaults
# inside LLVM. Drop JAX's compiled code between tests once a worker holds more than this many.
_MAX_MEMORY_MAPS = 30_000


@pytest.fixture(autouse=True)
def _bounded_compiled_code():
  try:
    with open("/proc/self/maps") as maps:
      count = sum(1 for _ in maps)
  except OSError:
    count = 0
  if count > _MAX_MEMORY_MAPS:
    import jax  # pylint: disable=g-import-not-at-top
    jax.clear_caches()
  yield
