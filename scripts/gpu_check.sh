#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, run on a GPU machine over binaries built elsewhere:
#   scripts/gpu_check.sh BIN_DIR OUT_DIR
# BIN_DIR holds horos-ref, horos-fakeai and the gpu-alloc test binaries nvml-* and nvml_pool-*
# (see docs/gpu-checks.md for how they are built). Writes its log and the fetched pages to OUT_DIR.
set -uo pipefail
bin=$1 out=$2
mkdir -p "$out"
log="$out/gpu_check.log"
say() { echo "[gpu-check] $*" | tee -a "$log"; }
fail=0

say "machine: $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu --format=csv,noheader 2>&1)"

for t in "$bin"/nvml-* "$bin"/nvml_pool-*; do
    say "test binary $(basename "$t")"
    if HOROS_REQUIRE_NVML=1 "$t" --nocapture --test-threads=1 >>"$log" 2>&1; then
        say "  PASS"
    else
        say "  FAIL"; fail=1
    fi
done

# horos-ref with real NVML: the coordinator's GPU gauges and status page, the feeder following
# the GPU's temperature.
work=$(mktemp -d)
"$bin/horos-fakeai" --port 18401 --model m --slots 8 >"$work/fake.log" 2>&1 &
fake=$!
cat >"$work/horos.toml" <<TOML
database = "queue.db"
[feeder]
thermal = "follow"
[[lane]]
queue = "think"
url = "http://127.0.0.1:18401"
model = "m"
[coordinator]
bind = "127.0.0.1:18410"
TOML
"$bin/horos-ref" --config "$work/horos.toml" run >"$work/run.log" 2>&1 &
run=$!
for _ in $(seq 1 100); do curl -fs http://127.0.0.1:18410/metrics >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq 1 5); do "$bin/horos-ref" --config "$work/horos.toml" submit --queue think --prompt "job $i" >/dev/null; done
curl -fs http://127.0.0.1:18410/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"m","messages":[{"role":"user","content":"hi"}]}' >"$out/chat.json" || fail=1
sleep 3
curl -fs http://127.0.0.1:18410/metrics >"$out/metrics.txt" || fail=1
curl -fs http://127.0.0.1:18410/status >"$out/status.html" || fail=1
"$bin/horos-ref" --config "$work/horos.toml" --json stats >"$out/stats.json" 2>&1 || fail=1
kill -TERM $run; wait $run; kill $fake
cp "$work/run.log" "$out/run.log"
if grep -q '^horos_gpu_temperature_celsius{gpu="0"}' "$out/metrics.txt" \
    && grep -q '^horos_gpu_memory_used_bytes{gpu="0"}' "$out/metrics.txt"; then
    say "horos-ref /metrics: GPU gauges present: $(grep -E '^horos_gpu_(temperature_celsius|memory_(used|total)_bytes)' "$out/metrics.txt" | tr '\n' ' ')"
else
    say "horos-ref /metrics: GPU gauges MISSING"; fail=1
fi
if grep -qi "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "$out/status.html"; then
    say "horos-ref /status names the GPU"
else
    say "horos-ref /status does not name the GPU"; fail=1
fi
say "stats: $(tr -d '\n' <"$out/stats.json" | head -c 400)"

# [coordinator.pool] on NVML: models loaded on demand, the ledger's capacity from the driver; two
# models of 45 % of the card each (as declared: the fake servers hold no GPU memory) fit, a third
# more important one evicts one of them.
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
share=$(( total * 45 / 100 ))
pool="$work/pool"; mkdir -p "$pool"
{
    echo 'database = "queue.db"'
    echo '[coordinator]'
    echo 'bind = "127.0.0.1:18420"'
    echo '[coordinator.pool]'
    echo 'port_min = 18430'
    echo 'port_max = 18439'
    for m in a b c; do
        echo '[[coordinator.pool.model]]'
        echo "name = \"$m\""
        echo "command = [\"$(realpath "$bin/horos-fakeai")\", \"--port\", \"{port}\", \"--model\", \"{model}\"]"
        echo "vram_mb = $share"
    done
} >"$pool/horos.toml"
"$bin/horos-ref" --config "$pool/horos.toml" run >"$pool/run.log" 2>&1 &
prun=$!
for _ in $(seq 1 100); do curl -fs http://127.0.0.1:18420/health >/dev/null 2>&1 && break; sleep 0.1; done
chat() { curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18420/v1/chat/completions \
    -H 'content-type: application/json' \
    -d "{\"model\":\"$1\",\"x_priority\":$2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"; }
codes="$(chat a 5) $(chat b 5) $(chat c 1)"
sleep 2
curl -fs http://127.0.0.1:18420/api/v1/status >"$out/pool_status.json"
curl -fs http://127.0.0.1:18420/metrics >"$out/pool_metrics.txt"
kill -TERM $prun; wait $prun
cp "$pool/run.log" "$out/pool_run.log"
ready=$(python3 -c "import json,sys; s=json.load(open('$out/pool_status.json')); print(sorted(x['model'] for x in s['slots'] if x['state']=='READY'))")
left=$(pgrep -f "horos-fakeai --port 1843" | wc -l)
say "pool on NVML: HTTP codes $codes, READY after the third: $ready, servers left after exit: $left"
if [ "$codes" = "200 200 200" ] && [ "$(echo "$ready" | grep -c "'c'")" = 1 ] && [ "$ready" != "['a', 'b', 'c']" ] && [ "$left" = 0 ]; then
    say "  pool PASS"
