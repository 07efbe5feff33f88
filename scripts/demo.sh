#!/usr/bin/env bash
# A local demo: the control plane, one real agent for this host, one agent with 8 simulated GPUs,
# the built-in priority-best-fit policy active. Ctrl-C stops everything.
set -euo pipefail

PORT="${AIRTIME_DEMO_PORT:-8080}"
DB_NAME="${AIRTIME_DEMO_DB:-airtime_demo}"
ADMIN_URL="${AIRTIME_ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export DATABASE_URL="${ADMIN_URL%/*}/${DB_NAME}"
BIN="${CARGO_TARGET_DIR:-target}/debug"
LOGS=".demo"
mkdir -p "$LOGS"

if ! psql "$ADMIN_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = '${DB_NAME}'" | grep -q 1; then
  psql "$ADMIN_URL" -qc "CREATE DATABASE ${DB_NAME}"
fi

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN/airtime-control-plane" --listen "127.0.0.1:${PORT}" >"$LOGS/control-plane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
  curl -fsS "http://127.0.0.1:${PORT}/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$LOGS/control-plane.log"; echo "the control plane did not start" >&2; exit 1; }
  sleep 0.5
done

URL="http://127.0.0.1:${PORT}"
"$BIN/airtime-node-agent" --control-plane "$URL" --name "$(hostname)" >"$LOGS/agent-host.log" 2>&1 &
pids+=($!)
"$BIN/airtime-node-agent" --control-plane "$URL" --name sim-h100-1 --simulate-gpus 8:H100-SXM:81920 \
  --cost-per-hour 31.5 >"$LOGS/agent-sim.log" 2>&1 &
pids+=($!)

cat <<MSG

  Airtime demo is running.
    Dashboard:  ${URL}/
    API:        ${URL}/api/v1/nodes
    Logs:       ${LOGS}/
  Try:  curl -s -X POST ${URL}/api/v1/workloads -H 'content-type: application/json' \\
          -d '{"name":"hello","class":"evaluation","command":["sh","-c","echo hi from GPU \$CUDA_VISIBLE_DEVICES; sleep 5"],"resources":{"gpu_count":1}}'
  Ctrl-C stops the demo.

MSG
wait -n "${pids[@]}"
