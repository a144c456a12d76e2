"""experiments.benchmarks (the sections of `run` and their helpers): the timed functions compute what
they claim (timings are not tested)."""

import json
import sys

import jax
import numpy as np
import pytest

import mr2_jax
from experiments.benchmarks import loss_scaling
from experiments.benchmarks import machine
from experiments.benchmarks import released_form
from experiments.benchmarks import report
from experiments.benchmarks import tables
from experiments.benchmarks import timing


def test_loss_fns_per_call_and_loop_agree():
  # The per-call function is the library's loss; the looped variant runs the same loss `loop` times
  # with the carried statistics, so both are benchmarks of the real thing.
  fns, labels = loss_scaling._loss_fns(batch=32, dim=8, classes=5, loop=3)
  fn, args, looped = fns["mr2"]
  value, new_stats, grads = fn(*args)
  stats = args[0]
  total = 0.0
  for _ in range(3):
    v, stats, g = fn(stats, *args[1:])
    total += float(v) + 1e-12 * sum(float(np.sum(x)) for x in jax.tree.leaves(g))
  loop_stats, loop_total = looped()
  np.testing.assert_allclose(loop_total, total, rtol=1e-5)
  np.testing.assert_allclose(loop_stats.mean_sq_deviation, stats.mean_sq_deviation, rtol=1e-5)
  expected, _, _ = mr2_jax.mr2_loss(args[1], args[2], labels, args[0])
  np.testing.assert_allclose(value, expected, rtol=1e-6)
  fn, args, looped = fns["inverse_reweight"]
  value, new_state, _ = fn(*args)
  assert np.isfinite(value) and float(np.sum(new_state.batch_counts)) > 0


def test_interleaved_and_summary():
  calls = []
  times = timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                             rounds=2, per_round=2, block=lambda x: x)
  assert calls == ["a", "a", "b", "b", "a", "a", "b", "b"]
  assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4}
  calls.clear()
  timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                     rounds=1, per_round=1, block=lambda x: x, warmup=2)
  assert calls == ["a", "a", "b", "b", "a", "b"]
  summary = timing.summarize_times([0.001, 0.003, 0.002])
  assert summary == {"median_ms": pytest.approx(2.0), "min_ms": pytest.approx(1.0),
                     "max_ms": pytest.approx(3.0), "n": 3}


def test_time_calls_warms_up_then_blocks_inside_each_timed_call():
  results, blocked = [], []
  seconds = timing.time_calls(lambda: results.append(len(results)) or len(results), 3, warmup=2,
                              block=blocked.append)
  assert blocked == [1, 2, 3, 4, 5] and len(seconds) == 3 and all(s >= 0 for s in seconds)
  # The default block waits for JAX's asynchronous result (and passes any other one through).
  assert len(timing.time_calls(lambda: jax.numpy.ones(3) + 1, 2)) == 2
  assert timing.time_calls(lambda: None, 0, warmup=0) == []


def test_markdown_has_every_section():
  row = {"median_ms": 2.0, "min_ms": 1.0, "max_ms": 3.0, "n": 3}
  results = {
      "machine": {"cpu": "cpu", "cores": 2, "jax": "x", "flax": "y", "xla_flags": "", "date": "d"},
      "overhead": {"rows": {"ce": {**row, "ratio_to_ce": 1.0, "ratio_per_round_min": 1.0,
                                   "ratio_per_round_max": 1.0}}},
      "scaling": {"rows": [{"loss": "mr2", "batch": 128, "dim": 64, "classes": 10, "per_call": row,
                            "in_loop": row, "authors_pytorch_ms": 3.0, "speedup_per_call": 1.5,
                            "speedup_in_loop": 1.5}]},
      "neural_collapse": {"examples": 10, "dim": 2, "classes": 2, "features_mb": 0.1, "rows": {
          "one_shot": {**row, "peak_mb": 1, "added_peak_mb": 1},
          "streaming": {**row, "peak_mb": 1, "added_peak_mb": 1}, "max_relative_difference": 0}},
      "compile": {"rows": {"ce": {"trace_lower_s": 1, "compile_s": 1, "first_step_s": 1,
                                  "total_to_first_step_s": 3, "steady_step_ms": 700,
                                  "startup_in_steps": 4.3}}},
      "cpu_gap": {"rows": {"jax_tuned_flags": {**row, "speed_vs_pytorch": 0.6}},
                  "profiles_ms_per_step": {"jax_tuned_flags": {"ynn_fusion": 3.0}}},
  }
  markdown = tables.to_markdown(results)
  for title in ("Overhead", "Scaling", "Neural-Collapse", "Compile time", "CPU gap"):
    assert f"### {title}" in markdown
  assert "| mr2 | 128 | 64 | 10 | 2.00 (1.00–3.00) | 2.00 (1.00–3.00) | 3 | 1.5× / 1.5× |" in markdown
  results["machine"]["speed_probe"] = {"numpy_matmul_gflops": 120.4, "copy_gb_per_s": 14.46}
  assert "Speed probe: NumPy matmul 120 GFLOP/s, copy 14.5 GB/s." in tables.to_markdown(results)


def test_machine_speed_probe_reads_positive_rates():
  probe = machine.machine_speed(repeats=2)
  assert set(probe) == {"numpy_matmul_gflops", "copy_gb_per_s"}
  assert all(0 < v < 1e5 for v in probe.values())


