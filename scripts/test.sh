#!/usr/bin/env bash
# The test command README gives and CI runs: formatting, lints, rustdoc links, the whole test
# suite (real FUSE mounts: needs root and /dev/fuse), the Debian package, then each benchmark
# once as a smoke test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
# Broken intra-doc links (and other rustdoc warnings) fail the run.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo nextest run --workspace --release --no-fail-fast
echo "== Debian package"
# The suite built the binary and the C library; package those rather than rebuild them.
scripts/package.sh --no-build
echo "== loom model check of the zero-copy pin protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p tiercache-memtier --test loom_pin_protocol --release
echo "== benchmark smoke runs"
cargo bench -p tiercache-core --bench replay -- --test
./target/release/tiercache bench sim --requests 1000000
./target/release/tiercache bench classes --requests 400000 --cache-blocks 4000 --repeat 1
./target/release/tiercache bench fuse --file-size 32M --runtime 1
./target/release/tiercache bench meta --files 2000 --dirs 20 --write-files 2000 --write-dirs 20 --hdd-files 200
./target/release/tiercache bench remote --memory 256K --seq-size 4M --servers 1,2
./target/release/tiercache bench flash --cache 16M --rand-writes 12 --rand-reads 32 --wait-ms 300
./target/release/tiercache bench zerocopy --seconds 0.2
./target/release/tiercache bench web --seconds 1 --bulk 16M --pages 10 --backup-streams 2
