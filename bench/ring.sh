#!/usr/bin/env bash
# bench/ring.sh BUILD_DIR [ring_bench options] — shm/ring's speed beside one core's memcpy
# and a pipe, in one run.
#
# Runs build/bench/ring_bench (bench/ring_bench.c): throughput of 4 KiB, 256 KiB and 4 MiB
# records between processes, 1 producer x 1 consumer and 4 x 4, beside memcpy and a pipe
# moving the same records, then the hand-off latency of small records at 50,000/s and
# 1,000/s over the ring and over a pipe. Prints Markdown tables: GB/s, ring/memcpy and
# ring/pipe ratios, latency in µs, and whether the issue's targets are met. Exits non-zero
# only when the benchmark fails (wrong checksums, a crash); speed is reported, not judged.
# See bench/README.md.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."

ring_bench="$build/bench/ring_bench"
if [[ ! -x $ring_bench ]]; then
    echo "bench/ring.sh: $ring_bench not found; build it with: make $ring_bench (or make bench)" >&2
    exit 2
fi

out=$(mktemp "${TMPDIR:-/tmp}/selfsup-ring-bench.XXXXXX")
trap 'rm -f "$out" "$out.err"' EXIT

start=$SECONDS
echo "ring: shm/ring, memcpy and a pipe ..." >&2
if ! "$ring_bench" "$@" >"$out" 2>"$out.err"; then
    echo "bench/ring.sh: ring_bench failed: $ring_bench $*" >&2
    cat "$out" "$out.err" >&2
    exit 1
fi
elapsed=$((SECONDS - start))

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
load=$(cut -d' ' -f1-3 /proc/loadavg)

echo "## ring: shm/ring vs memcpy and a pipe"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(uname -sr); load average before: $load."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). All of it ran in this run (${elapsed}s)."
grep '^# ring_bench ' "$out" | sed 's/^# ring_bench [^:]*: /Setup: /; s/$/./'
echo
awk '
    $1 != "ring_bench" { next }
    $2 == "latency" { lat[$3 " " $4] = $5 " " $6; gaps[$4] = 1; next }
    { v[$2 " " $3] = $4; if (!($3 in seen)) { seen[$3] = 1; sizes[++n] = $3 } }
    function label(b) { return b >= 1048576 ? b / 1048576 " MiB" : b / 1024 " KiB" }
    function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "n/a" }
    END {
        print "| record | memcpy GB/s | ring 1×1 GB/s | ring/memcpy | pipe 1×1 GB/s | ring/pipe | ring 4×4 GB/s |"
        print "|---|--:|--:|--:|--:|--:|--:|"
        for (i = 1; i <= n; i++) {
            s = sizes[i]; m = v["memcpy " s]; r = v["ring1x1 " s]; p = v["pipe1x1 " s]
            printf "| %s | %.2f | %.2f | %s | %.2f | %s | %.2f |\n", label(s), m, r, ratio(r, m), p, ratio(r, p), v["ring4x4 " s]
        }
        print ""
        print "| hand-off latency | ring median µs | ring p99 µs | pipe median µs | pipe p99 µs |"
        print "|---|--:|--:|--:|--:|"
        k = 0
        for (g in gaps) order[++k] = g + 0
        for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (order[b] < order[a]) { t = order[a]; order[a] = order[b]; order[b] = t }
        for (a = 1; a <= k; a++) {
            g = order[a]
            split(lat["ring " g], rl, " "); split(lat["pipe " g], pl, " ")
            printf "| a record every %d µs (%d/s) | %.2f | %.2f | %.2f | %.2f |\n", g, 1000000 / g, rl[1], rl[2], pl[1], pl[2]
            if (a == 1) best = rl[1]
        }
        big = 4194304
        m = v["memcpy " big]; r = v["ring1x1 " big]; p = v["pipe1x1 " big]
        print ""
        if (r > 0) {
            printf "Targets: 1×1 4 MiB ≥ 0.5× memcpy: %s (%.2f×); ≥ 5× a pipe: %s (%.1f×); ", (r >= 0.5 * m ? "met" : "NOT met"), r / m, (r >= 5 * p ? "met" : "NOT met"), r / p
        }
        if (k > 0) printf "median hand-off ≤ 10 µs: %s (%.2f µs at the highest rate).\n", (best <= 10 ? "met" : "NOT met"), best
    }' "$out"
echo
echo "GB/s = payload bytes / 10⁹ / seconds, median of the runs (# lines of ring_bench). ring:"
echo "the producer builds each record in its slot (memcpy from a source record), the consumer"
echo "sums every 64-bit word in place; pipe: the same record built in a buffer, write(2) into"
echo "a 1 MiB pipe, read(2) whole into a buffer, summed; memcpy: one core copying the source"
echo "record into a ring-sized set of buffers. Latency: stamp before publish, clock after"
echo "ring_read_begin / read(2) returns."
