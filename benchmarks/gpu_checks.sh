#!/usr/bin/env bash
# Every GPU measurement of the project in one run on one CUDA GPU (issues 18 and 23, gentle's official-scale toy1):
#   bash benchmarks/gpu_checks.sh OUT_DIR          # from the repository root, with zoo installed (or PYTHONPATH=.)
# Parts, in this order (each with its own time limit and log OUT_DIR/<part>.log; a failing part stops none of the
# others; the timed parts run alone on the GPU):
#   smoke      the smoke configs of rosa, dpformer, gentle and moment: fit, then test, with --trainer.accelerator gpu
#   dpformer   benchmarks/dpformer_clipping.py at vocabulary 10k/50k x sequence 50/200, batch 64; 50k at batch 256
#   rosa       benchmarks/rosa_train_step.py on a bf16 Llama (hidden 2048, intermediate 5504, 8 layers, seq 512),
#              one row per SDDMM kernel, with a profile of one step of each
#   rosa-plan  the same model: each support's cached SupportPlan against rebuilding it every step (KERNEL:per-step,
#              the layer before the cache), for the CSR and the blocked kernel; not yet run on a GPU
#   moment     benchmarks/moment_forward.py (small- and large-shaped T5, batch 32, 1 and 7 channels)
#   gentle     zoo sweep configs/sweeps/gentle_toy1_official.yaml (8 jobs), then its zoo compare tables
# PARTS="rosa moment" runs a subset. DEADLINE (seconds, default 560: what fitted the 15-minute GPU loan of
# 2026-12-04) bounds the whole run; raise it on a machine of your own.
set -u
out=${1:?usage: bash benchmarks/gpu_checks.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
parts=${PARTS:-smoke dpformer rosa rosa-plan moment gentle}
export PYTHONUNBUFFERED=1 WANDB_MODE=${WANDB_MODE:-disabled} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

t0=$(date +%s)
deadline=${DEADLINE:-560}  # seconds for the whole run: a part gets at most what is left of it

part() {  # part NAME LIMIT_S COMMAND...: run, log, report rc and seconds
    local name=$1 limit=$2 start rc left
    shift 2
    start=$(date +%s)
    left=$((deadline - (start - t0)))
    ((left < limit)) && limit=$left
    if ((limit < 15)); then echo "== $name: skipped, the deadline is near" | tee -a "$out/$name.log"; return; fi
    timeout "$limit" "$@" >>"$out/$name.log" 2>&1
    rc=$?
    echo "== $name: rc $rc in $(($(date +%s) - start)) s: $*" | tee -a "$out/$name.log"
}

want() { [[ " $parts " == *" $1 "* ]]; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$py" -c "import torch, transformers, lightning; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
'transformers', transformers.__version__, 'lightning', lightning.__version__)"; } 2>&1 | tee "$out/versions.log"

if want smoke; then
    smoke() {  # fit then test one smoke config on the GPU, in its own working dir
        local c=$1 dir="$out/.smoke_$1"
        mkdir -p "$dir" && cd "$dir" || return 1
        "$py" -m zoo.cli fit --config "$OLDPWD/configs/smoke/$c.yaml" --trainer.accelerator gpu --trainer.devices 1 &&
            "$py" -m zoo.cli test --config "$OLDPWD/configs/smoke/$c.yaml" --trainer.accelerator gpu \
                --trainer.devices 1 --ckpt_path "$(ls -d runs/"$c"/*/ | tail -1)checkpoints/last.ckpt"
    }
    export -f smoke
    export out py
    for c in rosa_gsm8k dpformer_movielens gentle_toy1 moment_etth1; do
        part "smoke_$c" 240 bash -c "smoke $c" &
    done
    wait
    rm -rf "$out"/.smoke_*
fi
if want dpformer; then
    part dpformer 200 "$py" benchmarks/dpformer_clipping.py --device cuda --batch 64 --vocabs 10000 50000 --steps 9
    part dpformer 150 "$py" benchmarks/dpformer_clipping.py --device cuda --batch 256 --vocabs 50000 --steps 9
fi
if want rosa; then
    part rosa 200 "$py" benchmarks/rosa_train_step.py --hidden 2048 --intermediate 5504 --layers 8 --seq 512 \
        --batch 2 --dtype bfloat16 --steps 10 --sddmm csr,blocked,gather --profile
fi
if want rosa-plan; then
    part rosa-plan 150 "$py" benchmarks/rosa_train_step.py --hidden 2048 --intermediate 5504 --layers 8 --seq 512 \
        --batch 2 --dtype bfloat16 --steps 10 --sddmm csr,csr:per-step,blocked,blocked:per-step
fi
if want moment; then
    part moment 180 "$py" benchmarks/moment_forward.py --device cuda --batch 32 --reps 10
fi
if want gentle; then
    part gentle 240 "$py" -m zoo.cli sweep configs/sweeps/gentle_toy1_official.yaml --jobs 8 --threads 1
    cmp=("$py" -m zoo.cli compare runs/sweeps/gentle_toy1_official --group_by variant --format markdown)
    { "${cmp[@]}" --metrics val/wd 'test/*'
      "${cmp[@]}" --metrics test/wd test/ks --paired_against no_ot; } >>"$out/gentle.log" 2>&1
    find runs/sweeps/gentle_toy1_official -name summary.json -o -name manifest.json | tar czf "$out/gentle_runs.tgz" -T -
fi

# the tables, for a reader of this run's output
grep -h -E "^\||^device|^Llama|^== " "$out"/dpformer.log "$out"/rosa.log "$out"/rosa-plan.log "$out"/moment.log 2>/dev/null
grep -h -E "^== " "$out"/smoke_*.log 2>/dev/null
grep -h -E "^\||^== " "$out"/gentle.log 2>/dev/null