def test_input_throughput_reads_its_imagenet_sized_jpegs_at_224(tmp_path):
  from experiments.data import loading  # pylint: disable=g-import-not-at-top
  from experiments.benchmarks import input_throughput  # pylint: disable=g-import-not-at-top
  input_throughput.write_images(tmp_path, 3, classes=2)
  split = loading.load_split("imagenet_lt", "train", tmp_path)
  assert len(split) == 3 and split.images.shape == (3, 224, 224, 3)
  assert split.images[np.array([2])].std() > 10  # decoded pixels, not a blank


def test_released_form_variants_are_each_a_different_program_with_the_same_result():
  """Each "(before)" variant of the released-form benchmark must still change the compiled step
  (a patch whose target the code no longer calls would time the current code under an old name)
  and compute the same loss, statistics and gradients. K > B and ℓ_s̄ tiled (its work threshold
  lowered), so that every patched path — the class-sorted statistics, the prefix — is taken."""
  from unittest import mock
  from mr2_jax import representation_margin_forms
  with mock.patch.object(representation_margin_forms, "TILED_MIN_WORK", 0):
    variants = released_form.released_form_variants(64, 24, 200)
  _, current, args = variants["mr2_released"]
  expected = jax.tree.leaves(current(*args))
  texts = {name: fn.as_text() for name, (_, fn, _) in variants.items()}
  assert set(variants) == {"mr2", "mr2_released", "mr2_released_float_power",
                           "mr2_released_autodiff_ce", "mr2_released_two_pass_ce",
                           "mr2_released_slot_sums", "mr2_released_all_rows"}
  for name, (_, fn, fn_args) in variants.items():
    if name == "mr2_released":
      continue
    assert texts[name] != texts["mr2_released"], name
    if name != "mr2":
      for got, want in zip(jax.tree.leaves(fn(*fn_args)), expected):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6, err_msg=name)


def test_steal_share_from_two_proc_stat_snapshots(tmp_path):
  """Stolen share = Δsteal / Δ(user … steal), from /proc/stat's first line."""
  stat = tmp_path / "stat"
  stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
  start = timing.cpu_ticks(str(stat))
  assert start == (35, 1000)
  stat.write_text("cpu  160 0 70 900 10 0 5 95 0 0\n")  # +60 user, +20 system, +100 idle, +60 steal
  assert timing.steal_share(start, str(stat)) == 60 / 240
  assert timing.cpu_ticks(str(tmp_path / "missing")) is None
  assert timing.steal_share(None, str(stat)) is None


def test_write_report_prints_and_writes_json_and_markdown(tmp_path, capsys):
  lines = ["| a | b |", "|---|---|", "| 1 | 2 |"]
  report.write_report(None, "x", {"a": 1}, lines)
  assert capsys.readouterr().out == "\n".join(lines) + "\n"
  assert not list(tmp_path.iterdir())
  report.write_report(str(tmp_path / "out"), "x", {"a": 1.5}, lines)
  assert json.loads((tmp_path / "out" / "x.json").read_text()) == {"a": 1.5}
  assert (tmp_path / "out" / "x.md").read_text() == "\n".join(lines) + "\n"


def test_against_imports_each_tree_as_its_own_version_and_times_the_same_batch():
  # This checkout twice: each import is a version of its own (its own module objects), and
  # `sys.modules` keeps the checkout's; both time the same functions on the same batch.
  from experiments.benchmarks import loss_against
  before = {name: module for name, module in sys.modules.items() if name.startswith("mr2_jax")}
  first, second = (loss_against.import_version(timing.REPO) for _ in range(2))
  assert first["mr2_jax"] is not second["mr2_jax"] and first["mr2_jax"] is not mr2_jax
  assert {n: m for n, m in sys.modules.items() if n.startswith("mr2_jax")} == before
  result = loss_against.bench_against({"a": str(timing.REPO), "b": str(timing.REPO)},
                                      sizes=[(8, 4, 3)], rounds=3, loop_rounds=2)
  assert [row["loss"] for row in result["rows"]] == ["mr2", "mr2_released", "inverse_reweight"]
  for row in result["rows"]:
    assert row["versions"]["a"]["values"] == row["versions"]["b"]["values"]
    assert row["versions"]["b"]["per_call"]["n"] == 3 and row["versions"]["b"]["in_loop"]["n"] == 2
    assert row["versions"]["a"]["per_call"]["paired_ratio_median"] == 1.0
    assert row["versions"]["b"]["floor"]["n"] == 3  # the no-op of the same signature, same rounds
  markdown = tables.to_markdown({"machine": {"cpu": "x", "cores": 2, "jax": "0", "flax": "0",
                                             "xla_flags": "", "date": "d"}, "against": result})
  assert "| mr2 | 8 | 4 | 3 |" in markdown and "Largest relative difference" in markdown
  assert "call floor" in markdown and "b above" in markdown


def test_against_times_the_floors_apart_from_the_calls(monkeypatch):
  # In one alternation with the calls, the version called next to the floors followed a call that
  # computes nothing and read slower than the same code elsewhere: every alternation holds one
  # callable per version, calls and floors never mixed.
  from experiments.benchmarks import loss_against
  lengths = []
  alternated = loss_against._alternated

  def recording(calls, rounds):
    lengths.append(len(calls))
    return alternated(calls, rounds)

  monkeypatch.setattr(loss_against, "_alternated", recording)
  result = loss_against.bench_against({"a": str(timing.REPO), "b": str(timing.REPO)},
                                      sizes=[(8, 4, 3)], rounds=2, loop_rounds=0)
  assert len(result["rows"]) == 3 and lengths == [2] * 6  # calls, then floors, per loss
