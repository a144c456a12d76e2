#!/usr/bin/env bash
# The settings study: each hyperparameter swept in one program per method (experiments.compare
# --sweep: the members of a method, values × seeds, train as one stacked program), five seeds per
# value, then one table and figure per hyperparameter (experiments.report.setting_curves).
#
#   bash tools/settings_study.sh [STUDY ...]     (default: every study below; work in workdirs/settings)
#
# Studies (the frozen-feature recipes read EfficientNet-Lite0's cached CIFAR-10 features,
# `python -m experiments.studies.linear_probe features --data_dir=DATA` once):
#   probe_lt_reweight  the reweighting's α, γ and max_weight, its stop_gradient and its start
#                      epoch, on the linear probe, long-tailed (IF 100), against CE
#   adapter_mr2        MR2's λ on the MLP adapter (a trainable layer: the representation margin has
#                      something to act on), balanced, against CE; on the adapter's features as they
#                      are and L2-normalised (mr2.features=l2, with the paper's p = 3 for the margins)
#   digits_mr2         MR2's λ on balanced digits (small CNN), against CE; raw and L2-normalised
# Each run's files stay in workdirs/settings/<study>; the tables and figures go to
# results/settings/<study>/, the commands to results/settings/<study>/commands.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
work=${WORK:-workdirs/settings}
results=results/settings
seeds=0-4
compare() {  # compare STUDY CONFIG METHODS [flags...]
  local study=$1 config=$2 methods=$3
  shift 3
  mkdir -p "$results/$study"
  local cmd=("$python" -m experiments.compare --config="$config" --methods="$methods"
             --seeds="$seeds" --workdir="$work/$study" --report_dir="$work/$study/report" "$@")
  echo "${cmd[*]}" | tee -a "$results/$study/commands.txt"
  "${cmd[@]}"
}
curves() {  # curves STUDY METHOD FIELD DEFAULT [--name=FOLDER]
  local cmd=("$python" -m experiments.report.setting_curves --workdir="$work/$1" --method="$2"
             --field="$3" --default="$4" --out="$results/$1" "${@:5}")
  echo "${cmd[*]}" | tee -a "$results/$1/commands.txt"
  "${cmd[@]}" > /dev/null
}
probe=experiments/configs/probe_cifar10.py
# MR2 reading L2-normalised features (the vector a cosine head classifies), p = 3 as the paper sets
# it there (at p = 2 every margin would be equal); on unit vectors pair distances are at most 4, so
# λ is swept a decade further.
mr2_l2=mr2_l2=mr2:mr2.features=l2:mr2.p=3
lams_l2=0,0.01,0.03,0.1,0.3,1,3,10
starts() {  # starts E...: the reweighting's variants inverse_reweight_start<E>, comma-separated
  local e out=()
  for e in "$@"; do out+=("inverse_reweight_start$e=inverse_reweight:reweight.start_epoch=$e"); done
  (IFS=,; echo "${out[*]}")
}
for study in ${@:-probe_lt_reweight adapter_mr2 digits_mr2}; do
  rm -f "$results/$study/commands.txt"
  case $study in
    probe_lt_reweight)
      lt=(--config.imbalance_factor=100)
      compare "$study" "$probe" ce,inverse_reweight "${lt[@]}" --sweep=reweight.alpha=0,0.1,1,10
      compare "$study" "$probe" ce,inverse_reweight "${lt[@]}" --sweep=reweight.gamma=0,0.5,1,2
      compare "$study" "$probe" ce,inverse_reweight "${lt[@]}" --sweep=reweight.max_weight=2,5,10,100
      compare "$study" "$probe" ce,inverse_reweight,inverse_reweight_sg=inverse_reweight:reweight.stop_gradient=True "${lt[@]}"
      # The start epoch picks the compiled branch (not traceable): one run per value, from epoch
      # 0 (the default) to the last 5 of the 30 epochs, each training its CE epochs itself (CE's
      # runs keep no checkpoint at those epochs).
      compare "$study" "$probe" ce,inverse_reweight,"$(starts 10 20 25)" "${lt[@]}" \
        --nostart_deferred_from_reference
      curves "$study" inverse_reweight reweight.alpha 0
      curves "$study" inverse_reweight reweight.gamma 1
      curves "$study" inverse_reweight reweight.max_weight 10
      runs() { echo "$1=$(printf "$work/$study/$2/seed%s," 0 1 2 3 4 | sed 's/,$//')"; }
      cmd=("$python" -m experiments.report.run_tables --runs="$(runs ce ce)"
           --runs="$(runs inverse_reweight inverse_reweight)"
           --runs="$(runs inverse_reweight_sg inverse_reweight_sg)" --reference=ce
           --paired_against=inverse_reweight --out="$results/$study/stop_gradient")
      echo "${cmd[*]}" | tee -a "$results/$study/commands.txt"
      "${cmd[@]}" > /dev/null
      cmd=("$python" -m experiments.report.run_tables --runs="$(runs ce ce)"
           --runs="$(runs inverse_reweight inverse_reweight)")
      for epoch in 10 20 25; do
        cmd+=(--runs="$(runs inverse_reweight_start$epoch inverse_reweight_start$epoch)")
      done
      cmd+=(--reference=ce --paired_against=inverse_reweight --out="$results/$study/start_epoch")
      echo "${cmd[*]}" | tee -a "$results/$study/commands.txt"
      "${cmd[@]}" > /dev/null
      curves "$study" inverse_reweight reweight.start_epoch 0 --name=start_epoch_curves \
        --runs=inverse_reweight,inverse_reweight_start10,inverse_reweight_start20,inverse_reweight_start25 ;;
    adapter_mr2)
      compare "$study" "$probe" ce,mr2 --config.model=mlp_adapter --sweep=mr2.lam=0,0.01,0.03,0.1,0.3,1
      compare "$study" "$probe" ce,"$mr2_l2" --config.model=mlp_adapter --sweep=mr2.lam=$lams_l2
      curves "$study" mr2 mr2.lam 0.1
      curves "$study" mr2_l2 mr2.lam 0.1 --name=mr2_l2_lam ;;
    digits_mr2)
      compare "$study" experiments/configs/digits.py ce,mr2 --sweep=mr2.lam=0,0.01,0.03,0.1,0.3,1
      compare "$study" experiments/configs/digits.py ce,"$mr2_l2" --sweep=mr2.lam=$lams_l2
      curves "$study" mr2 mr2.lam 0.1
      curves "$study" mr2_l2 mr2.lam 0.1 --name=mr2_l2_lam ;;
    *) echo "unknown study $study" >&2; exit 2 ;;
  esac
done
