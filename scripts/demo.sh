#!/usr/bin/env bash
# A local demo: the control plane, one real agent for this host, one agent with 8 simulated GPUs and
# one whose 2 simulated GPUs are shared by MPS,
# the built-in policies active. It bootstraps a platform admin (password in .demo/admin-password),
# gives each agent a one-time enrolment token, and creates an API token for your curl commands.
# Ctrl-C stops everything.
set -euo pipefail

PORT="${AIRTIME_DEMO_PORT:-8080}"
DB_NAME="${AIRTIME_DEMO_DB:-airtime_demo}"
ADMIN_URL="${AIRTIME_ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export DATABASE_URL="${ADMIN_URL%/*}/${DB_NAME}"
BIN="${CARGO_TARGET_DIR:-target}/debug"
LOGS=".demo"
ADMIN_EMAIL="${AIRTIME_DEMO_ADMIN:-admin@airtime.local}"
URL="http://127.0.0.1:${PORT}"
API="${URL}/api/v1"
mkdir -p "$LOGS"
chmod 700 "$LOGS"

if ! psql "$ADMIN_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = '${DB_NAME}'" | grep -q 1; then
  psql "$ADMIN_URL" -qc "CREATE DATABASE ${DB_NAME}"
fi

# The first platform admin: a random password, kept (mode 0600) for the next runs. Bootstrapping is
# refused, harmlessly, when the database has a platform admin already.
if [ ! -s "$LOGS/admin-password" ]; then
  (umask 077; od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$LOGS/admin-password")
fi
AIRTIME_BOOTSTRAP_PASSWORD="$(cat "$LOGS/admin-password")" \
  "$BIN/airtime-control-plane" --bootstrap-admin "$ADMIN_EMAIL" >"$LOGS/bootstrap.log" 2>&1 || true

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# Sessions are signed with a key kept in .demo/jwt.key (created on the first run).
"$BIN/airtime-control-plane" --listen "127.0.0.1:${PORT}" --jwt-secret-file "$LOGS/jwt.key" \
  >"$LOGS/control-plane.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
  curl -fsS "${URL}/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$LOGS/control-plane.log"; echo "the control plane did not start" >&2; exit 1; }
  sleep 0.5
done

# json_field NAME: the string field NAME of the JSON object on stdin (no jq needed).
json_field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
# post PATH TOKEN JSON: POST to the API, authenticated when TOKEN is not empty.
post() {
  local auth=()
  if [ -n "$2" ]; then auth=(-H "Authorization: Bearer $2"); fi
  curl -sS -X POST "${API}$1" -H 'content-type: application/json' "${auth[@]}" -d "$3"
}

SESSION="$(post /auth/login "" "{\"email\":\"${ADMIN_EMAIL}\",\"password\":\"$(cat "$LOGS/admin-password")\"}" | json_field token)"
if [ -z "$SESSION" ]; then
  echo "cannot log in as ${ADMIN_EMAIL}: the database ${DB_NAME} has an admin from another run." >&2
  echo "Start afresh with: psql ${ADMIN_URL} -c 'DROP DATABASE ${DB_NAME}'; rm -rf ${LOGS}" >&2
  exit 1
fi
TOKEN="$(post /tokens "$SESSION" '{"name":"demo","expires_in_days":7}' | json_field token)"
printf '%s' "$TOKEN" >"$LOGS/api-token"
chmod 600 "$LOGS/api-token"

# Each agent gets a one-time enrolment token made for its name and a fresh state directory (a token
# made for a name replaces that node's old credential).
start_agent() {
  local name="$1"; shift
  local enrolment
  enrolment="$(post /enrolment-tokens "$SESSION" "{\"node_name\":\"${name}\",\"expires_in_minutes\":10}" | json_field token)"
  rm -rf "$LOGS/agent-${name}"
  AIRTIME_ENROLMENT_TOKEN="$enrolment" "$BIN/airtime-node-agent" --control-plane "$URL" --name "$name" \
    --state-dir "$LOGS/agent-${name}" "$@" >"$LOGS/agent-${name}.log" 2>&1 &
  pids+=($!)
}
start_agent "$(hostname)"
start_agent sim-h100-1 --simulate-gpus 8:H100-SXM:81920 --cost-per-hour 31.5
start_agent sim-l40s-mps --simulate-gpus 2:L40S:49152 --gpu-sharing mps --cost-per-hour 4.2

cat <<MSG

  Airtime demo is running.
    Dashboard:  ${URL}/   (log in as ${ADMIN_EMAIL}, password in ${LOGS}/admin-password)
    API:        ${API}/openapi.json describes it all
    API token:  ${LOGS}/api-token (platform admin, 7 days)
    Logs:       ${LOGS}/
  Try:  TOKEN=\$(cat ${LOGS}/api-token)
        curl -s -H "Authorization: Bearer \$TOKEN" ${API}/nodes
        curl -s -X POST ${API}/workloads -H "Authorization: Bearer \$TOKEN" -H 'content-type: application/json' \\
          -d '{"name":"hello","class":"evaluation","command":["sh","-c","echo hi from GPU \$CUDA_VISIBLE_DEVICES; sleep 5"],"resources":{"gpu_count":1}}'
        # a quarter of a GPU, sharing an MPS GPU of sim-l40s-mps with others:
        curl -s -X POST ${API}/workloads -H "Authorization: Bearer \$TOKEN" -H 'content-type: application/json' \\
          -d '{"name":"embed","class":"realtime_inference","command":["sleep","600"],"resources":{"gpu_count":1,"gpu_milli":250,"gpu_memory_mb":8192,"gpu_models":["L40S"]}}'
  Ctrl-C stops the demo.

MSG
wait -n "${pids[@]}"
