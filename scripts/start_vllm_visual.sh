#!/usr/bin/env bash
# Start real vLLM (CPU) serving a tiny ColPali model for the visual-search end-to-end test, on
# loopback, and wait until healthy: http://127.0.0.1:${HOROS_VLLM_VISUAL_PORT:-18084}, served as
# tiny-colpali with --runner pooling (vLLM's /pooling, task token_embed).
# The model (ColPaliForRetrieval, random weights, word-level tokenizer) is made locally by
# scripts/make_tiny_colpali.py with the installed transformers (no hub access), once, in
# <vllm cache>/models/tiny-colpali. Runs scripts/setup_vllm.sh first (a no-op once installed).
# Start-up takes about a minute. PID and log: ${HOROS_RUN_DIR:-$CACHE/run}/vllm-visual.{pid,log};
# stop with: kill "$(cat "$RUN/vllm-visual.pid")".
# Then: HOROS_VLLM_VISUAL_URL=http://127.0.0.1:18084 cargo test -p ingest-pipeline --test e2e_vllm_visual
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
RUN=${HOROS_RUN_DIR:-$CACHE/run}
PORT=${HOROS_VLLM_VISUAL_PORT:-18084}
START_TIMEOUT=${HOROS_VLLM_START_TIMEOUT:-600}
mkdir -p "$RUN"

ENV_FILE=$("$HERE/setup_vllm.sh" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"
MODEL_DIR=$(dirname "$HOROS_VLLM_CHAT_MODEL_DIR")/tiny-colpali

if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
    "$HOROS_VLLM_PYTHON" "$HERE/make_tiny_colpali.py" "$MODEL_DIR"
fi
if curl -sf --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "[start_vllm_visual] already answers on port $PORT" >&2
    exit 0
fi
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} \
VLLM_CACHE_ROOT="$HOROS_VLLM_CACHE_ROOT" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    nohup "$HOROS_VLLM_PYTHON" -m vllm.entrypoints.openai.api_server \
    --host 127.0.0.1 --port "$PORT" --enforce-eager --model "$MODEL_DIR" \
    --served-model-name tiny-colpali --runner pooling --dtype float32 --max-model-len 512 \
    > "$RUN/vllm-visual.log" 2>&1 &
pid=$!
echo $pid > "$RUN/vllm-visual.pid"
t0=$(date +%s)
for _ in $(seq 1 "$START_TIMEOUT"); do
    if curl -sf --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
        echo "[start_vllm_visual] healthy on port $PORT after $(( $(date +%s) - t0 )) s" >&2
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "[start_vllm_visual] vLLM exited during start-up; last log lines:" >&2
        tail -n 30 "$RUN/vllm-visual.log" >&2
        exit 1
    fi
    sleep 1
done
echo "[start_vllm_visual] not healthy after ${START_TIMEOUT}s; see $RUN/vllm-visual.log" >&2
exit 1
