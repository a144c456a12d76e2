"""Test setup: 8 fake CPU devices for pmap tests (must be set before JAX initialises its backend)."""

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
# The tests compile thousands of small programs and run each a few times: LLVM's optimisation of
# the generated code is much of a cold run's time. Level 0 takes 14–19 % off a cold run of a test
# file (tests/lib/test_bad_rows.py 95 → 78 s, tests/harness/train/test_seed_axis_sweep.py
# 112 → 97 s, one process, 2 cores) and the default command's first run from 54 to 43 CPU-minutes
# (36 to 25 minutes on 2 cores; 2026-12-07, AMD EPYC). XLA's HLO passes, which decide the
# arithmetic, run as before (the optimised HLO of the benchmark's mr2_loss and reweighting steps at
# B = 512, d = 64, K = 100 is the same text at both levels). MR2_JAX_TEST_OPTIMIZE=1 (CI's
# built-wheel job) compiles as a user's program does.
if (os.environ.get("MR2_JAX_TEST_OPTIMIZE") != "1"
    and "--xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]):
  os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import tempfile  # noqa: E402

import chex  # noqa: E402
import jax  # noqa: E402

chex.set_n_cpu_devices(8)

# XLA's persistent compilation cache, shared by the test processes (and kept between runs on one
# machine; entries are keyed by the compiled program, so a changed function never hits a stale one):
# many tests compile the same step or loss again (other closures, other workers), ≈ 13 % of the
# default run measured on tests/harness/methods/test_registry.py + tests/lib/mr2_jax/test_representation_margin.py.
# Every program is kept, however short its compile: the eager tests' primitives and the small
# programs recur across tests and workers (tests/lib/mr2_jax + test_bad_rows.py, 2 workers, cold:
# 158 → 153 s, 166 → 2,633 entries, 20 MB). Tried and not kept: XLA:CPU's LLVM IR emitters in place
# of its MLIR fusion emitters (--xla_cpu_use_fusion_emitters=false) halve a small program's compile
# and took the default command's cold run to 7 min 01 s (2026-12-07), but three bit-exact resume
# checks of the extended run then fail (a grain run resumed against the NumPy run, a deferred run
# from its switch checkpoint, the seeds stacked with the input on the device).
jax.config.update("jax_compilation_cache_dir", os.environ.get(
    "MR2_JAX_TEST_XLA_CACHE", os.path.join(tempfile.gettempdir(), "mr2_jax_test_xla_cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

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

# Parametrisations moved to the slow run to keep the default run under 10 minutes on 2 cores (the
# README's test command); each has a sibling in the default run that exercises the same code path
# (named here). Node-id substrings. (A product of parameters keeps its covering subset in the default
# run instead, every value of every axis once: tests/covering.py.)
SHARDED_KEPT = "test_registry_entry_sharded of ce, mr2, inverse_reweight, group_dro, fairdro"
MOVED_TO_SLOW = {
    # representation margin's tiled form: the default run keeps the exact and the one-class tiles
    # and the shard_map test; the property tests force the tiled form too (mr2[tiled]).
    "TiledTest::test_matches_reference_dense_just_over_16": "band4_exact, one_class",
    "TiledTest::test_matches_reference_tile8_just_over_4": "band4_exact, one_class",
    "TiledTest::test_matches_reference_tile16_exact": "band4_exact, one_class",
    "TiledTest::test_matches_reference_tile16_just_over_8": "band4_exact, one_class",
    "TiledTest::test_matches_reference_tile8_exact": "band4_exact, one_class",
    "TiledTest::test_matches_reference_singletons_and_pairs": "band4_exact, one_class",
    "TiledTest::test_hand_written_gradient_matches_float64_analytic_gradient_dense_small_work":
        "…_dense_past_the_tiles",
    # the same numerics eagerly and under jit: the default run keeps the jitted cases.
    "Mr2LossTest::test_matches_reference_one_sample_classes__without_jit": "__with_jit",
    "Mr2LossTest::test_matches_reference_one_class_batch__without_jit": "__with_jit",
    "Mr2LossTest::test_matches_reference_absent_classes__without_jit": "__with_jit",
    "Mr2LossTest::test_matches_reference_k_greater_than_b__without_jit": "__with_jit",
    "test_steps_match_reference_alpha_inv_freq_clip_binds_without_jit": "the jitted cases",
    "SupConTest::test_padding_rows_change_nothing__without_jit": "__with_jit",
    "LfFTest::test_replays_an_index_sequence__without_jit": "__with_jit",
    # trainer and model runs whose path another default test takes
    "test_every_loss_trains_under_jit_pmap_and_shard_map_with_the_same_result[mr2+":
        "[ce] and the property tests' 2/4/8-device splits of the registry entry",
    "test_fairdro_q_is_the_best_response_to_the_training_pass_after_an_epoch":
        "tests/harness/methods/test_registry.py::test_epoch_end_hook_sets_fairdro_q_from_the_training_pass",
    "test_tiny_wide_resnet_forward": "test_wrn28_10_parameter_count_and_shapes",
    "test_one_pass_evaluation_equals_numpy[linear-none-1]": "[cosine-none-1], [linear-pmap-8]",
    "test_adapter_step_is_ce_on_both_views_plus_lambda_supcon": "tests/lib/reweight_jax/baselines/test_supcon.py",
    "test_loss_fns_per_call_and_loop_agree": "the benchmark itself compares them",
    "test_released_form_variants_are_each_a_different_program_with_the_same_result":
        "the benchmark itself compares them (104 s of the default run on 2 cores)",
    "test_bf16_trainer_run_finishes_with_a_finite_summary": "test_bf16_statistics_and_losses_...",
    "test_a_classifier_that_does_not_fit_is_left_out[7-linear": "[10-cosine], [10-etf]",
    "test_mr2_lp_path_runs_with_the_cosine_head[released_p5]": "[paper_p3]",
    "test_a_classifier_that_does_not_fit_is_left_out[10-cosine": "[10-etf]",
    "test_one_pass_evaluation_equals_numpy[cosine-none-1]": "[linear-pmap-8], [cosine-shard_map-8]",
    "Mr2LossTest::test_matches_reference_large_k_small_b__without_jit": "__with_jit",
    "Mr2LossTest::test_matches_reference_random__without_jit": "__with_jit",
    "Mr2LossTest::test_per_example_terms_match_reference__without_jit": "__with_jit",
    "RepresentationMarginTest::test_where_masks_anchors_and_positives__without_jit": "__with_jit",
    "RepresentationMarginTest::test_matches_reference_random__without_jit": "__with_jit",
    "UpdateClassStatsTest::test_matches_reference_one_sample_classes__without_jit": "__with_jit",
    "test_one_pass_evaluation_equals_numpy[linear-pmap-8]": "[cosine-shard_map-8]",
    # one-line CLI errors: config checks of the same kind as the kept unknown-loss and
    # different-config cases (each case is a CLI subprocess)
    "test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides1-": "[overrides0-…]",
    "test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides2-": "[overrides0-…]",
    "test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides5-": "[overrides0-…]",
    "test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides6-": "[overrides0-…]",
    "test_axis_name_averages_batch_statistics_across_devices":
        "the trainer's 8-device = 1-device tests (BatchNorm over devices)",
    # the 2/4/8-device split of registry entries that share their reduction with a kept one (the
    # weighted CE's, the per-batch mean's, MR2's); all in the slow twins at 1,000 examples.
    "test_registry_entry_sharded[inv_freq]": SHARDED_KEPT,
    "test_registry_entry_sharded[class_balanced]": SHARDED_KEPT,
    "test_registry_entry_sharded[focal]": SHARDED_KEPT,
    "test_registry_entry_sharded[ldam]": SHARDED_KEPT,
    "test_registry_entry_sharded[ldam_drw]": SHARDED_KEPT,
    "test_registry_entry_sharded[logit_adjust]": SHARDED_KEPT,
    "test_registry_entry_sharded[balanced_softmax]": SHARDED_KEPT,
    "test_registry_entry_sharded[ib]": SHARDED_KEPT,
    "test_registry_entry_sharded[eql]": SHARDED_KEPT,
    "test_registry_entry_sharded[group_dro[adjusted]]": SHARDED_KEPT,
    "test_registry_entry_sharded[mr2[released]]": SHARDED_KEPT,
    "test_registry_entry_sharded[mr2[lam=0]]": SHARDED_KEPT,
    "test_registry_entry_sharded[mr2[uniform_margin]]": SHARDED_KEPT,
    "test_registry_entry_sharded[inverse_reweight[stop_gradient]]": SHARDED_KEPT,
    # the inverse reweighting around the methods no earlier registry wrapped: the value before and
    # after the start stays in the default run ([…-True]); the eager twin, the out-of-range label
    # (the wrapper's guard: [inverse_reweight], the rows' guard: the method's own) and the mix
    # reads (the method's own, and [inverse_reweight]) are slow.
    **{f"{test}[{base}+inverse_reweight{suffix}]": sibling
       for base in ("balanced_softmax", "eql", "focal", "jtt", "ldam", "logit_adjust")
       for test, suffix, sibling in (
           ("test_entry_before_and_after_its_start", "-False", "[…-True]"),
           ("test_out_of_range_label_is_nan_and_counted_in_no_class_under_jit", "",
            "[inverse_reweight] and the method's own"),
           ("test_an_entry_reads_the_mix_exactly_when_it_says_so_and_then_uses_it", "",
            "[inverse_reweight] and the method's own"))},
    # a wrapped method's step traced from its config: the default run keeps CE (the plain recipe),
    # GLMC (paired batches, wrapper model), ETF-DR (fixed-classifier wrapper) and MR2 (its check);
    # the other plain-recipe methods trace as CE's does.
    **{f"test_every_method_with_a_per_example_loss_runs_with_the_reweighting_from_the_config"
       f"[{base}]": "[ce], [glmc], [etf_dr], [mr2]"
       for base in ("balanced_softmax", "eql", "focal", "jtt", "ldam", "logit_adjust")},
}


def pytest_collection_modifyitems(config, items):
  del config
  from tests import extended  # pylint: disable=g-import-not-at-top
  twins = extended.twins(item.nodeid for item in items)
  for item in items:
    if any(key in item.nodeid for key in MOVED_TO_SLOW):
      item.add_marker(pytest.mark.slow)
    elif item.get_closest_marker("slow") is None and (item.nodeid.startswith(extended.NODE_IDS)
                                                      or item.nodeid in twins):
      item.add_marker(pytest.mark.extended)

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
