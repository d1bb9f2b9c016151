#!/usr/bin/env bash
# Runs the libFuzzer target template_parse on a stable toolchain, without cargo-fuzz: the same
# coverage instrumentation cargo-fuzz asks rustc for (stable -C flags), without a sanitizer
# (AddressSanitizer needs nightly's -Zsanitizer; horos-manifest has no unsafe code).
#
#   manifest/fuzz/run-stable.sh [SECONDS] [CORPUS_DIR]     (default: 60 s, fuzz/corpus/template_parse)
#
# With nightly and cargo-fuzz, `cargo +nightly fuzz run template_parse` does the same with
# AddressSanitizer. A crash leaves its input in fuzz/artifacts/template_parse/.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
corpus="${2:-corpus/template_parse}"
target="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target: the flags reach the fuzz target and its dependencies, not the build scripts.
cargo build --release --bin template_parse --target "$target"
mkdir -p "$corpus" artifacts/template_parse
exec "target/$target/release/template_parse" -max_total_time="$seconds" -max_len=4096 \
    -timeout=10 -artifact_prefix=artifacts/template_parse/ "$corpus"
