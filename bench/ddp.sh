#!/usr/bin/env bash
# bench/ddp.sh BUILD_DIR — the shm collectives' all-reduce beside one core's memcpy, and the
# per-step cost of 2 trainers against 1, in one run.
#
# 1. build/bench/coll_bench (bench/coll_bench.c) for 2 and 4 processes on ResNet-50's
#    25,557,032 fp32 gradients and on 1 MiB (262,144 fp32): the median time of an all-reduce
#    (sum) among the ranks, and of one memcpy of the same buffer. Target: an all-reduce of
#    ResNet-50's gradients among 2 processes within 3x one memcpy of them.
# 2. The network world (shm/coll_net.h: trainers on several nodes) on the loopback, coll_bench
#    --net, beside torch.distributed's gloo over tcp (bench/gloo_bench.py, VISSL's CPU backend
#    across nodes) on the same buffers: 2 processes, ResNet-50's gradients, one 25 MB DDP bucket
#    and 1 MiB. No target: the figures say what a step's all-reduce costs across nodes.
# 3. `selfsup run quickstart/supervised` on 2,560 Fashion-MNIST images for one epoch: 1 trainer
#    of batch 64 (2 threads) against 2 trainers of batch 32 (1 thread each), the same global
#    batch on the same 2 cores; the median step time after the first 5 (stdout.json's btime).
#    The same for quickstart/simclr with SyncBN (the embeddings' all-gather and the batch
#    norms' sums on top of the gradients' all-reduce), on the ImageNet stem: the small-image
#    stem's 8x heavier step would hide the collectives' cost this bench is about.
# Prints Markdown tables. Exits non-zero only when a benchmark fails (a wrong sum, a crash).
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
cd "$(dirname "$0")/.."
bench="$build/bench/coll_bench"
[[ -x $bench ]] || { echo "bench/ddp.sh: $bench not found (make $bench, or make bench)" >&2; exit 2; }

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
echo "## ddp: shm all-reduce vs memcpy"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Median of 7 after 1 warm-up on each side."
echo
echo "| processes | values (fp32) | all-reduce ms | memcpy ms | all-reduce / memcpy | all-reduce GB/s per rank |"
echo "|--:|--:|--:|--:|--:|--:|"
target=""
for world in 2 4; do
    for count in 25557032 262144; do
        echo "ddp: $world processes, $count values ..." >&2
        line=$("$bench" --world "$world" --count "$count" --reps 7 | grep '^coll_bench all_reduce')
        read -r _ _ w n t m <<<"$line"
        awk -v w="$w" -v n="$n" -v t="$t" -v m="$m" 'BEGIN {
            printf "| %d | %d | %.2f | %.2f | %.2f | %.2f |\n", w, n, t * 1e3, m * 1e3, t / m, n * 4 / t / 1e9 }'
        if [[ $world == 2 && $count == 25557032 ]]; then
            target=$(awk -v t="$t" -v m="$m" 'BEGIN { r = t / m; printf "%s (%.2fx)", r <= 3 ? "met" : "NOT met", r }')
        fi
    done
done
echo
echo "Target (issue 22): ResNet-50's gradients all-reduced among 2 processes within 3x one memcpy: $target."
echo "GB/s per rank: the buffer's bytes over the all-reduce's time. 4 processes on fewer cores take turns."

# ---- the network world against gloo over tcp ----
echo
echo "| network world, 2 processes, loopback | values (fp32) | selfsup ms | torch gloo ms | selfsup / gloo |"
echo "|---|--:|--:|--:|--:|"
for count in 25557032 6553600 262144; do
    echo "ddp: the network world and gloo, $count values ..." >&2
    read -r _ _ _ _ t _ < <("$bench" --net --world 2 --count "$count" --reps 7 | grep '^coll_bench all_reduce')
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    read -r _ _ _ _ g < <(/usr/bin/python3 bench/gloo_bench.py 2 "$count" 7 "$port")
    awk -v n="$count" -v t="$t" -v g="$g" 'BEGIN { printf "| all-reduce (sum) | %d | %.2f | %.2f | %.2fx |\n", n, t * 1e3, g * 1e3, t / g }'
done
echo
echo "selfsup's network world sends every rank's buffer to rank 0, which sums in rank order (the bits of the"
echo "one-node world) and sends the result back; gloo's ring all-reduce sums in its own order."

# ---- 2 trainers against 1 on the quickstart ----
work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-ddp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$build/selfsup" dataset fashion-mnist "$work/fm" --limit 2560 >/dev/null 2>&1
data="$work/fm/disk_filelist"
step_ms() { # recipe procs batch -> median btime(ms) after the first 5 steps, and the steps
    local recipe=$1 procs=$2 batch=$3 extra=()
    [[ $recipe == supervised ]] && extra=(config.DATA.TRAIN.LABEL_PATHS="[$data/train_labels.npy]" config.TEST_MODEL=false)
    [[ $recipe == simclr ]] && extra=(config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=true
        config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.SMALL_STEM=False)
    "$build/selfsup" run quickstart/$recipe config.DISTRIBUTED.NUM_PROC_PER_NODE="$procs" \
        config.DATA.TRAIN.BATCHSIZE_PER_REPLICA="$batch" config.DATA.TRAIN.DATA_PATHS="[$data/train_images.npy]" \
        config.DATA.TRAIN.DATA_LIMIT=2560 config.OPTIMIZER.num_epochs=2 config.LOG_FREQUENCY=1 "${extra[@]}" \
        config.CHECKPOINT.DIR="$work/ckpt_${recipe}$procs" --run-dir "$work/run_${recipe}$procs" \
        >"$work/log_${recipe}$procs" 2>&1 || { cat "$work/log_${recipe}$procs" >&2; return 1; }
    /usr/bin/python3 -c '
import json, statistics, sys
t = [json.loads(l)["btime(ms)"] for l in open(sys.argv[1]) if "btime(ms)" in l][5:]
print("%.1f %d" % (statistics.median(t), len(t)))' "$work/ckpt_${recipe}$procs/stdout.json"
}
echo
echo "| quickstart, global batch 64 | median step ms | steps timed | images/s | 2 trainers / 1 |"
echo "|---|--:|--:|--:|--:|"
for recipe in supervised simclr; do
    echo "ddp: quickstart/$recipe, 1 trainer of batch 64 ..." >&2
    read -r one n1 < <(step_ms $recipe 1 64)
    echo "ddp: quickstart/$recipe, 2 trainers of batch 32 ..." >&2
    read -r two n2 < <(step_ms $recipe 2 32)
    what=$recipe; [[ $recipe == simclr ]] && what="simclr, SyncBN"
    awk -v r="$what" -v a="$one" -v n="$n1" 'BEGIN { printf "| %s: 1 trainer, batch 64, 2 threads | %.1f | %d | %.1f | |\n", r, a, n, 64000 / a }'
    awk -v r="$what" -v a="$one" -v b="$two" -v n="$n2" 'BEGIN { printf "| %s: 2 trainers, batch 32, 1 thread each | %.1f | %d | %.1f | %.2fx |\n", r, b, n, 64000 / b, b / a }'
done
echo
echo "2 trainers / 1: the step time of 2 trainers over 1's on the same cores (the all-reduce of ResNet-18's"
echo "11.2 M gradients, the broadcasts, and for SimCLR the all-gather and SyncBN's sums included)."
