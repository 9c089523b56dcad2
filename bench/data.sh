#!/usr/bin/env bash
# bench/data.sh BUILD_DIR [N] — the data pipeline (decode, SimCLR, SwAV, eval) on one core,
# selfsup beside VISSL's way (PIL + torchvision, bench/data_bench.py), on the same photos, in
# one run.
#
# The photo corpus (bench/make-photo-corpus: ImageNet-like JPEGs cut from Debian's
# mate-backgrounds) is made once under ${SELFSUP_BENCH_DATA:-/tmp/selfsup-bench}/photos.
# Both sides are pinned to CPU 0 with one thread and run N images (default 200) per
# pipeline, alternating one pass each for DATA_ROUNDS rounds (default 3); medians. selfsup is timed three times: as it runs under `selfsup run`
# (JPEGs decoded only as far as the crops need, uint8 crops; ToTensor / Normalize left to the
# trainer's device), "+float" (float32 CHW made on the CPU, as VISSL hands it to its collator)
# and with whole-image decoding (selfsup-decode without --crop). Prints a Markdown table with
# images/s and ratios (> 1: faster), and the BLAS each side has loaded (neither calls one here).
set -euo pipefail
build=${1:-build}
n=${2:-200}
cd "$(dirname "$0")/.."
source bench/peers.sh
bench="$build/bench/data_bench"
python=/usr/bin/python3
[[ -x $bench ]] || { echo "bench/data.sh: $bench not found (make $bench)" >&2; exit 2; }
corpus=${SELFSUP_BENCH_DATA:-/tmp/selfsup-bench}/photos
if [[ ! -d $corpus/train ]]; then
    echo "data: making a photo corpus of 200 JPEGs in $corpus ..." >&2
    ./bench/make-photo-corpus 200 "$corpus" >&2
fi
rounds=${DATA_ROUNDS:-3}

# Each pipeline alternates: selfsup one timed pass, PIL one timed pass, `rounds` times, so both
# sides are measured in the same minutes (this shared VM's speed drifts by ±20% over minutes);
# the table gives the medians and the median of the per-round ratios.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
declare -A ours_v theirs_v ratio_v
for p in decode simclr swav eval; do
    for ((r = 0; r < rounds; r++)); do
        o=$("$bench" --dir "$corpus" --n "$n" --reps 1 --cpu 0 --pipelines "$p")
        t=$("$python" bench/data_bench.py --dir "$corpus" --n "$n" --reps 1 --cpu 0 --pipelines "$p" | grep -v '^#')
        b=$(awk -v p=$p '$2 == p {print $3}' <<<"$t")
        for v in "" "+float" "+nocrop"; do
            a=$(awk -v p="$p$v" '$2 == p {print $3}' <<<"$o")
            [[ -n $a ]] || continue
            ours_v[$p$v]+="$a "
            ratio_v[$p$v]+="$(echo "$a / $b" | bc -l) "
        done
        theirs_v[$p]+="$b "
    done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }

echo "## data: decode and augment, one core, selfsup vs PIL + torchvision (VISSL's DataLoader worker)"
echo
echo "Machine: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); CPU 0 only, one thread each;"
echo "$n images of $corpus ($(find "$corpus" -name '*.JPEG' | wc -l) ImageNet-like JPEGs); $rounds alternating rounds, medians; $(date -u '+%Y-%m-%d %H:%M UTC')."
selfsup_blas_line "none (libjpeg-turbo and selfsup's own augment loops)."
echo "$(peers_blas_line numpy torch torchvision PIL) (loaded; not called by these pipelines)"
echo
echo "| pipeline | selfsup img/s | selfsup +float img/s | selfsup whole-image decode img/s | PIL+torchvision img/s | ratio | ratio +float | ratio whole-image decode | ratios, each round |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|---|"
for p in decode simclr swav eval; do
    rounds_text=$(tr ' ' '\n' <<<"${ratio_v[$p]}" | grep . | xargs printf '%.2f ' | sed 's/ $//')
    if [[ -n ${ours_v[$p+float]:-} ]]; then
        printf '| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %s |\n' "$p" "$(med "${ours_v[$p]}")" \
            "$(med "${ours_v[$p+float]}")" "$(med "${ours_v[$p+nocrop]}")" "$(med "${theirs_v[$p]}")" \
            "$(med "${ratio_v[$p]}")" "$(med "${ratio_v[$p+float]}")" "$(med "${ratio_v[$p+nocrop]}")" "$rounds_text"
    else
        printf '| %s | %.1f | — | — | %.1f | %.2f | — | — | %s |\n' "$p" "$(med "${ours_v[$p]}")" "$(med "${theirs_v[$p]}")" \
            "$(med "${ratio_v[$p]}")" "$rounds_text"
    fi
done
echo
echo "decode: read + decode to RGB. simclr: 2 views of RandomResizedCrop 224, flip, ColorDistortion(1.0),"
echo "GaussianBlur(p 0.5), ToTensor, Normalize, simclr_collator. swav: 2x224 + 6x96 multi-crop, same colour"
echo "transforms, multicrop_collator. eval: Resize 256, CenterCrop 224, ToTensor, Normalize, default_collate."
echo "Targets (issue 4): >= 10x for SimCLR and SwAV, >= 1.5x for decode only."
