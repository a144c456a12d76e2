"""The tests outside the default run for time: `python -m pytest -m extended` runs them, and `.ci/run`
runs them after the default command (job 1; jobs 2 and 3 run `tests/lib/` with its extended tests).

The guide's budget for the default command (README) is 10 minutes on 2 cores. A first run compiles
every program, and its time is a long tail: on one 2-core AMD EPYC (2026-12-07, cold XLA cache, the
tests' LLVM at level 0) the 2,551 default tests took 2,857 CPU-seconds, 1,266 of them in the 139
listed here, each of which took 3 s or more. Without them a cold default run took 13 min 53 s
there (from 24 min 32 s; part of their compiling moves to the tests that stay), and the 139 took
11 min 10 s. Later the same day a cold default run took 12 min 28 s, and 9 min 50 s with every
program in the persistent cache (tests/conftest.py; part of that is the host's speed, which moved by
tens of percent over the day); on slower hours it read 10 min 19 s and 10 min 00 s (the same tests
took 7 % and 10 % longer), so more moved here: every eager and `pmap` twin of a jitted library test
(`twins`, 96 tests), the nine recorded digits runs, two harness tests whose module fixtures train
runs (a grain run's refused resume, the best-epoch report) and mr2_loss's `pmap` tests at K > B:
the 2,464 left took 10 min 29 s cold on an hour when the tests they share with the 9 min 50 s run
took 22 % longer (1,199 against 983 CPU-seconds), about 8 min 36 s at that run's speed. (2,434 once
the per-entry checks of the `_TWINS` entries that `twins` covers went; on a faster hour of the same
host a fresh checkout's cold default run took 6 min 43 s and 6 min 47 s.)
They are of four kinds, each with the path it exercises still in the default run:

- `_HARNESS`: end-to-end trainer runs (the nine recorded digits runs of
  tests/harness/test_harness_runs.py among them: most trainer hooks then train end to end only in
  the extended run), input pipelines, studies and the larger property
  examples of the harness. The default run keeps the trainer's CE run under jit, pmap and
  shard_map, the single-run summary test, the recorded runs' tolerance and comparison checks, and
  every harness test that took under 3 s.
- `twins` (a rule, not a list) and `_TWINS`: the eager (`__without_jit`) and `pmap` twins of
  library tests whose `__with_jit` twin stays in the default run; `_TWINS` lists the one such twin
  whose name is not chex.variants' and so escapes the rule.
- `_LIBRARY`: library checks of one more mode (the tiled representation margin under `shard_map`:
  tests/lib/test_sharding_modes.py keeps mr2_loss under `shard_map`; the balanced centring's
  property: its float64 reference tests stay; mr2_loss under `pmap` at K > B: the default run keeps
  it at K ≤ B).
- `_TOOLS`: the operational scripts' end-to-end runs (a chain on the lent machine, a park).

Entries are the starts of node ids below `tests/` (a parametrised test's whole id, or its start);
each must name a test file and a test function in it (tests/test_extended.py). To review the list
after tests change: `python -m pytest -n 2 -q --durations=0 > LOG`, then `python -m tests.extended
LOG` lists the default run's tests of 3 s or more that are not here.
"""

import re

