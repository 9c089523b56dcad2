#!/usr/bin/env bash
# tests/gpu/run.sh [BUNDLE] — the GPU runbook: the one command a session with a GPU runs.
#
# From the bundle `make gpu-bundle` made (default build/selfsup-gpu.tar.xz), on the GPU machine:
#   1. the machine: the card, the driver, which cuDNN/cuBLAS the binaries load;
#   2. backend conformance: every engine operation on cuda against cpu (tests/gpu/backend_ops.c);
#      the NCCL world's collectives against their definitions, a rank per GPU (tests/gpu/nccl_world.c);
#   3. end to end: the SimCLR, SwAV (on ResNet-18 and on RegNetY-400MF), MoCo and NPID
#      quickstarts, 2 epochs of 5 steps (SimCLR's batch of 16: 20) from the same init and
#      the same records, on the GPU and on the CPU: losses per step, the weights after the
#      first step and at the end, against the drift between two cpu instruction sets;
#   4. selfsup-extract's features on both devices, from the same weights;
#   5. checkpoints across devices: epoch 0 on one device, resumed for epoch 1 on the other, both
#      ways, against the run that stayed on one; and on the GPU, stop-and-resume bitwise equal to
#      the uninterrupted run (deterministic algorithms);
#   6. mixed precision (MODEL.AMP_PARAMS.USE_AMP: bf16 convolutions, a ResNet trunk's activations
#      kept in bf16 NHWC between them): the SimCLR and SwAV
#      quickstarts' first 5 steps on the GPU against the fp32 cpu runs of 3, loss within 1e-2,
#      and its stop-and-resume bitwise too;
#   7. the benchmark: the ResNet-50 SimCLR step of selfsup-train (bench/gpu_train.sh), in fp32
#      and in mixed precision, and of PyTorch (bench/gpu_train_torch.py) on the same card; and
#      the same recipe under `selfsup run` fed by decode → augment → collate on the machine's
#      cores from the bundle's photos (bench/gpu_pipeline.sh: the share of the step spent
#      waiting for data);
#   8. the decode farm's figures (bench/farm.sh, issue 24) on this machine's 16 cores.
# Everything it prints goes to $OUT/runbook.log (or gpu-out/ without OUT), one line per check to
# $OUT/summary.txt; the exit status is 1 if any check failed. BENCH_MODES picks the PyTorch
# modes (default eager32,eager_bf16,compile_bf16; torch.compile takes minutes; none skips them);
# PROFILE=1 adds where the GPU time of selfsup's mixed-precision step goes (bench/gpu_profile.sh,
# Nsight Compute).
# On the device tool:
#   run: make gpu-bundle here, then device `tests/gpu/run.sh` with carry [build/selfsup-gpu.tar.xz]
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
bundle=$(realpath "${1:-build/selfsup-gpu.tar.xz}")
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
log="$out/runbook.log" summary="$out/summary.txt"
: > "$log"
: > "$summary"
work=$(mktemp -d /tmp/selfsup-gpu.XXXXXX)
tar -C "$work" -xJf "$bundle" || { echo "cannot unpack $bundle" | tee "$summary"; exit 1; }
# shellcheck source=tests/gpu/env.sh
source tests/gpu/env.sh "$work/selfsup-gpu"
export SELFSUP_CONFIGS=$repo/configs
data="$work/selfsup-gpu/data"
images=320 # the records and file lists the bundle holds (tests/gpu/bundle.sh)
compare="python3 $repo/tests/gpu/compare.py"
failed=0

# check NAME COMMAND...: run it, its output into the log, a line into the summary.
check() {
    local name=$1 t0=$SECONDS rc
    shift
    printf '\n==== %s: %s\n' "$name" "$*" >> "$log"
    "$@" >> "$log" 2>&1
    rc=$?
    local last
    last=$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-300)
    if [ $rc -eq 0 ]; then echo "ok   $name ($((SECONDS - t0)) s): $last"; else echo "FAIL $name ($((SECONDS - t0)) s, exit $rc): $last"; failed=1; fi |
        tee -a "$summary"
    return $rc
}

# train DEVICE METHOD DIR RECORDS [overrides...]: the quickstart's 2 epochs of its first 320
# images (5 steps of 64, SimCLR's 20 of 16), run where the bundle's data/ is. The cpu runs use
# the direct convolutions PyTorch uses (the quickstarts' CPU_WINOGRAD rounds differently: a
# few 1e-4 on the features, more than the parity checks below allow the two engines).
train() {
    local device=$1 method=$2 dir=$3 records=$4
    shift 4
    (cd "$work/selfsup-gpu" && selfsup-train -c "quickstart/$method" --in "file:$records" --threads 16 \
        config.MACHINE.DEVICE="$device" config.MACHINE.CPU_WINOGRAD=False config.CHECKPOINT.DIR="$dir" config.LOG_FREQUENCY=1 \
        config.DATA.TRAIN.DATA_LIMIT=$images config.OPTIMIZER.num_epochs=2 config.CHECKPOINT.OVERWRITE_EXISTING=True "$@")
}

