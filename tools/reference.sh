#!/usr/bin/env bash
# One-command reference reproduction for an accelerator (issue 17, point 3), offline.
#
#   [PARTS="1 2 3"] [THREADS=8] bash tools/reference.sh [--smoke] [DATA_DIR] [WORKDIR] [LT_SEEDS] [BALANCED_SEEDS]
#
# 1. CIFAR-10-LT IF 100, the reweighting's network and optimiser with a cosine schedule
#    (experiments/configs/cifar10_lt_cosine.py: ResNet-32, cosine head s = 30, 200 epochs, lr 0.3
#    batch 256, reweighting / DRW from epoch 160; crop + flip — the released recipe with three views,
#    AutoAugment, Cutout and MiLeLR is experiments/configs/cifar10_lt.py, not run here yet):
#    CE, LDAM-DRW, the inverse reweighting (gradient through the weights, as released) and
#    MR2 + reweighting. The reweighting starts from CE's epoch-160 checkpoint (config.init_from).
# 2. MR2's balanced setting (experiments/configs/cifar10_balanced.py, 1,000 images per class, at 100
#    epochs): ERM, MR2 (paper), MR2 (released form), γ-only.
# Size (one seed each, the default): 640 epochs × 12,406 images for part 1 (the reweighting trains
# only its last 40) and 400 × 10,000 for part 2, ≈ 11.9 M images. The host pipeline builds batches
# in THREADS host threads (config.data_workers, default 8; the H200 machine has 16 cores): crop +
# flip measured 42.9 k images/s in one thread and 80.7 k in two on this project's 2-core CPU
# (experiments/benchmarks/host_threads.py), so 8 threads keep up with a ResNet-32 step of ≈ 150 k
# images/s even at half that rate per thread; at 11.9 M images, parts 1 and 2 take ≈ 10 min
# at a step of 20 k images/s and ≈ 5 min at 40 k. Measured on an H200 on 2026-12-04 (JAX 0.11.2,
# issue 39's runs, results/accelerator_logs/2026-12-04/): the ResNet-32 step at
# batch 128 ran at 31.6 k images/s in one process with 2 host threads, and six processes sharing
# the GPU at 5.1-5.4 k each (≈ 31.6 k together, the GPU at 100 %): ≈ 6.3 min for parts 1 and 2,
# one process after another. tools/accelerator_runs.py runs the same commands as
# parallel chains within a deadline and packs the runs for the device tool. Part 3 is larger (the released recipe's three views, 3.9 k images/s per thread
# here) and is not sized: PARTS="1 2" runs parts 1 and 2 alone, e.g. within a 10-minute call.
# Reports: WORKDIR/cifar10_lt/report and WORKDIR/cifar10_balanced/report (same as experiments.compare).
#
# Nothing is installed from a network: the project runs from this checkout (PYTHONPATH, no
# `pip install .`, whose pins would replace the machine's JAX 0.11); the pure-Python packages the
# accelerator image lacks (ml_collections, tensorboardX) come as wheels in .whl/ (made here by
# `bash tools/wheels.sh`) and are installed into /tmp/site. DATA_DIR holds the CIFAR-10 JPEG
# files (train.npz, test.npz as in ../shared/data/cifar10_jpeg; copy them into the checkout, e.g.
# .data/cifar10_jpeg, since ../shared does not travel).
# --smoke: the same commands at tiny size on any machine (a small CNN, 2 epochs, 30 images per
# class, one seed): what tests/tools/test_reference.py runs on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = "--smoke" ]; then smoke=1; shift; fi
data=${1:-.data/cifar10_jpeg}
work=${2:-workdirs/reference}
lt_seeds=${3:-0}
balanced_seeds=${4:-0}
parts=" ${PARTS:-1 2 3} "
threads=${THREADS:-8}
for part in $parts; do
  [[ $part == [123] ]] || { echo "reference.sh: PARTS holds 1, 2 and/or 3, got '$PARTS'" >&2; exit 2; }
done
[[ $threads =~ ^[0-9]+$ ]] || { echo "reference.sh: THREADS is a count, got '$THREADS'" >&2; exit 2; }

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
python3 -c "import jax; print('jax', jax.__version__, jax.default_backend(), jax.devices())"

lt=(--config.num_epochs=200 --config.data_workers="$threads")
balanced=(--config.num_epochs=100 --config.data_workers="$threads")
if [ $smoke = 1 ]; then
  tiny=(--config.model=small_cnn --config.num_epochs=2 --config.warmup_epochs=1
        --config.max_train_per_class=30 --config.batch_size=20 --config.eval_batch_size=50
        --config.nc_metrics=False --config.progress_bar=False --config.data_workers=2)
  lt=("${tiny[@]}" --config.reweight.start_epoch=1 --config.ldam.drw_epoch=1)
  balanced=("${tiny[@]}")
fi
start=$(date +%s)
if [[ $parts == *" 1 "* ]]; then
  python3 -m experiments.compare --config=experiments/configs/cifar10_lt_cosine.py \
    --config.data_dir="$data" --seeds="$lt_seeds" --workdir="$work/cifar10_lt" \
    --methods=ce,ldam_drw,inverse_reweight,mr2+inverse_reweight "${lt[@]}"
fi
if [[ $parts == *" 2 "* ]]; then
  python3 -m experiments.compare --config=experiments/configs/cifar10_balanced.py \
    --config.data_dir="$data" --seeds="$balanced_seeds" --workdir="$work/cifar10_balanced" \
    --methods=ce,mr2,mr2_released=mr2:mr2.form=released,gamma_only=mr2:mr2.lam=0.0 "${balanced[@]}"
fi
# 3. The reweighting's reference pipelines at their recipes (issue 14; PIPELINES spec), each with
#    and without the reweighting from epoch 160: the released recipe (experiments/configs/
#    cifar10_lt.py: three views, AutoAugment + Cutout, SimCLR views, MiLeLR), ETF-DR
#    (cifar10_lt_etf_dr.py) and GLMC (cifar10_lt_glmc_reweight.py: GLMC with the reweighting and
#    MiLeLR; plain GLMC with its cosine schedule). Not sized on an accelerator yet: the released
#    recipe's host pipeline (AutoAugment and two SimCLR views in NumPy and Pillow) measured
#    3.9 k images/s in one thread and 5.7 k in two on this project's CPU, and may bound it even
#    in THREADS threads.
if [[ $parts == *" 3 "* ]]; then
  python3 -m experiments.compare --config=experiments/configs/cifar10_lt.py \
    --config.data_dir="$data" --seeds="$lt_seeds" --workdir="$work/released_cifar10_lt" \
    --methods=released=ce,released_rw=inverse_reweight "${lt[@]}"
  python3 -m experiments.compare --config=experiments/configs/cifar10_lt_etf_dr.py \
    --config.data_dir="$data" --seeds="$lt_seeds" --workdir="$work/etf_dr_cifar10_lt" \
    --methods=etf_dr,etf_dr_rw=etf_dr+inverse_reweight "${lt[@]}"
  python3 -m experiments.compare --config=experiments/configs/cifar10_lt_glmc_reweight.py \
    --config.data_dir="$data" --seeds="$lt_seeds" --workdir="$work/glmc_cifar10_lt" \
    --methods=glmc=glmc:schedule=cosine:warmup_epochs=0,glmc_rw=glmc+inverse_reweight "${lt[@]}"
fi
echo "reference.sh: done in $(( $(date +%s) - start )) s; reports in $work/*/report"
