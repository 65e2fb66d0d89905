#!/usr/bin/env bash
# Replay speed of tiercache vs libCacheSim side by side (README, "Engine replay vs libCacheSim").
# Installs the `libcachesim` PyPI package (the C library behind libCacheSim's `cachesim`, with
# Python bindings) into a venv, builds tiercache, generates a 10^7-request zipf oracleGeneral
# trace once (240 MB, in $TMPDIR) and runs scripts/bench_vs_libcachesim.py; extra arguments go
# to it (--repeat N, --sizes 0.01,0.1, --policy lru|fifo|..., --json, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LIBCACHESIM_VENV:-${TMPDIR:-/tmp}/tiercache-libcachesim-venv}"
if ! "$venv/bin/python" -c 'import libcachesim, numpy' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'libcachesim==0.3.5' numpy
fi
cargo build --release -q -p tiercache
target="${CARGO_TARGET_DIR:-target}"
exec "$venv/bin/python" scripts/bench_vs_libcachesim.py --tiercache "$target/release/tiercache" "$@"
