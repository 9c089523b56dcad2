# bench/peers.sh — sourced by bench/*.sh: give the reference side an optimised BLAS, and say
# which BLAS each side ran on.
#
# peers_install: the Python side (numpy, scipy/sklearn, Debian's torch, faiss) calls whatever
# libblas.so.3 / liblapack.so.3 Debian's alternatives point at; `make deps` installs only the
# reference (netlib) BLAS, which no user would time against. This installs, from Debian, when
# missing: libopenblas0-pthread (its postinst switches both alternatives to OpenBLAS),
# python3-faiss (the kNN benchmark's FAISS peer) and python3-threadpoolctl (BLAS versions and
# threads in the report). As root, or through sudo, as the Makefile's `deps` target does. If
# it cannot, it says that the reference side runs on the reference BLAS and the benchmarks go
# on. BENCH_PEERS_INSTALL=0 skips it (to measure against the reference BLAS on purpose); run.sh
# installs once and exports BENCH_PEERS_INSTALLED=1 so the scripts it runs do not ask again.
#
# peers_blas_line MODULE...: one line, "BLAS, reference side (MODULE...): ..." (bench/peer_blas.py: the
# library the Python side loads after importing MODULEs, resolved through /proc/self/maps).
# selfsup_blas_line WHAT: one line, "BLAS, selfsup: WHAT", for the C side; onednn_version.

PEER_PKGS=(libopenblas0-pthread python3-faiss python3-threadpoolctl)
PEER_PYTHON=${PEER_PYTHON:-/usr/bin/python3}
PEER_ALTERNATIVE=/etc/alternatives/libblas.so.3-x86_64-linux-gnu

# The packages of PEER_PKGS that dpkg does not have installed.
peers_missing() {
    local p
    for p in "${PEER_PKGS[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

# apt-get as root, else through sudo (asking for a password only on a terminal).
peers_apt() {
    if [[ $(id -u) == 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        if [[ -t 0 ]]; then sudo "$@"; else sudo -n "$@"; fi
    else
        return 1
    fi
}

# Whether libblas.so.3 now resolves to the reference BLAS (Debian's .../blas/ folder).
peers_on_reference_blas() {
    [[ $(readlink -f "$PEER_ALTERNATIVE" 2>/dev/null) == */blas/libblas.so* ]]
}

peers_install() {
    [[ -z ${BENCH_PEERS_INSTALLED:-} ]] || return 0
    export BENCH_PEERS_INSTALLED=1
    if ! command -v dpkg-query >/dev/null; then
        echo "bench: not Debian; the reference side keeps this system's BLAS (see the BLAS lines)" >&2
        return 0
    fi
    local missing
    missing=$(peers_missing | xargs)
    if [[ -n $missing && ${BENCH_PEERS_INSTALL:-1} != 0 ]]; then
        echo "bench: installing the reference side's peers: $missing" >&2
        local log
        log=$(mktemp)
        if ! { peers_apt apt-get update -qq &&
            peers_apt env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
            tail -5 "$log" >&2
            echo "bench: could not install $missing (needs root or sudo); going on without them" >&2
        fi
        rm -f "$log"
    fi
    if peers_on_reference_blas; then
        echo "bench: NOTE: libblas.so.3 is the reference (netlib) BLAS, so numpy, torch, sklearn and faiss" >&2
        echo "bench: run on it, far slower than on OpenBLAS or MKL: the ratios below flatter selfsup." >&2
    fi
}

# One line for the reference side: the BLAS it loads with these modules.
peers_blas_line() {
    local line
    line=$("$PEER_PYTHON" "$(dirname "${BASH_SOURCE[0]}")/peer_blas.py" "$@" 2>/dev/null) || line="BLAS ($*): could not import them"
    echo "BLAS, reference side ${line#BLAS }"
}

# One line for selfsup's side: the C benchmarks state what they call, e.g.
#   selfsup_blas_line "dnnl_sgemm, $(onednn_version)".
selfsup_blas_line() {
    echo "BLAS, selfsup: $*"
}

# "oneDNN VERSION", the oneDNN selfsup links (its GEMM and convolutions are its own JIT kernels).
onednn_version() {
    local v
    v=$(dpkg-query -W -f='${Version}' libdnnl2 2>/dev/null | cut -d- -f1)
    echo "oneDNN ${v:-(version unknown)}"
}
