#!/usr/bin/env bash
# A llama-server's cold load against its wake from sleep, for the same GGUF on the GPU
# (issue 35's GPU check; docs/gpu-checks.md). Usage:
#   scripts/gpu_check_sleep.sh LLAMA_SERVER MODEL.gguf [ROUNDS]
# LLAMA_SERVER: a llama-server built with CUDA (llama.cpp's source distribution, cmake
# -DGGML_CUDA=ON), with --sleep-idle-seconds. Prints one line per round and the medians:
#   cold_s  process start to /health 200, every layer on the GPU (-ngl 99)
#   first_s the first completion after the start
#   wake_s  a completion that wakes it after --sleep-idle-seconds put it to sleep
set -euo pipefail
server=${1:?llama-server}
model=${2:?model.gguf}
rounds=${3:-3}
port=${PORT:-18431}
idle=2
url="http://127.0.0.1:$port"
now() { date +%s.%N; }
chat() {
    curl -sf -m 300 "$url/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}' >/dev/null
}
asleep() { curl -sf "$url/props" | grep -q '"is_sleeping":true'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
colds=() wakes=()
for r in $(seq "$rounds"); do
    t0=$(now)
    "$server" -m "$model" --host 127.0.0.1 --port "$port" -ngl 99 -c 4096 \
        --sleep-idle-seconds "$idle" >"/tmp/gpu_check_sleep.$r.log" 2>&1 &
    pid=$!
    until curl -sf "$url/health" >/dev/null; do
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "/tmp/gpu_check_sleep.$r.log"; exit 1; }
        sleep 0.05
    done
    cold=$(echo "$(now) - $t0" | bc)
    t1=$(now); chat; first=$(echo "$(now) - $t1" | bc)
    for _ in $(seq 600); do asleep && break; sleep 0.1; done
    asleep || { echo "round $r: never fell asleep"; kill "$pid"; exit 1; }
    t2=$(now); chat; wake=$(echo "$(now) - $t2" | bc)
    echo "round $r: cold_s=$cold first_s=$first wake_s=$wake"
    colds+=("$cold") wakes+=("$wake")
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
echo "median cold_s=$(printf '%s\n' "${colds[@]}" | median) wake_s=$(printf '%s\n' "${wakes[@]}" | median)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
