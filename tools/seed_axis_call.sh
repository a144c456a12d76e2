#!/usr/bin/env bash
# Issue 49.6's accelerator call: seeds 1 and 2 of both 200-epoch studies (CIFAR-10-LT: CE then the
# reweighting from CE's epoch-160 checkpoint, logit adjustment, LDAM-DRW; balanced CIFAR-10: ERM, MR2
# released, MR2 paper form), each chain one process training its two seeds as one vmapped program
# (`--stack_seeds`, experiments.train.seed_axis) with the training split in device memory
# (config.input_on_device). Once every chain has logged its first window after compiling, the plan
# (`tools.accelerator_runs.call_plan`, in driver.log) keeps the chains, in this order, that finish
# before the deadline at the images/s measured then, stops the others, and starts MR2 then MR2 +
# reweighting on the long-tailed recipe for as many of seeds 0, 1, 2 as fit in the room left.
# Everything comes back packed in $OUT (tools/accelerator_runs.py's docstring).
#
#   here, before the call:    bash tools/wheels.sh
#                             bash tools/seed_axis_call.sh --slim ../shared/data/cifar10_jpeg
#   the device command:       bash tools/seed_axis_call.sh --device "$OUT"
#                             (carry .whl and .data/cifar10_slim; timeout_s 570)
#   dry run on this CPU:      bash tools/seed_axis_call.sh --dry_run [WORKDIR]
#                             (the same command, chains and plan at tiny size: a small CNN, 2
#                             epochs, 30 images per class of a synthetic CIFAR-10 folder)
# Sizing (docs/guides/harness.md): on 2026-12-04 six separate chains on an H200 trained about
# 32,000 images/s together (about 17,000 one alone); seeds 1 and 2 of the six chains are about
# 31 M training images, 960 s at that rate against a 480 s deadline: without a gain from stacking
# and the device input the plan keeps the first chains only (the long-tailed CE + reweighting
# first). Call timeout: deadline 480 s + 30 s grace + packing + the wheels' install: timeout_s 570.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
chains=lt200_ce_seeds1-2,lt200_logit_adjust_seeds1-2,lt200_ldam_drw_seeds1-2
chains+=,balanced200_ce_seeds1-2,balanced200_mr2_released_seeds1-2,balanced200_mr2_seeds1-2
call=(--seeds=1,2 --stack_seeds --plan --fill_seeds=0,1,2 --only="$chains" --jobs=7
      --data_workers=2 --extra=--config.input_on_device=True)
mode=${1:-}
case $mode in
  --slim)
    "$python" -m tools.accelerator_runs "${call[@]}" --data_dir="${2:?the CIFAR-10 JPEG folder}" \
      --slim_data_to=.data/cifar10_slim
    du -sh .data/cifar10_slim ;;
  --device)
    out=${2:?the device tool\'s \$OUT}
    source tools/wheels.sh --install
    "$python" -m tools.accelerator_runs "${call[@]}" --data_dir=.data/cifar10_slim \
      --workdir=/tmp/seed_axis_call --out="$out" --deadline_s=480 ;;
  --dry_run)
    work=${2:-workdirs/seed_axis_dry_run}
    rm -rf "$work"
    mkdir -p "$work"
    "$python" -c "import pathlib, sys; from tests.tools.test_reference import cifar_folder
cifar_folder(pathlib.Path(sys.argv[1]), per_class_train=30, per_class_test=3)" "$work/cifar10_jpeg"
    tiny=(--config.model=small_cnn --config.num_epochs=2 --config.warmup_epochs=1
          --config.batch_size=20 --config.eval_batch_size=50 --config.nc_metrics=False
          --config.reweight.start_epoch=1 --config.ldam.drw_epoch=1 --config.log_every_steps=2)
    JAX_PLATFORMS=cpu "$python" -m tools.accelerator_runs "${call[@]}" \
      "${tiny[@]/#/--extra=}" --data_dir="$work/cifar10_jpeg" --workdir="$work/work" \
      --out="$work/out" --deadline_s="${DEADLINE_S:-500}" ;;
  *)
    echo "usage: bash tools/seed_axis_call.sh --slim CIFAR10_JPEG | --device OUT | --dry_run [WORKDIR]" >&2
    exit 2 ;;
esac
