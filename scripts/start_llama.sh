#!/usr/bin/env bash
# Start the two llama-servers the tests use, on loopback, and wait until both are healthy:
#   chat (SmolLM2-135M, alias smollm2, 4 slots, /metrics on)  http://127.0.0.1:${HOROS_LLAMA_CHAT_PORT:-18080}
#   embeddings (MiniLM, alias minilm)                         http://127.0.0.1:${HOROS_LLAMA_EMBED_PORT:-18081}
# Runs scripts/setup_llama.sh first (a no-op once installed). PID and log files go to
# ${HOROS_RUN_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/run}/llama-{chat,embed}.{pid,log}; stop with stop_llama.sh.
# A server already answering on its port is left alone. Then:
#   export HOROS_LLAMA_CHAT_URL=http://127.0.0.1:18080 HOROS_LLAMA_EMBED_URL=http://127.0.0.1:18081
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${HOROS_CACHE:-$HOME/.cache/horos}
RUN=${HOROS_RUN_DIR:-$CACHE/run}
CHAT_PORT=${HOROS_LLAMA_CHAT_PORT:-18080}
EMBED_PORT=${HOROS_LLAMA_EMBED_PORT:-18081}
THREADS=${HOROS_LLAMA_THREADS:-1}
mkdir -p "$RUN"

ENV_FILE=$("$HERE/setup_llama.sh" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"

healthy() { curl -sf --max-time 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1; }

launch() { # name port args...
    local name=$1 port=$2; shift 2
    if healthy "$port"; then
        echo "[start_llama] $name already answers on port $port" >&2
        return
    fi
    nohup "$HOROS_LLAMA_SERVER" --host 127.0.0.1 --port "$port" "$@" > "$RUN/llama-$name.log" 2>&1 &
    echo $! > "$RUN/llama-$name.pid"
}

launch chat "$CHAT_PORT" -m "$HOROS_SMOLLM2_GGUF" --alias smollm2 -t "$THREADS" -np 4 -c 4096 --metrics
launch embed "$EMBED_PORT" -m "$HOROS_MINILM_GGUF" --alias minilm --embeddings \
    -t "$THREADS" -np 4 -c 2048 -b 2048 -ub 2048 --metrics

for port in "$CHAT_PORT" "$EMBED_PORT"; do
    for _ in $(seq 1 600); do healthy "$port" && break; sleep 0.1; done
    if ! healthy "$port"; then
        echo "[start_llama] server on port $port did not become healthy; see $RUN/llama-*.log" >&2
        exit 1
    fi
done
echo "[start_llama] chat http://127.0.0.1:$CHAT_PORT  embeddings http://127.0.0.1:$EMBED_PORT" >&2