else
    say "  pool FAIL"; fail=1
fi
# horos-ref init and check with NVML: the GPUs read (their names and sizes in the file), the
# file checked against them; a lane larger than GPU 0 refused by its key.
init="$work/init"
mkdir -p "$init"
"$bin/horos-ref" init --models "$init" --out "$init/horos.toml" --port 18440 >"$init/init.log" 2>&1
cp "$init/horos.toml" "$out/init.toml" 2>/dev/null
"$bin/horos-ref" --json check "$init/horos.toml" >"$out/init_check.json" 2>&1
ok_init=$?
gpu0=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null | tr -d ' ')
cat >"$init/big.toml" <<TOML
[gpus]
source = "nvml"
[[lane]]
queue = "chat"
url = "http://127.0.0.1:18441"
command = ["sleep", "1"]
gpus = [0]
vram_mb = $((gpu0 * 2))
TOML
"$bin/horos-ref" --json check "$init/big.toml" >"$out/big_check.json" 2>&1
say "init on NVML: $(grep -c '^#   GPU' "$init/horos.toml") GPU(s) in the file, check rc $ok_init; a lane of twice GPU 0: $(grep -o '"key":"lane\[0\][^"]*"' "$out/big_check.json")"
if grep -q 'source = "nvml"' "$init/horos.toml" && [ $ok_init = 0 ] && grep -q '"key":"lane\[0\].vram_mb"' "$out/big_check.json"; then
    say "  init/check PASS"
else
    say "  init/check FAIL"; fail=1
fi
# One view of the GPUs on NVML (issue 47): the demo's shape, a lane and a pinned pooled model
# under [allocator] with initial = [lane, pool] (one GPU: the lane only). The pinned model's
# lease is on the pool's GPU only (never beside the lane), the auditor counts no breach, and each
# process NVML sees holding memory on a GPU belongs to a lease on that GPU (its pid or its
# parent's) or is named as foreign.
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
view="$work/view"; mkdir -p "$view"
if [ "$ngpu" -ge 2 ]; then gpus="[0, 1]"; initial='["chat", "pool"]'; else gpus="[0]"; initial='["chat"]'; fi
cat >"$view/horos.toml" <<TOML
database = "queue.db"
[gpus]
source = "nvml"
[allocator]
gpus = $gpus
initial = $initial
min_dwell_s = 3600
[allocator.pool]
swap_in_s = 5.0
[coordinator]
bind = "127.0.0.1:18450"
[coordinator.pool]
port_min = 18452
port_max = 18459
[[coordinator.pool.model]]
name = "minilm"
pin = true
vram_mb = 300
command = ["$(realpath "$bin/horos-fakeai")", "--port", "{port}", "--model", "{model}"]
[[lane]]
queue = "chat"
url = "http://127.0.0.1:18451"
vram_mb = 1000
command = ["$(realpath "$bin/horos-fakeai")", "--port", "18451"]
TOML
"$bin/horos-ref" --config "$view/horos.toml" run >"$view/run.log" 2>&1 &
vrun=$!
for _ in $(seq 1 100); do curl -fs http://127.0.0.1:18450/health >/dev/null 2>&1 && break; sleep 0.1; done
sleep 8
curl -fs http://127.0.0.1:18450/api/v1/leases >"$out/view_leases.json"
curl -fs http://127.0.0.1:18450/metrics >"$out/view_metrics.txt"
nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits >"$out/view_nvml_apps.csv" 2>&1
nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader >"$out/view_nvml_gpus.csv" 2>&1
kill -TERM $vrun; wait $vrun
cp "$view/run.log" "$out/view_run.log"
verdict=$(python3 - "$out" "$ngpu" <<'PY'
import json, sys, os
out, ngpu = sys.argv[1], int(sys.argv[2])
leases = json.load(open(f"{out}/view_leases.json"))["data"]
on = lambda owner: sorted({l["gpu"] for l in leases if l["owner"] == owner})
bus = {}
for line in open(f"{out}/view_nvml_gpus.csv"):
    i, b = [x.strip() for x in line.split(",")]
    bus[b.lower()] = int(i)
def parent(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except Exception:
        return None
foreign = []
for line in open(f"{out}/view_nvml_apps.csv"):
    parts = [x.strip() for x in line.split(",")]
    if len(parts) < 3 or not parts[0].isdigit():
        continue
    pid, mb, gpu = int(parts[0]), parts[1], bus.get(parts[2].lower())
    owners = {l["pid"] for l in leases if l["gpu"] == gpu and l.get("pid")}
    if pid not in owners and parent(pid) not in owners:
        foreign.append(f"pid {pid} ({mb} MB) on GPU {gpu}")
metrics = open(f"{out}/view_metrics.txt").read()
breaches = [l for l in metrics.splitlines() if l.startswith("horos_gpu_view_breaches_total") and not l.endswith(" 0")]
want = [1] if ngpu >= 2 else []
ok = on("pool:minilm") == want and on("lane:chat") == [0] and not breaches
print(("PASS" if ok else "FAIL") + f": minilm on {on('pool:minilm')} (want {want}), chat on {on('lane:chat')}, breaches {breaches}, processes without a lease: {foreign or 'none'}")
PY
)
say "GPU view on NVML: $verdict"
case "$verdict" in PASS*) say "  view PASS" ;; *) say "  view FAIL"; fail=1 ;; esac
say "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
