"""The Markdown tables of a run of `experiments.benchmarks.run` (`to_markdown`), one per section."""

from __future__ import annotations

from experiments.benchmarks.loss_scaling import AUTHORS_SOURCES


def _range(row) -> str:
  return f"{row['median_ms']:.2f} ({row['min_ms']:.2f}–{row['max_ms']:.2f})"


def to_markdown(results: dict) -> str:
  lines = [f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; "
           f"JAX {results['machine']['jax']}, flax {results['machine']['flax']}; "
           f"XLA_FLAGS=`{results['machine']['xla_flags']}`; {results['machine']['date']}."]
  probe = results["machine"].get("speed_probe")
  if probe:  # absolute times of different runs compare only alongside it (`machine_speed`)
    lines[0] += (f" Speed probe: NumPy matmul {probe['numpy_matmul_gflops']:.0f} GFLOP/s, "
                 f"copy {probe['copy_gb_per_s']:.1f} GB/s.")
  lines.append("")
  if "overhead" in results:
    lines += ["### Overhead (ResNet-32 train step, batch 128)", "",
              "| method | step ms, median (min–max) | × CE (medians) | × CE per round, min–max |",
              "|---|---|---|---|"]
    for method, row in results["overhead"]["rows"].items():
      lines.append(f"| {method} | {_range(row)} | {row['ratio_to_ce']:.3f} | "
                   f"{row['ratio_per_round_min']:.3f}–{row['ratio_per_round_max']:.3f} |")
    lines.append("")
  if "scaling" in results:
    lines += ["### Scaling (loss + statistics, forward + backward)", "",
              "`mr2` is the paper form (p = 2), `mr2_released` the released form (p = 5, τ = 10·d); "
              "the authors' figures (their released code) stand beside the released form only.", "",
              "| loss | B | d | K | per call, ms | in compiled loop, ms | authors' PyTorch ms | "
              "speed-up per call / in loop |", "|---|---|---|---|---|---|---|---|"]
    for row in results["scaling"]["rows"]:
      authors = (f"{row['authors_pytorch_ms']:g} | {row['speedup_per_call']:.1f}× / "
                 f"{row['speedup_in_loop']:.1f}×") if "authors_pytorch_ms" in row else "– | –"
      lines.append(f"| {row['loss']} | {row['batch']} | {row['dim']} | {row['classes']} | "
                   f"{_range(row['per_call'])} | {_range(row['in_loop'])} | {authors} |")
    lines.append("")
  if "released_form" in results:
    lines += ["### MR2 paper vs released form (loss + statistics, forward + backward, per call)", "",
              "| form | B | d | K | ms, median (min–max) | authors' PyTorch ms (released form) | "
              "speed-up | CPU time stolen while timing |", "|---|---|---|---|---|---|---|---|"]
    for row in results["released_form"]["rows"]:
      authors = (f"{row['authors_pytorch_ms']:g} | {row['speedup_per_call']:.1f}×"
                 if "authors_pytorch_ms" in row else "– | –")
      stolen = row.get("steal_share")
      lines.append(f"| {row['form']} | {row['batch']} | {row['dim']} | {row['classes']} | "
                   f"{_range(row['per_call'])} | {authors} | "
                   f"{'–' if stolen is None else f'{100 * stolen:.0f} %'} |")
    lines += ["", "Authors' figures: " + "; ".join(AUTHORS_SOURCES.values()) + ".", ""]
  if "neural_collapse" in results:
    nc = results["neural_collapse"]
    lines += [f"### Neural-Collapse metrics ({nc['examples']:,} × {nc['dim']}, {nc['classes']} "
              f"classes; the features alone are {nc['features_mb']:.0f} MB)", "",
              "| mode | seconds, median (min–max) | peak RSS MB | added over the peak before "
              "the metrics MB |",
              "|---|---|---|---|"]
    for mode in ("one_shot", "streaming"):
      row = nc["rows"][mode]
      lines.append(f"| {mode} | {row['median_ms'] / 1e3:.2f} ({row['min_ms'] / 1e3:.2f}–"
                   f"{row['max_ms'] / 1e3:.2f}) | {row['peak_mb']:.0f} | {row['added_peak_mb']:.0f} |")
    lines += ["", f"Largest relative difference between the two modes' metrics: "
                  f"{nc['rows']['max_relative_difference']:.2e}.", ""]
  if "compile" in results:
    lines += ["### Compile time (ResNet-32 train step, batch 128)", "",
              "| method | trace + lower s | XLA compile s | first step s | to first step done s | "
              "steady step ms | start-up in steps |", "|---|---|---|---|---|---|---|"]
    for method, row in results["compile"]["rows"].items():
      lines.append(f"| {method} | {row['trace_lower_s']:.2f} | {row['compile_s']:.2f} | "
                   f"{row['first_step_s']:.2f} | {row['total_to_first_step_s']:.2f} | "
                   f"{row['steady_step_ms']:.0f} | {row['startup_in_steps']:.1f} |")
    lines.append("")
  if "cpu_gap" in results:
    gap = results["cpu_gap"]
    lines += ["### CPU gap (plain-CE ResNet-32 step, batch 128, SGD + momentum)", "",
              "| variant | step ms, median (min–max) | speed vs PyTorch eager |", "|---|---|---|"]
    for name, row in gap["rows"].items():
      speed = f"{row['speed_vs_pytorch']:.2f}×" if "speed_vs_pytorch" in row else "–"
      lines.append(f"| {name} | {_range(row)} | {speed} |")
    lines += ["", "XLA busy time per op category (ms per step, summed over both threads):", ""]
    for name, profile in gap["profiles_ms_per_step"].items():
      top = ", ".join(f"{k} {v:.0f}" for k, v in profile.items())
      lines.append(f"- {name}: {top}")
    lines.append("")
  if "against" in results:
    lines += _against_markdown(results["against"])
  if "ablations" in results:
    ab = results["ablations"]
    lines += ["### Ablations", "", "| jitted function (10 floats) | µs per call, median (min–max) |",
              "|---|---|"]
    for name, row in ab["dispatch"].items():
      lines.append(f"| {name} | {1e3 * row['median_ms']:.1f} ({1e3 * row['min_ms']:.1f}–"
                   f"{1e3 * row['max_ms']:.1f}) |")
    lines += ["", "| B | d | K | MR2 loss + gradient, ℓ_s̄ tiled, ms | same, ℓ_s̄ dense, ms |",
              "|---|---|---|---|---|"]
    for row in ab["representation_margin"]:
      lines.append(f"| {row['batch']} | {row['dim']} | {row['classes']} | {_range(row['tiled'])} | "
                   f"{_range(row['dense'])} |")
    lines.append("")
  return "\n".join(lines)


