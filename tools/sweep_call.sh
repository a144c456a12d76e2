#!/usr/bin/env bash
# The accelerator row of the sweep benchmark (experiments.benchmarks.sweep): S = 1, 8 and 32 members
# of a sweep in one program against one run alone, aggregate examples/s, for the frozen-feature
# recipe (a linear head on features of EfficientNet-Lite0's shape, the long-tailed CIFAR-10 size:
# 12,406 rows of 1,280 floats, synthetic, since the cached features are too large to carry) with
# the reweighting's α swept, and for the digits recipe (small CNN) with MR2's λ swept.
#
#   here, before the call:    bash tools/wheels.sh
#   the device command:       bash tools/sweep_call.sh --device "$OUT"
#                             (carry .whl; timeout_s 540)
#   dry run on this CPU:      bash tools/sweep_call.sh --dry_run [WORKDIR]
#                             (the same commands at tiny size: 2,000 rows of 64 floats, S = 1 and
#                             2, a few steps)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
mode=${1:-}
run() {  # run OUT TAG STEPS WINDOW MEMBERS ROWS,DIM -- recipe flags
  local out=$1 tag=$2 steps=$3 window=$4 members=$5
  shift 5
  "$python" -m experiments.benchmarks.sweep --steps="$steps" --window="$window" \
    --members="$members" --rounds=1 --out="$out" --tag="$tag" "$@"
}
features=(--config=experiments/configs/probe_cifar10.py --loss=inverse_reweight
          --field=reweight.alpha --low=0 --high=3)
digits=(--config=experiments/configs/digits.py --loss=mr2 --field=mr2.lam --low=0 --high=0.3)
case $mode in
  --device)
    out=${2:?the device tool\'s \$OUT}
    source tools/wheels.sh --install
    run "$out" accelerator_features 400 100 1,8,32 "${features[@]}" --synthetic_features=12406,1280
    run "$out" accelerator_digits 200 50 1,8,32 "${digits[@]}" ;;
  --dry_run)
    work=${2:-workdirs/sweep_dry_run}
    rm -rf "$work"
    mkdir -p "$work"
    JAX_PLATFORMS=cpu run "$work" dry_features 6 2 1,2 "${features[@]}" \
      --synthetic_features=2000,64
    JAX_PLATFORMS=cpu run "$work" dry_digits 6 2 1,2 "${digits[@]}" ;;
  *)
    echo "usage: bash tools/sweep_call.sh --device OUT | --dry_run [WORKDIR]" >&2
    exit 2 ;;
esac
