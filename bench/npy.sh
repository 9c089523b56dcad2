#!/usr/bin/env bash
# bench/npy.sh BUILD_DIR [SIZE...] — lib/npy's speed beside numpy's, in one run.
#
# lib/npy (build/bench/npy_bench) against numpy (bench/npy_bench.py, Debian's
# /usr/bin/python3): write, streamed write, read + sum, mmap + sum, on the sizes given
# (default 10000x2048:f4 50000x2048:f4 1000000x1:i8). Both sides write into the same temp
# dir, their files must be byte-identical and their sums equal. Prints a Markdown table with
# ratio = numpy seconds / selfsup seconds (> 1: selfsup is faster) and the BLAS each side has
# loaded (neither calls one here). Exits non-zero when either side fails or the two disagree.
# See bench/README.md.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."
source bench/peers.sh

npy_bench="$build/bench/npy_bench"
python=/usr/bin/python3
if [[ ! -x $npy_bench ]]; then
    echo "bench/npy.sh: $npy_bench not found; build it with: make $npy_bench (or make bench)" >&2
    exit 2
fi
if ! "$python" -c 'import numpy' 2>/dev/null; then
    echo "bench/npy.sh: $python cannot import numpy; install python3-numpy (make deps)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-npy-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Run one side; on failure show what it printed and stop.
run_side() {
    local name=$1 out=$2
    shift 2
    if ! "$@" >"$out" 2>"$out.err"; then
        echo "bench/npy.sh: the $name side failed: $*" >&2
        cat "$out" "$out.err" >&2
        exit 1
    fi
}

start=$SECONDS
echo "npy: selfsup (lib/npy) ..." >&2
run_side selfsup "$work/selfsup.txt" "$npy_bench" --dir "$work" --keep "$@"
echo "npy: numpy ..." >&2
run_side numpy "$work/numpy.txt" "$python" bench/npy_bench.py --dir "$work" --keep "$@"
elapsed=$((SECONDS - start))

# Same checksums on both sides (the data make every sum exact, in any order).
if ! diff <(grep '^# sum ' "$work/selfsup.txt") <(grep '^# sum ' "$work/numpy.txt") >&2; then
    echo "bench/npy.sh: selfsup and numpy disagree on the sums above" >&2
    exit 1
fi
# npy_write must produce what np.save produces, byte for byte.
identical=0
for f in "$work"/selfsup_*.npy; do
    [[ -e $f ]] || continue
    twin="$work/numpy_${f##*/selfsup_}"
    if ! cmp "$f" "$twin" >&2; then
        echo "bench/npy.sh: $f and $twin differ; npy_write should match np.save" >&2
        exit 1
    fi
    identical=$((identical + 1))
done

fstype=$(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work")
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
numpy_version=$("$python" -c 'import numpy; print(numpy.__version__)')

echo "## npy: lib/npy vs numpy $numpy_version"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(uname -sr), files on $fstype (${TMPDIR:-/tmp})."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Both sides ran in this run (${elapsed}s)."
echo "Median of 5 after 1 warm-up; read and mmap read files in the page cache (both sides)."
echo "Files byte-identical: $identical/$identical; sums equal on both sides."
selfsup_blas_line "none (lib/npy: syscalls and a summing loop)."
echo "$(peers_blas_line numpy) (loaded; not called by these ops)"
echo
echo "| operation | size | selfsup s | numpy s | ratio (numpy/selfsup) | selfsup GB/s |"
echo "|---|---|--:|--:|--:|--:|"
awk '
    $1 == "npy_bench"   { key = $2 " " $3 " " $4; s[key] = $5; g[key] = $6; order[++n] = key }
    $1 == "numpy_bench" { key = $2 " " $3 " " $4; p[key] = $5 }
    END {
        bad = 0
        for (i = 1; i <= n; i++) {
            k = order[i]
            if (!(k in p)) { print "bench/npy.sh: numpy has no result for " k > "/dev/stderr"; bad = 1; continue }
            split(k, f, " ")
            r = s[k] > 0 ? sprintf("%.2f", p[k] / s[k]) : "n/a"
            printf "| %s | %s %s | %.4g | %.4g | %s | %.2f |\n", f[1], f[2], f[3], s[k], p[k], r, g[k]
        }
        if (n == 0) { print "bench/npy.sh: no selfsup results" > "/dev/stderr"; bad = 1 }
        exit bad
    }' "$work/selfsup.txt" "$work/numpy.txt"
echo
echo "write_stream = plain write, no fsync (npy_header + fallocate + write(2); np.save(path)),"
echo "write = atomic write with fsync (npy_write; numpy: np.save to a temp file + fsync +"
echo "os.replace), read = load into memory + sum in double, mmap = map + sum in double."