def _against_markdown(against: dict) -> list[str]:
  """The 'against' section: per call and per loop iteration, each version beside the first."""
  labels = list(against["versions"])
  lines = ["### Versions side by side (loss + statistics, forward + backward)", "",
           "Versions: " + "; ".join(f"{label} = {v['commit']} ({v['tree']})"
                                    for label, v in against["versions"].items()) +
           f". Calls alternated version by version in one process: {against['rounds']} calls "
           f"(and {against['loop_rounds']} loops of {against['loop_iterations']} iterations) per "
           f"version; ms, median (min–max); × the first version: of the medians [the calls' paired "
           f"ratios: median, 25th–75th percentile], and of the 10th percentiles.", ""]
  for kind, title in (("per_call", "per call"), ("in_loop", "per iteration of a compiled loop")):
    if kind not in against["rows"][0]["versions"][labels[0]]:
      continue
    lines += [f"{title}:", "", "| loss | B | d | K | " + " | ".join(
        labels[:1] + [f"{label} | ×" for label in labels[1:]]) + " | stolen | load |",
              "|---|---|---|---|" + "---|" * (2 * len(labels) - 1) + "---|---|"]
    for row in against["rows"]:
      cells = []
      for label in labels:
        version = row["versions"][label][kind]
        cells.append(_range(version))
        if label != labels[0]:
          first = row["versions"][labels[0]][kind]
          low, high = version["paired_ratio_p25_p75"]
          cells.append(f"{version['median_ms'] / first['median_ms']:.2f} "
                       f"[{version['paired_ratio_median']:.2f}; {low:.2f}–{high:.2f}], "
                       f"{version['p10_ms'] / first['p10_ms']:.2f}")
      stolen = row.get("steal_share")
      load = row.get("load_average")
      lines.append(f"| {row['loss']} | {row['batch']} | {row['dim']} | {row['classes']} | "
                   + " | ".join(cells) + f" | {'–' if stolen is None else f'{100 * stolen:.0f} %'}"
                   + f" | {'–' if load is None else f'{load[0]:.1f}–{load[1]:.1f}'} |")
    lines.append("")
  if "floor" in against["rows"][0]["versions"][labels[0]]:
    lines += _floor_markdown(against, labels)
  worst = max(max(v["max_relative_difference"] for v in row["versions"].values())
              for row in against["rows"])
  lines += [f"Largest relative difference of a version's loss or gradient sums from the first "
            f"version's: {worst:.1e}.", ""]
  return lines


def _floor_markdown(against: dict, labels: list[str]) -> list[str]:
  """Each version's call floor (a compiled no-op of its signature, timed in the same rounds) and
  its call's median above that floor: the loss's own work per call."""
  lines = ["call floor (a compiled function of the same arrays in and out that computes nothing, "
           "alternated with the calls) and the call's median above it, ms:", "",
           "| loss | B | d | K | " + " | ".join(
               f"{label} floor | {label} above" + (" | ×" if label != labels[0] else "")
               for label in labels) + " |",
           "|---|---|---|---|" + "---|" * (3 * len(labels) - 1)]
  for row in against["rows"]:
    cells = []
    for label in labels:
      version = row["versions"][label]
      above = version["per_call"]["median_ms"] - version["floor"]["median_ms"]
      cells += [f"{version['floor']['median_ms']:.3f}", f"{above:.3f}"]
      if label != labels[0]:
        first = row["versions"][labels[0]]
        first_above = first["per_call"]["median_ms"] - first["floor"]["median_ms"]
        cells.append(f"{above / first_above:.2f}" if first_above > 0 else "–")
    lines.append(f"| {row['loss']} | {row['batch']} | {row['dim']} | {row['classes']} | "
                 + " | ".join(cells) + " |")
  return lines + [""]
