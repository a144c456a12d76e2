#!/usr/bin/env bash
# Issue 17's standard-size studies on this CPU (ResNet-32, 30 epochs; a full run here takes 35-42 minutes
# long-tailed, 22-25 balanced):
# 17.1 full CIFAR-10-LT IF 100 (`cifar10_lt_short.py`) and 17.2 balanced CIFAR-10, 1,000 per class
# (`cifar10_balanced.py`). Seed by seed, so that each finished seed pairs every method. A (method,
# seed) whose summary is already committed under results/<study>/runs/ is skipped (work
# folders do not outlive a session on this machine); every other run is resumable
# (`experiments.compare` resumes a run whose folder exists), so the script is simply started again
# after an interruption. Each finished run is exported to results/ as soon as its seed's
# invocation ends, or when the script parks, without rewriting the runs already there. Deferred
# methods (the reweighting) start from CE's checkpoint at their start epoch when CE is in the same
# invocation (trained there, or finished and back from its parking place: then only re-evaluated).
# The reports are rebuilt by `python -m experiments.studies.regenerate_reports`.
# When a session ends: `bash tools/standard_size.sh --park` (training stopped first)
# exports the finished runs, and copies each unfinished run's config, logs and checkpoints (about
# 4 MB each; the latest, and a deferred start epoch's when kept) to
# results/<study>/unfinished/<method>/seed<s>/ to be committed — and each
# finished run's too while a method of its seed is still to train (a deferred method may start
# from it). The next start copies them back into the work folder and resumes them, and deletes
# the parked copies once their seed's invocation has finished.
# Usage: bash tools/standard_size.sh [CIFAR10_DIR] [WORKDIR]
#        bash tools/standard_size.sh --park [WORKDIR]
#        bash tools/standard_size.sh --specs STUDY   (its method specs)
# Where the runs stand (step, speed, hours left), beside the training:
#        python -m experiments.report.progress -- workdirs/cifar10_lt_200 results/cifar10_lt_200/unfinished
set -euo pipefail
results=results
python=${PYTHON:-python}
# LDAM-DRW keeps its own head, as in its released code (NormedLinear, s = 30): the cosine head at
# scale 30 with the margin in its units (ldam.max_margin = 0.5 x 30, ldam.scale = 1). On the linear
# head s = 30 multiplies unnormalised logits (loss 43 at step 50 in a first try).
ldam=ldam_drw=ldam_drw:head=cosine:cosine_scale=30.0:ldam.scale=1.0:ldam.max_margin=15.0
lt=(ce inverse_reweight "$ldam" logit_adjust mr2+inverse_reweight mr2)
balanced=(ce mr2 mr2_released=mr2:mr2.form=released mr2_gamma_only=mr2:mr2.lam=0)
# Issue 39.1's diagnosis of MR2 alone on the long-tailed set: its logit margin without the
# representation term (λ = 0), to tell which of the two parts loses the rarest classes.
lt_ablation=(mr2_gamma_only=mr2:mr2.lam=0)
# Issue 39's 200-epoch runs: CIFAR-10-LT at the LDAM-DRW release's schedule (the reweighting from CE's
# epoch-160 checkpoint), and balanced CIFAR-10 with ERM and MR2's two forms.
lt200=(ce inverse_reweight logit_adjust "$ldam")
# Issue 55.4's further seeds of the 200-epoch study: CE and the reweighting from its epoch-160 checkpoint.
lt200_pair=(ce inverse_reweight)
balanced200=(ce mr2_released=mr2:mr2.form=released mr2)
# study_specs STUDY: every method spec this script trains in STUDY (config experiments/configs/STUDY.py).
study_specs() {
  case $1 in
    cifar10_lt_short) echo "${lt[@]}" "${lt_ablation[@]}" ;;
    cifar10_balanced) echo "${balanced[@]}" ;;
    cifar10_lt_200) echo "${lt200[@]}" ;;
    cifar10_balanced_200) echo "${balanced200[@]}" ;;
  esac
}
# folder SPEC: the run folder name of a method spec (the part before `=`, `+` written `_`).
folder() {
  local name=${1%%=*}
  echo "${name//+/_}"
}
# missing STUDY SEED SPEC...: the comma-joined specs whose run `<name>-seed<SEED>.json` is not yet
# committed.
missing() {
  local study=$1 seed=$2 out="" spec
  shift 2
  for spec in "$@"; do
    [[ -e $results/$study/runs/$(folder "$spec")-seed$seed.json ]] || out+=",$spec"
  done
  echo "${out#,}"
}
# export_finished STUDY_DIR...: every finished run (a run folder with a summary.json) of each study
# folder of the work folder copied to results/<study>/runs/, where not there yet.
export_finished() {
  local study
  for study in "$@"; do
    study=${study%/}
    compgen -G "$study/*/seed*/summary.json" > /dev/null || continue
    "$python" -m experiments.studies.regenerate_reports --results="$results" --export="$study" \
      --export_study="${study##*/}" --keep_existing --export_only
  done
}
# --specs STUDY: print STUDY's method specs, one per line (for tools/accelerator_runs.py).
if [[ ${1:-} == --specs ]]; then
  for spec in $(study_specs "${2:?--specs STUDY}"); do echo "$spec"; done
  exit 0
