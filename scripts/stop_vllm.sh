#!/usr/bin/env bash
# Stop the vLLM servers started by scripts/start_vllm.sh and scripts/start_vllm_visual.sh (by
# their PID files only).
set -uo pipefail
RUN=${HOROS_RUN_DIR:-${HOROS_CACHE:-$HOME/.cache/horos}/run}
for name in chat embed visual; do
    pidfile="$RUN/vllm-$name.pid"
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"   # vLLM shuts its engine core process down on SIGTERM
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
done
