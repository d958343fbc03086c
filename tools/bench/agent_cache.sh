#!/usr/bin/env bash
# The prefix cache in an agent loop, in one command: the same agent session (bench-serve
# --workload agent) against four servers on the same model, one after another:
#   1. caching on (memory)          2. caching off (--prefix-cache-entries 0)
#   3. caching on with a fresh disk cache, then 4. the same after a restart (warm disk).
# Prints TTFT per turn, cached tokens per turn and turn-last / turn-1 for each.
# usage: tools/bench/agent_cache.sh [--model DIR] [--turns 10] [--input-len 600] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/../.."
model_args=(); turns=10; input_len=600; threads=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model_args=(--model "$2"); shift 2 ;;
    --turns) turns="$2"; shift 2 ;;
    --input-len) input_len="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
disk="$(mktemp -d)"
trap 'rm -rf "$disk"' EXIT
port=18300

run() {  # label, serve options...
  local label="$1"; shift
  port=$((port + 1))
  build/deepinfer serve "${model_args[@]}" --port "$port" --threads "$threads" "$@" > "$disk.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf "localhost:$port/health" > /dev/null && break; sleep 0.5; done
  printf '%-28s' "$label"
  build/deepinfer bench-serve --url "http://127.0.0.1:$port" --workload agent --num-prompts 1 --concurrency 1 \
    --turns "$turns" --input-len "$input_len" --output-len 8 --tool-result-len 150 --json |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
t = r["per_turn"]
print("TTFT ms", [round(x["ttft_ms"]["mean"]) for x in t], " cached", [round(x["cached_tokens_mean"]) for x in t],
      " last/first %.2f" % r["ttft_last_over_first"])'
  kill "$pid"; wait "$pid" 2> /dev/null || true
}

run "cache on" 
run "cache off" --prefix-cache-entries 0
run "disk cache, cold" --kv-cache-dir "$disk/kv"
run "disk cache, after restart" --kv-cache-dir "$disk/kv"
