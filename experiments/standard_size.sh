#!/usr/bin/env bash
# Issue 17's standard-size studies on this CPU (ResNet-32, 30 epochs; about an hour a full run here):
# 17.1 full CIFAR-10-LT IF 100 (`cifar10_lt_short.py`) and 17.2 balanced CIFAR-10, 1,000 per class
# (`cifar10_balanced.py`). Seed by seed, so that each finished seed pairs every method; every run is
# resumable (`experiments.compare` resumes a run whose folder exists, and a finished run costs
# nothing), so the script is simply started again after an interruption. Deferred methods (the
# reweighting) start from CE's epoch-24 checkpoint. The per-run summaries are then exported to
# experiments/results/ (the last lines) and the reports rebuilt by `python -m
# experiments.regenerate_reports`.
# Usage: bash experiments/standard_size.sh [CIFAR10_DIR] [WORKDIR]
# SEED0_METHODS=ce,inverse_reweight,<the $ldam spec below>,logit_adjust,mr2+inverse_reweight trains
# seed 0 of every method (where its committed CE run is not enough).
set -euo pipefail
data=${1:-../shared/data/cifar10_jpeg}
work=${2:-workdirs}
lt() {
  python -m experiments.compare --config=experiments/configs/cifar10_lt_short.py \
    --config.data_dir="$data" --workdir="$work/c10lt_short" "$@"
}
balanced() {
  python -m experiments.compare --config=experiments/configs/cifar10_balanced.py \
    --config.data_dir="$data" --workdir="$work/c10_balanced" "$@"
}
# LDAM-DRW keeps its own head, as in its released code (NormedLinear, s = 30): the cosine head at
# scale 30 with the margin in its units (ldam.max_margin = 0.5 x 30, ldam.scale = 1). On the linear
# head s = 30 multiplies unnormalised logits (loss 43 at step 50 in a first try).
ldam=ldam_drw=ldam_drw:head=cosine:cosine_scale=30.0:ldam.scale=1.0:ldam.max_margin=15.0
all=ce,inverse_reweight,$ldam,logit_adjust,mr2+inverse_reweight
lt --methods=$all --seeds=1
lt --methods=$all --seeds=2
# Seed 0's CE and reweighting ran on 2026-12-01 and are committed (results/cifar10_lt_short/runs/);
# their checkpoints are not kept, so seed 0 trains the other methods only (none starts from CE).
lt --methods=${SEED0_METHODS:-$ldam,logit_adjust,mr2+inverse_reweight} --seeds=0
for seed in 0 1 2; do
  balanced --methods=ce,mr2,mr2_released=mr2:mr2.form=released,mr2_gamma_only=mr2:mr2.lam=0 \
    --seeds=$seed
done
python -c "import pathlib; from experiments import regenerate_reports as r; \
  r.export_runs(pathlib.Path('$work/c10lt_short'), r.RESULTS / 'cifar10_lt_short/runs'); \
  r.export_runs(pathlib.Path('$work/c10_balanced'), r.RESULTS / 'cifar10_balanced/runs')"
