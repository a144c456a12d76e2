"""experiments.studies.regenerate_reports: every committed report can be rebuilt from the committed
runs (each study's methods read the same seeds, which the paired Δ needs)."""

import pytest

from experiments.studies import regenerate_reports


@pytest.mark.parametrize("study", regenerate_reports.STUDIES, ids=lambda s: s.out)
def test_every_study_reads_the_same_seeds_for_every_method(study, tmp_path):
  # The seeds each method's workdirs are linked for (`link_runs`, as `regenerate_study` does):
  # a method with a seed the others lack (a study still training some of its methods) makes the
  # paired comparison fail, so such a study names its seeds (`Study.seeds`).
  seeds = {}
  for name, runs_dir in study.methods:
    workdirs = regenerate_reports.link_runs(regenerate_reports.RESULTS / runs_dir, name,
                                            tmp_path / study.out, study.seeds)
    seeds[name] = [w.name for w in workdirs]
  reference = study.methods[0][0]
  for name, read in seeds.items():
    assert read == seeds[reference], (study.out, name, read, seeds[reference])