_HARNESS = (
    "harness/benchmarks/test_run.py::test_against_imports_each_tree_as_its_own_version_and_times_the_same_batch",
    "harness/benchmarks/test_run.py::test_against_times_the_floors_apart_from_the_calls",
    "harness/common/test_cli.py::test_help_lists_the_flags_with_their_help",
    "harness/common/test_xla_cpu.py::test_configure_before_jax_starts",
    "harness/configs/test_configs.py::test_recipe_runs_end_to_end_on_mock_cifar10[cifar10_lt-inverse_reweight-small_cnn]",
    "harness/configs/test_configs.py::test_recipe_runs_end_to_end_on_mock_cifar10[cifar10_lt_glmc_reweight-",
    "harness/configs/test_paper_configs.py::test_cifar100_lt_runs_on_mock_tfds",
    "harness/configs/test_paper_configs.py::test_config_runs_on_its_fixture_and_resumes_exactly[imagenet_lt-inverse_reweight]",
    "harness/configs/test_schema.py::test_the_parked_run_resumes_from_its_checkpoint",
    "harness/data/test_augmentations.py::test_hsv_conversions_and_hue_adjustment_equal_pillow",
    "harness/data/test_data.py::test_cifar10_jpeg_loads_from_shared_data",
    "harness/data/test_device_crop_flip.py::test_a_digits_run_trains_the_same_losses_with_the_input_on_the_device",
    "harness/data/test_input_pipeline.py::test_a_saved_input_position_that_does_not_match_the_step_is_refused",
    "harness/data/test_input_pipeline.py::test_grain_resumes_from_its_saved_state[2]",
    "harness/data/test_input_pipeline.py::test_grain_run_resumed_from_its_checkpoint_equals_the_numpy_run",
    "harness/data/test_input_pipeline.py::test_grain_workers_decode_a_lazy_image_folder",
    "harness/data/test_input_pipeline.py::test_grain_workers_exit_when_the_trainer_is_killed",
    "harness/data/test_input_pipeline.py::test_the_numpy_pipeline_runs_without_grain_installed",
    "harness/methods/test_jtt.py::test_jtt_upsamples_the_stage1_error_set",
    "harness/methods/test_methods.py::test_a_new_method_is_one_module_and_trains_through_the_unchanged_trainer",
    "harness/methods/test_properties_registry.py::test_baselines_where",
    "harness/methods/test_properties_registry.py::test_inverse_reweighted_loss[reference]",
    "harness/methods/test_properties_registry.py::test_inverse_reweighted_loss[stop_gradient_no_clip]",
    "harness/methods/test_properties_registry.py::test_mr2_loss_padding_permutation_devices[paper]",
    "harness/methods/test_properties_registry.py::test_mr2_loss_padding_permutation_devices[released]",
    "harness/methods/test_properties_registry.py::test_registry_entry[mr2+inverse_reweight]",
    "harness/methods/test_properties_registry.py::test_registry_entry[mr2[tiled]]",
    "harness/methods/test_properties_registry.py::test_registry_entry[mr2[uniform_margin]]",
    "harness/methods/test_properties_registry.py::test_registry_entry_sharded[mr2+inverse_reweight]",
    "harness/methods/test_properties_registry.py::test_registry_entry_sharded[mr2[tiled]]",
    "harness/methods/test_properties_registry.py::test_registry_entry_sharded[mr2]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[balanced_softmax+inverse_reweight-",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[eql+inverse_reweight-reweight.alpha]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[focal+inverse_reweight-reweight.alpha]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[glmc+inverse_reweight-reweight.alpha]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[inverse_reweight-reweight.alpha]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[ldam+inverse_reweight-reweight.alpha]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[logit_adjust+inverse_reweight-",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[mr2+inverse_reweight-mr2.lam]",
    "harness/methods/test_registry.py::test_a_traced_value_of_a_traceable_field_gives_the_static_values_loss[mr2-mr2.lam]",
    "harness/methods/test_registry.py::test_an_entry_depends_on_the_mix_exactly_where_its_method_says_it_reads_it[etf_dr+inverse_reweight]",
    "harness/methods/test_registry.py::test_an_entry_depends_on_the_mix_exactly_where_its_method_says_it_reads_it[inverse_reweight]",
    "harness/methods/test_registry.py::test_deferred_gradient_is_the_before_entrys_gradient",
    "harness/methods/test_registry.py::test_entry_before_and_after_its_start[balanced_softmax-False]",
    "harness/methods/test_registry.py::test_entry_before_and_after_its_start[mr2+inverse_reweight-True]",
    "harness/methods/test_registry.py::test_l2_features_are_what_mr2_reads_against_the_float64_reference[mr2+inverse_reweight]",
    "harness/methods/test_registry.py::test_l2_features_are_what_mr2_reads_against_the_float64_reference[mr2]",
    "harness/methods/test_registry.py::test_out_of_range_label_is_nan_and_counted_in_no_class_under_jit[inverse_reweight]",
    "harness/models/pretrained/test_efficientnet_lite.py::test_parameter_count_and_shapes",
    "harness/models/pretrained/test_efficientnet_lite.py::test_pretrained_weights_match_torch_reference",
    "harness/models/pretrained/test_torch_state_dict.py::test_a_classifier_that_does_not_fit_is_left_out[10-",
    "harness/models/pretrained/test_weights.py::test_encoder_variables_are_the_files_but_the_head",
    "harness/models/test_resnet50.py::test_bfloat16_body_keeps_float32_parameters_features_and_logits",
    "harness/models/test_vit.py::test_bfloat16_blocks_give_float32_features_close_to_float32",
    "harness/models/test_vit.py::test_mr2_lp_path_runs_with_the_cosine_head[paper_p3]",
    "harness/models/test_zoo.py::test_cosine_scale_is_passed_through",
    "harness/models/test_zoo.py::test_output_shapes[small_cnn-shape1-128-linear]",
    "harness/models/test_zoo.py::test_output_shapes[small_cnn-shape2-128-linear]",
    "harness/report/test_best_epoch.py::test_each_epoch_logs_the_test_accuracy_and_the_last_is_the_final_evaluation",
    "harness/report/test_best_epoch.py::test_the_report_adds_the_labelled_best_epoch_column_beside_the_final_epoch",
    "harness/report/test_diagnosis.py::test_every_number_against_float64_reference",
    "harness/report/test_nc_centring.py::test_a_run_records_both_centrings_and_the_report_shows_them",
    "harness/report/test_nc_centring.py::test_floors_are_the_metrics_of_an_exact_collapse[counts0]",
    "harness/report/test_nc_centring.py::test_floors_are_the_metrics_of_an_exact_collapse[counts1]",
    "harness/report/test_nc_centring.py::test_floors_are_the_metrics_of_an_exact_collapse[counts2]",
    "harness/studies/test_export_variables.py::test_an_exported_run_carries_its_final_model_variables",
    "harness/studies/test_linear_probe.py::test_study_trains_each_row_through_the_trainer",
    "harness/studies/test_probe_comparison.py::test_adapter_setting_trains_supcon_on_the_stored_flipped_view",
    "harness/studies/test_probe_comparison.py::test_study_runs_jtt_after_its_stage1_run_and_writes_the_tables",
    "harness/studies/test_probe_comparison.py::test_tune_scores_on_validation_and_records_the_choice",
    "harness/test_harness_runs.py::test_run_trains_as_recorded_within_the_cross_cpu_tolerance",
    "harness/train/test_evaluation.py::test_logged_training_metrics_are_window_means",
    "harness/train/test_evaluation.py::test_one_pass_evaluation_equals_numpy[cosine-shard_map-8]",
    "harness/train/test_evaluation.py::test_one_pass_evaluation_equals_numpy[linear-jit-8]",
    "harness/train/test_faults.py::test_damaged_latest_checkpoint_names_the_step_and_falls_back_on_request[bit_flip]",
    "harness/train/test_faults.py::test_damaged_latest_checkpoint_names_the_step_and_falls_back_on_request[truncated]",
    "harness/train/test_faults.py::test_data_read_once_survives_deletion_and_a_resume_names_the_missing_file",
    "harness/train/test_faults.py::test_full_disk_while_writing_metrics_is_a_clear_error_and_checkpoints_stay",
    "harness/train/test_faults.py::test_interrupted_checkpoint_write_is_never_read",
    "harness/train/test_faults.py::test_nan_stops_the_run_naming_step_classes_and_last_good_checkpoint[12-checkpoint]",
    "harness/train/test_faults.py::test_nan_stops_the_run_naming_step_classes_and_last_good_checkpoint[9-log]",
    "harness/train/test_frozen_encoder.py::test_the_pretrained_run_trained_its_encoder",
    "harness/train/test_init_from.py::test_deferred_run_from_the_switch_equals_the_uninterrupted_run",
    "harness/train/test_init_from.py::test_source_run_keeps_its_switch_epoch_checkpoint",
    "harness/train/test_loop.py::test_a_run_written_before_new_config_fields_resumes_and_a_changed_one_does_not",
    "harness/train/test_loop.py::test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides3-/nonexistent/mnist]",
    "harness/train/test_loop.py::test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides4-index 0]",
    "harness/train/test_loop.py::test_bad_config_or_data_is_one_line_and_keeps_checkpoints[overrides7-",
    "harness/train/test_loop.py::test_class_loss_every_epochs_logs_training_set_class_loss_rho_and_nc",
    "harness/train/test_loop.py::test_evaluation_counts_every_test_example_in_a_relative_workdir",
    "harness/train/test_loop.py::test_the_loop_starts_and_resumes_under_pmap",
    "harness/train/test_loop.py::test_two_view_entry_over_8_devices_equals_one_device",
    "harness/train/test_precision.py::test_bf16_statistics_and_losses_agree_with_float32[small_cnn]",
    "harness/train/test_seed_axis.py::test_a_seed_more_than_one_save_ahead_is_refused_before_anything_is_deleted",
    "harness/train/test_seed_axis.py::test_compare_trains_a_methods_seeds_stacked_with_a_deferred_method",
    "harness/train/test_seed_axis.py::test_input_on_device_trains_the_same_stacked_numbers",
    "harness/train/test_seed_axis.py::test_resume_after_a_kill_between_the_seeds_checkpoints_continues_exactly",
    "harness/train/test_seed_axis.py::test_three_stacked_seeds_equal_the_three_solo_runs[mr2]",
    "harness/train/test_seed_axis_sweep.py::test_a_sweep_of_three_values_equals_the_three_solo_runs[mr2-mr2__lam-values0]",
    "harness/train/test_seed_axis_sweep.py::test_a_sweep_with_seeds_and_two_fields_records_each_members_values",
    "harness/train/test_seed_axis_sweep.py::test_compare_trains_a_sweep_as_members_the_report_reads_as_runs",
    "harness/train/test_seed_axis_sweep.py::test_the_cli_refuses_a_field_not_traceable_in_one_line_before_any_run",
)

_TWINS = (
    "lib/reweight_jax/test_mixed_labels.py::ValueStateGradientTest::test_steps_match_reference_stop_gradient_without_jit",
)

_LIBRARY = (
    "lib/mr2_jax/test_objective.py::DataParallelTest::test_pmap_equals_single_device_k_gt_global_batch_paper",
    "lib/mr2_jax/test_objective.py::DataParallelTest::test_pmap_equals_single_device_k_gt_global_batch_released",
    "lib/mr2_jax/test_representation_margin.py::TiledTest::test_shard_map_value_and_gradient_equal_single_device",
    "lib/reweight_jax/test_neural_collapse.py::test_property_balanced_centring_matches_the_reference",
)

_TOOLS = (
    "tools/test_accelerator_runs.py::test_deadline_stops_the_running_chains_and_skips_the_queued",
    "tools/test_accelerator_runs.py::test_end_to_end_one_tiny_chain_comes_back_packed",
    "tools/test_accelerator_runs.py::test_the_plan_stops_the_chains_that_do_not_fit_and_starts_the_fill",
    "tools/test_standard_size.py::test_park_keeps_a_finished_reference_while_its_seed_has_methods_to_train",
    "tools/test_standard_size.py::test_park_then_unpark_then_delete_when_finished",
)

EXTENDED = _HARNESS + _TWINS + _LIBRARY + _TOOLS

# chex.variants' suffixes: every eager or `pmap` twin of a library test whose `__with_jit` twin is
# collected goes with the listed ones, whatever its time (`twins`).
_WITH_JIT = "__with_jit"
_OTHER_VARIANTS = ("__without_jit", "__with_pmap")
# pytest's node ids start with the path from the root folder; a listed test's id starts with one.
NODE_IDS = tuple("tests/" + entry for entry in EXTENDED)

# Long harness tests that stay in the default run on purpose (the docstring says why).
KEPT = (
    "harness/train/test_loop.py::test_every_loss_trains_under_jit_pmap_and_shard_map_with_the_same_result[ce]",
    "harness/train/test_loop.py::test_train_and_evaluate_writes_summary_metrics_and_history",
)
SECONDS = 3.0  # a test's setup + call + teardown in a first run, at which it becomes a candidate
_TWIN = re.compile("|".join(_OTHER_VARIANTS) + r"|_without_jit$")
_DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+tests/(\S.*?)\s*$")


def twins(node_ids) -> set[str]:
  """The node ids (from the root folder) of the library tests' eager and `pmap` twins (chex.variants'
  `__without_jit` / `__with_pmap`) whose `__with_jit` twin is among `node_ids`: the default run keeps
  that one."""
  node_ids = set(node_ids)
  found = set()
  for node in node_ids:
    if not node.startswith("tests/lib/"):
      continue
    head, bracket, params = node.partition("[")
    for suffix in _OTHER_VARIANTS:
      if head.endswith(suffix) and (head[:-len(suffix)] + _WITH_JIT + bracket + params) in node_ids:
        found.add(node)
  return found


def durations(log: str) -> dict[str, float]:
  """Each test's seconds (setup + call + teardown) from the output of `pytest --durations=0`,
  keyed by its node id below `tests/`."""
  seconds: dict[str, float] = {}
  for line in log.splitlines():
    match = _DURATION.match(line)
    if match:
      seconds[match.group(2)] = seconds.get(match.group(2), 0.0) + float(match.group(1))
  return seconds


def candidates(log: str, seconds: float = SECONDS) -> list[str]:
  """The tests of a default run's `--durations=0` log that the rule above would list and that are
  not listed: harness and tools tests, and the eager or `pmap` twins of library tests, of `seconds`
  or more, except `KEPT`; longest first."""
  found = durations(log)
  return sorted((node for node, time in found.items()
                 if time >= seconds and not node.startswith(EXTENDED + KEPT)
                 and (node.startswith(("harness/", "tools/"))
                      or (node.startswith("lib/") and _TWIN.search(node.split("[")[0])))),
                key=lambda node: -found[node])


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  with open(sys.argv[1]) as log_file:
    text = log_file.read()
  seconds_of = durations(text)
  for node in candidates(text):
    print(f"{seconds_of[node]:6.1f} s  {node}")
