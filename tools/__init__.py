"""Operational scripts, run from the checkout's root: the accelerator runs (`python -m
tools.accelerator_runs`) and issue 49's call of them with seeds on a batch axis
(`tools/seed_axis_call.sh`), parking and resuming the standard-size studies (`tools/standard_size.sh`),
the pilot studies (`tools/run_studies.sh`), the reference script and its wheels
(`tools/reference.sh`, `tools/wheels.sh`) and the authors' released code on our data
(`tools/authors_ldam_drw.py`). They drive the harness (`experiments`); nothing in `experiments`
imports them."""