final() { echo "$1/model_final_checkpoint_phase1.torch"; }

machine() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
    ldd "$(command -v selfsup-train)" | grep -E 'cudnn|cublas|not found'
}

# parity METHOD [overrides...]: the same 10 steps on the GPU and on the cpu, from the same init and records.
# The first step's loss must agree to fp32 rounding. After that, the two are compared against
# how far two correct fp32 engines drift apart anyway: a third run on the cpu with oneDNN held
# to SSE4.1 (other kernels, other summation orders) is the noise run (compare.py --noise): a
# ReLU input within rounding of zero flips either way and training amplifies it step by step.
parity() {
    local m=$1 it=config.CHECKPOINT.CHECKPOINT_ITER_FREQUENCY=1
    shift
    train gpu "$m" "$work/$m-gpu" "$data/$m.rec" $it "$@" && train cpu "$m" "$work/$m-cpu" "$data/$m.rec" $it "$@" &&
        ONEDNN_MAX_CPU_ISA=SSE41 train cpu "$m" "$work/$m-sse" "$data/$m.rec" $it "$@" || return 1
    local g="$work/$m-gpu" c="$work/$m-cpu" n="$work/$m-sse"
    $compare losses "$g/stdout.json" "$c/stdout.json" --rtol 1e-5 --iters 1 &&
        $compare weights "$g/model_iteration1.torch" "$c/model_iteration1.torch" --rtol 1e-4 --opt-rtol 1e-3 \
            --noise "$n/model_iteration1.torch" --factor 3 &&
        $compare losses "$g/stdout.json" "$c/stdout.json" --rtol 1e-4 --noise "$n/stdout.json" --factor 3 &&
        $compare weights "$(final "$g")" "$(final "$c")" --rtol 1e-3 --noise "$(final "$n")" --factor 3
}

# cross FIRST SECOND: epoch 0 on FIRST (its input ends there: the trainer stops after an
# iteration checkpoint), epoch 1 resumed from it on SECOND. The checkpoint is device-neutral
# when the first step after the resume (on SECOND) has the loss the run that stayed on FIRST
# had there: the same weights, one forward apart.
cross() {
    local first=$1 second=$2 dir="$work/simclr-$1-then-$2"
    local after=$((images / $(selfsup config show quickstart/simclr --key config.DATA.TRAIN.BATCHSIZE_PER_REPLICA) + 1))
    train "$first" simclr "$dir" "$data/simclr_e0.rec"
    [ -e "$dir/checkpoint.torch" ] || { echo "no checkpoint from the $first run"; return 1; }
    train "$second" simclr "$dir" "$data/simclr.rec" config.CHECKPOINT.OVERWRITE_EXISTING=False &&
        $compare losses "$dir/stdout.json" "$work/simclr-$first/stdout.json" --rtol 1e-5 --iters "$after"
}

# resume_bitwise UNINTERRUPTED [overrides...]: GPU epoch 0, stop, resume: bitwise the
# uninterrupted GPU run in $work/UNINTERRUPTED made with the same overrides (the backend
# chooses only deterministic algorithms and sums in a fixed order, in fp32 and in bf16 alike).
resume_bitwise() {
    local whole="$work/$1" dir="$work/$1-resumed"
    shift
    train gpu simclr "$dir" "$data/simclr_e0.rec" "$@"
    train gpu simclr "$dir" "$data/simclr.rec" config.CHECKPOINT.OVERWRITE_EXISTING=False "$@" &&
        $compare same "$(final "$dir")" "$(final "$whole")"
}

# amp_parity METHOD: parity's run with mixed precision on the GPU, against its fp32 cpu run.
# bf16 rounds each convolution's inputs and outputs (and a ResNet trunk's activations and their
# gradients, which stay bf16 from layer to layer) to 8 bits of mantissa, so the loss moves
# by about 1e-3; training then amplifies any difference (parity's noise run), so the first 5
# steps are held to 1e-2, the later ones only printed.
amp_parity() {
    local m=$1 d="$work/$1-gpu-amp"
    train gpu "$m" "$d" "$data/$m.rec" config.MODEL.AMP_PARAMS.USE_AMP=True || return 1
    $compare losses "$d/stdout.json" "$work/$m-cpu/stdout.json" --rtol 1 || return 1
    $compare losses "$d/stdout.json" "$work/$m-cpu/stdout.json" --rtol 1e-2 --iters 1,2,3,4,5
}

# device_memory DIR: a GPU run's log lines carry the device's peak memory (peak_mem(M), as
# VISSL's torch.cuda.max_memory_allocated): at least the quickstart's parameters, gradients
# and momentum (3 × 43.9 MiB for its ResNet-18 and head), and less than the card has.
device_memory() {
    python3 - "$1/stdout.json" <<'PY'
import json, sys
peak = max(json.loads(l)["peak_mem(M)"] for l in open(sys.argv[1]))
print(f"peak device memory {peak:.0f} MiB")
sys.exit(0 if 3 * 43.9 <= peak < 139 * 1024 else 1)
PY
}