fi
if [[ ${1:-} == --park ]]; then
  work=${2:-workdirs}
  shopt -s nullglob
  for run in "$work"/*/*/seed*; do
    steps=("$run"/checkpoints/[0-9]*)
    (( ${#steps[@]} )) || continue
    study=${run#"$work"/}
    study=${study%%/*}
    park=$results/${run#"$work"/}
    park=${park%/*/seed*}/unfinished/${run#"$work"/*/}
    rm -rf "$park"  # an older parked copy of it, re-parked below or no longer needed
    rmdir "${park%/*/seed*}"/* "${park%/*/seed*}" 2>/dev/null || true
    # A finished run is parked too while a method of its seed is still to train (neither
    # committed nor finished here): a deferred method starts from its checkpoint (the reweighting
    # from CE's epoch 160).
    if [[ -e $run/summary.json ]]; then
      pending=""
      for spec in $(study_specs "$study"); do
        [[ -e $work/$study/$(folder "$spec")/${run##*/}/summary.json ]] \
          || pending+=$(missing "$study" "${run##*/seed}" "$spec")
      done
      [[ -n $pending ]] || continue
    fi
    latest=$(printf '%s\n' "${steps[@]##*/}" | sort -n | tail -1)
    mkdir -p "$park/checkpoints"
    # summary.json (a finished run's): the next start sees it finished, re-evaluates it only.
    cp "$run"/{config.json,metrics.jsonl,class_history.jsonl,summary.json} "$park/" 2>/dev/null \
      || true
    # Every checkpoint the run holds: the latest and, where it has passed one, the deferred start
    # epoch's (the reweighting starts from CE's epoch-160 checkpoint of a 200-epoch run).
    cp -r "${steps[@]}" "$park/checkpoints/"
    echo "parked $run (step $latest) in $park"
  done
  # Then the finished runs are exported (a session can end between a run's end and its seed's
  # export); parking went first, so a failed export loses no training.
  export_finished "$work"/*/ || echo "error: exporting the finished runs failed" >&2
  exit 0
fi
data=${1:-../shared/data/cifar10_jpeg}
work=${2:-workdirs}
# unpark STUDY: copy the parked runs back into the work folder (where it has no such run yet).
unpark() {
  local park run
  for park in "$results/$1"/unfinished/*/seed*; do
    [[ -d $park ]] || continue
    run=$work/$1/${park#"$results/$1"/unfinished/}
    [[ -e $run ]] && continue
    mkdir -p "${run%/*}"
    cp -r "$park" "$run"
    echo "resuming $run from $park"
  done
}
# unpark_done STUDY: delete the parked copies of runs that have now finished.
unpark_done() {
  local park
  for park in "$results/$1"/unfinished/*/seed*; do
    [[ -e $work/$1/${park#"$results/$1"/unfinished/}/summary.json ]] && rm -rf "$park"
  done
  rmdir "$results/$1"/unfinished/* "$results/$1"/unfinished 2>/dev/null || true
}
# with_reference STUDY SEED REFERENCE METHODS: METHODS (comma-joined specs), with the reference spec
# put first when it is committed but its finished run is back in the work folder (parked while a
# deferred method of its seed was still to train): `experiments.compare` then only re-evaluates it,
# and starts the deferred methods from its checkpoint instead of training their first epochs.
with_reference() {
  local study=$1 seed=$2 reference=$3 methods=$4
  if [[ ,$methods, != *",$reference,"* && -e $work/$study/$(folder "$reference")/seed$seed/summary.json ]]; then
    methods="$reference,$methods"
  fi
  echo "$methods"
}
# run STUDY SEED SPEC...: train the missing methods of one seed (config
# experiments/configs/STUDY.py), then export them.
run() {
  local study=$1 seed=$2
  shift 2
  local methods reference=$1
  methods=$(missing "$study" "$seed" "$@")
  if [[ -z $methods ]]; then echo "$study seed $seed: all committed"; return; fi
  unpark "$study"
  methods=$(with_reference "$study" "$seed" "$reference" "$methods")
  echo "$study seed $seed: training $methods"
  "$python" -m experiments.compare --config="experiments/configs/$study.py" \
    --config.data_dir="$data" --workdir="$work/$study" --methods="$methods" --seeds="$seed"
  export_finished "$work/$study"
  unpark_done "$study"
}
# ORDER (default: every study and seed, the balanced seeds first: their study has the fewest seeds)
# picks and orders the runs, as space-separated `lt:<seed>` / `balanced:<seed>` /
# `lt_ablation:<seed>` / `lt200:<seed>` / `lt200_pair:<seed>` / `balanced200:<seed>` items (the last four not in the
# default; the 200-epoch ones take 3-6 hours a run here and are parked between sessions).
for item in ${ORDER:-balanced:0 balanced:1 balanced:2 lt:0 lt:1 lt:2}; do
  seed=${item#*:}
  case ${item%%:*} in
    lt) run cifar10_lt_short "$seed" "${lt[@]}" ;;
    balanced) run cifar10_balanced "$seed" "${balanced[@]}" ;;
    lt_ablation) run cifar10_lt_short "$seed" "${lt_ablation[@]}" ;;
    lt200) run cifar10_lt_200 "$seed" "${lt200[@]}" ;;
    lt200_pair) run cifar10_lt_200 "$seed" "${lt200_pair[@]}" ;;
    balanced200) run cifar10_balanced_200 "$seed" "${balanced200[@]}" ;;
    *) echo "unknown ORDER item $item" >&2; exit 2 ;;
  esac
done
