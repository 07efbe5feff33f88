#!/usr/bin/env bash
# Property-based tests of the whole API against its own served OpenAPI document (schemathesis from
# PyPI, pinned), as a platform admin, with a fixed seed and a bounded number of examples per
# operation. Fails on any 5xx or any answer that breaks the document's schema, and first on a
# web/src/api/schema.d.ts that is not the served document's. `make test` runs it
# after the cargo tests; the binaries are the ones `cargo test --workspace` left.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
bin_dir="${AIRTIME_BIN_DIR:-target/debug}"
venv="target/schemathesis-venv"
examples="${API_FUZZ_EXAMPLES:-8}"
seed="${API_FUZZ_SEED:-20261201}"

if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/schemathesis" --version | grep -q "$SCHEMATHESIS_VERSION"; then
  echo "airtime: installing schemathesis $SCHEMATHESIS_VERSION (PyPI) into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

db="airtime_api_fuzz_$$"
admin_url="postgres://postgres@127.0.0.1:5432"
psql "$admin_url/postgres" -qc "CREATE DATABASE $db"
cp_pid=""
cleanup() {
  [ -n "$cp_pid" ] && kill "$cp_pid" 2>/dev/null && wait "$cp_pid" 2>/dev/null
  psql "$admin_url/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
password="schemathesis admin password 0f the api"
AIRTIME_BOOTSTRAP_PASSWORD="$password" RUST_LOG=warn "$bin_dir/airtime-control-plane" \
  --database-url "$admin_url/$db" --bootstrap-admin fuzz@airtime.test >/dev/null
# Follows of workload logs end within two seconds here: the fuzzer reads whole answers, and a
# follow of a workload that never runs (no agents here) would otherwise hold each request open.
RUST_LOG=warn "$bin_dir/airtime-control-plane" --database-url "$admin_url/$db" --listen "127.0.0.1:$port" \
  --jwt-secret "api-fuzz-signing-secret-0123456789abcdef" --mutations-per-minute 0 --log-follow-default-s 1 --log-follow-max-s 2 \
  >target/api-fuzz-control-plane.log 2>&1 &
cp_pid=$!
for _ in $(seq 1 100); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done

# The dashboard's API types (web/src/api/schema.d.ts) must be those of the document served here:
# generate them again with the pinned openapi-typescript (web/scripts/gen-api.mjs, what
# `npm run gen:api` runs) and compare.
schema_dir="$(mktemp -d)"
trap 'rm -rf "$schema_dir"; cleanup' EXIT
curl -fsS "$base/api/v1/openapi.json" -o "$schema_dir/openapi.json"
(cd web && node scripts/gen-api.mjs "$schema_dir/openapi.json" "$schema_dir/schema.d.ts") \
  || { echo "airtime: generating the dashboard's API types failed (is web/node_modules there? make web)" >&2; exit 1; }
if ! diff -u web/src/api/schema.d.ts "$schema_dir/schema.d.ts"; then
  echo "airtime: web/src/api/schema.d.ts is not the served OpenAPI document's: with the control plane up," >&2
  echo "         run \`npm run gen:api\` in web/ (AIRTIME_OPENAPI=<its /api/v1/openapi.json URL> if not on :8080) and commit it" >&2
  exit 1
fi
echo "airtime: web/src/api/schema.d.ts matches the served OpenAPI document"
session="$(curl -fsS "$base/api/v1/auth/login" -H 'content-type: application/json' \
  -d "{\"email\": \"fuzz@airtime.test\", \"password\": \"$password\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
# An API token, not the session: the stateful phase follows links from GET /auth/me to
# PATCH /users/{id}, which ends the user's sessions (as it must). Revoking tokens is the one
# operation left out, so the fuzzer cannot revoke its own (tests/tests/access_matrix.rs covers it).
token="$(curl -fsS "$base/api/v1/tokens" -H "Authorization: Bearer $session" -H 'content-type: application/json' \
  -d '{"name": "api-fuzz"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"

echo "airtime: schemathesis on $base ($examples examples per operation, seed $seed)"
# One worker: with two threads, Hypothesis parses lambdas' sources concurrently and CPython 3.11's
# AST constructor fails ("AST constructor recursion depth mismatch"), failing a random operation.
"$venv/bin/schemathesis" run "$base/api/v1/openapi.json" \
  --checks not_a_server_error,response_schema_conformance \
  --max-examples "$examples" --seed "$seed" --generation-database none --generation-with-security-parameters false \
  --header "Authorization: Bearer $token" --request-timeout 30 --workers 1 --no-color \
  --report junit --report-junit-path target/api-fuzz-junit.xml \
  --exclude-path "/api/v1/tokens/{id}"
