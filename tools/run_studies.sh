#!/usr/bin/env bash
# Regenerates the pilot studies of results/README.md (issue 6) on this CPU.
# Usage: bash tools/run_studies.sh [CIFAR10_DIR] [WORKDIR] [MNIST_DIR]
# --noxla_cpu_tuning: the runs of studies 1, 2 and 4 used XLA's default CPU flags (most of them ran
# before experiments/common/xla_cpu.py existed); with it they are rerun as committed. The imbalance-factor
# sweep (study 1b, session 10) ran with the tuned flags (experiments/common/xla_cpu.py, 1.9x faster here).
set -euo pipefail
data=${1:-../shared/data/cifar10_jpeg}
work=${2:-workdirs/studies}
mnist=${3:-../shared/data/mnist}
# Study 1: long-tailed CIFAR-10, reweighting vs baselines.
python -m experiments.compare --noxla_cpu_tuning --config=experiments/configs/study_reweight_cifar10_lt.py \
  --config.data_dir="$data" --seeds=0,1,2,3,4 --workdir="$work/reweight_cifar10_lt" \
  --methods=ce,class_balanced,focal,ldam_drw=ldam_drw:ldam.scale=1.0:ldam.max_margin=15.0,logit_adjust,ir_batch=inverse_reweight:reweight.macro=False,ir_macro=inverse_reweight,ir_macro_stopgrad=inverse_reweight:reweight.stop_gradient=True
# Study 2 on CIFAR-10: ERM, MR2, γ-only, ℓ_s̄-only, and the uniform-margin ablation at c̄ = 1.5
# (class-dependent γ with mean 1.5 vs γ ≡ 1.5 for every class, both without ℓ_s̄).
python -m experiments.compare --noxla_cpu_tuning --config=experiments/configs/study_mr2_cifar10.py \
  --config.data_dir="$data" --seeds=0,1,2,3,4 --workdir="$work/mr2_cifar10" \
  --methods=ce,mr2,mr2_gamma_only=mr2:mr2.lam=0.0,mr2_sbar_only=mr2:mr2.uniform_margin=True,gamma_only_cbar1.5=mr2:mr2.lam=0.0:mr2.c_bar=1.5,uniform_cbar1.5=mr2:mr2.lam=0.0:mr2.c_bar=1.5:mr2.uniform_margin=True
# The uniform-margin ablation as a paired comparison: Easy/Medium/Hard from ERM, Δ against γ ≡ 1.5.
runs() { echo "$1=$(ls -d "$work/mr2_cifar10/$1"/seed* | sort | paste -sd,)"; }
python -m experiments.report.run_tables --runs="$(runs ce)" --runs="$(runs gamma_only_cbar1.5)" \
  --runs="$(runs uniform_cbar1.5)" --reference=ce --paired_against=uniform_cbar1.5 \
  --out="$work/mr2_cifar10_uniform_margin_report"
# Study 2 on MNIST (1,000 per class, 5 epochs, no augmentation).
python -m experiments.compare --noxla_cpu_tuning --config=experiments/configs/study_mr2_mnist.py \
  --config.data_dir="$mnist" --seeds=0,1,2 --workdir="$work/mr2_mnist" \
  --methods=ce,mr2,mr2_gamma_only=mr2:mr2.lam=0.0,mr2_sbar_only=mr2:mr2.uniform_margin=True
# Study 4: MR2 + reweighting against each alone, same recipe and workdir as study 1 (its CE and
# reweighting runs are reused).
python -m experiments.compare --noxla_cpu_tuning --config=experiments/configs/study_reweight_cifar10_lt.py \
  --config.data_dir="$data" --seeds=0,1,2,3,4 --workdir="$work/reweight_cifar10_lt" \
  --report_dir="$work/combined_cifar10_lt_report" \
  --methods=ce,mr2,ir_macro=inverse_reweight,mr2_ir_macro=mr2+inverse_reweight
# Study 1b: imbalance factors 50, 100, 200 (same recipe as study 1, seeds 0-2, six methods), with the
# per-class training-set loss L_c and rho logged every epoch (config.class_loss_every_epochs = 1).
for imbalance in 100 50 200; do
  python -m experiments.compare --config=experiments/configs/study_reweight_cifar10_lt.py \
    --config.data_dir="$data" --config.imbalance_factor=$imbalance --seeds=0,1,2 \
    --workdir="$work/if_sweep/if$imbalance" \
    --methods=ce,class_balanced,focal,ldam_drw=ldam_drw:ldam.scale=1.0:ldam.max_margin=15.0,logit_adjust,ir_macro=inverse_reweight
done
python -m experiments.report.sweep_table --out="$work/if_sweep/table" \
  --reports="IF 50=$work/if_sweep/if50/report" --reports="IF 100=$work/if_sweep/if100/report" \
  --reports="IF 200=$work/if_sweep/if200/report"
# Study 7 (issue 14): the reweighting inside its reference pipelines, one short schedule for all:
# CE, the released recipe (three views, AutoAugment + Cutout, SimCLR views) without / with the
# reweighting, ETF-DR (fixed ETF head, DR with GivenEw, mixup) without / with it, GLMC (paired
# re-balanced batches, global MixUp / local CutMix, two heads, consistency) without / with it.
released=":views=3:augmentation=released"
python -m experiments.compare --config=experiments/configs/study_pipelines_cifar10_lt.py \
  --config.data_dir="$data" --seeds=0,1,2 --workdir="$work/pipelines_cifar10_lt" \
  --methods=ce,released=ce$released,released_rw=inverse_reweight$released,etf_dr=etf_dr:head=etf:mixup_alpha=1.0,etf_dr_rw=etf_dr+inverse_reweight:head=etf:mixup_alpha=1.0,glmc=glmc,glmc_rw=glmc+inverse_reweight
# The committed reports under results/ (every report.md / comparison.json / plot, the
# sweep table and the linear probe's tables) are rebuilt from the committed runs/ files, without
# training, by one command (experiments/report/seed_stats.py: mean ± sample std, ddof = 1, paired per-seed Δ):
#   python -m experiments.studies.regenerate_reports