# extract DEVICE DIR: the extraction quickstart (eval mode: the folded conv+BN path) with the
# SimCLR GPU run's final weights, 320 images.
extract() {
    (cd "$work/selfsup-gpu" && selfsup-extract -c quickstart/extract_features --in "file:$data/extract.rec" \
        --output "$2" --threads 16 config.MACHINE.DEVICE="$1" config.DATA.TRAIN.DATA_LIMIT=$images \
        config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$(final "$work/simclr-gpu")" "${@:3}")
}

# extract_parity: the same features on both devices, to fp32 rounding of a forward pass.
extract_parity() {
    extract gpu "$work/features-gpu" && extract cpu "$work/features-cpu" &&
        $compare features "$work/features-gpu" "$work/features-cpu" --rtol 1e-4
}

# extract_parity_amp: the features in mixed precision (the trunk's activations bf16 NHWC from
# convolution to convolution) against the cpu's fp32 ones: 2^-9 of rounding a layer, so 5e-2.
extract_parity_amp() {
    extract gpu "$work/features-gpu-amp" config.MODEL.AMP_PARAMS.USE_AMP=True &&
        $compare features "$work/features-gpu-amp" "$work/features-cpu" --rtol 5e-2
}

bench_selfsup() { bench/gpu_train.sh "$out/bench_selfsup.json"; }
bench_selfsup_amp() { AMP=1 bench/gpu_train.sh "$out/bench_selfsup_bf16.json"; }
bench_pipeline() { PHOTOS="$data/photos" timeout 300 bench/gpu_pipeline.sh "$out/bench_pipeline.json"; }
# farm_scaling: issue 24's farm figures (bench/farm.sh) on this machine's cores, which a 2-core
# development machine lacks: the tcp transport against raw ZeroMQ, and 1 against 2 farm hosts.
farm_scaling() {
    SELFSUP=$(command -v selfsup) FARM_BENCH=$(command -v farm_bench) FARM_CORPUS="$data/photos" FARM_EPOCHS=8 \
        FARM_ROUNDS=2 timeout 300 bench/farm.sh > "$out/farm.md" || return 1
    cat "$out/farm.md"
    awk -F'|' '/ bytes \|/ {w = w $7} /^\| 2 \|/ {h = $5} END {print "farm: transport / raw ZeroMQ" w "; 2 hosts" h "x one"}' \
        "$out/farm.md"
}

bench_torch() {
    [ "${BENCH_MODES:-}" = none ] && { echo "skipped (BENCH_MODES=none)"; return 0; }
    timeout 420 python3 bench/gpu_train_torch.py --modes "${BENCH_MODES:-eager32,eager_bf16,compile_bf16}" \
        --json "$out/bench_torch.json"
}

check machine machine
check backend-ops backend-ops --summary "$out/backend_ops.txt"
check nccl-world nccl-world
check simclr-parity parity simclr
check swav-parity parity swav
check regnet-parity parity swav_regnet
check efficientnet-parity parity swav_efficientnet
check alexnet-parity parity rotnet_alexnet
check moco-parity parity moco
# (320 images: 256 negatives, not the quickstart's 4096, which would outnumber the memory's rows)
check npid-parity parity npid config.LOSS.nce_loss_with_memory.negative_sampling_params.num_negatives=256
# (its memory pass from epoch 0's records; 10 clusters a head: k-means' E-step on 320 rows, where
# a row within rounding of two centroids would change its cluster between the devices)
check dc-parity parity deepclusterv2 --memory-in "file:$data/deepclusterv2_e0.rec" \
    "config.LOSS.deepclusterv2_loss.num_clusters=[10,10,10]"
check gpu-memory device_memory "$work/simclr-gpu"
check extract-parity extract_parity
check extract-parity-amp extract_parity_amp
check resume-gpu-to-cpu cross gpu cpu
check resume-cpu-to-gpu cross cpu gpu
check resume-gpu-bitwise resume_bitwise simclr-gpu
check amp-simclr amp_parity simclr
check amp-swav amp_parity swav
check resume-gpu-bitwise-amp resume_bitwise simclr-gpu-amp config.MODEL.AMP_PARAMS.USE_AMP=True
check bench-selfsup bench_selfsup
check bench-selfsup-bf16 bench_selfsup_amp
check bench-torch bench_torch
# last: newer, and the ones a tight time limit should cut
check bench-pipeline bench_pipeline
check farm-scaling farm_scaling
[ "${PROFILE:-0}" = 1 ] && check profile env AMP=1 bench/gpu_profile.sh "$out/profile.txt"
rm -rf "$work"
echo "runbook: $(grep -c '^ok' "$summary") passed, $(grep -c '^FAIL' "$summary") failed" | tee -a "$summary"
exit $failed
