#!/usr/bin/env bash
# Runs the public Durable Streams conformance suite against `eddy serve`, on
# each storage backend given (default: memory sqlite), and prints the pass
# counts. Exits non-zero if any test fails. `postgres` runs on the database
# at DATABASE_URL, in a schema of its own that it drops afterwards.
#
#   scripts/conformance/run.sh [memory|sqlite|postgres ...]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -gt 0 ]; then backends=("$@"); else backends=(memory sqlite); fi
long_poll_ms="${EDDY_LONG_POLL_MS:-500}"

cd "$here"
if [ ! -d node_modules/@durable-streams/server-conformance-tests ]; then
  npm install --no-audit --no-fund --loglevel=error >/dev/null
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --quiet --release -p eddy --features postgres)
eddy="$CARGO_TARGET_DIR/release/eddy"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

status=0
for backend in "${backends[@]}"; do
  port="$(free_port)"
  data="$(mktemp -d)"
  log="$(mktemp)"
  storage=("--storage" "$backend" "--data" "$data")
  if [ "$backend" = postgres ]; then
    : "${DATABASE_URL:?postgres needs DATABASE_URL}"
    schema="conformance_$$"
    storage=("--storage" "$DATABASE_URL" "--pg-schema" "$schema")
  fi
  # The suite's webhook receivers listen on 127.0.0.1, an internal address
  # that webhooks may not reach unless allowed.
  "$eddy" serve --listen "127.0.0.1:$port" "${storage[@]}" \
    --long-poll-timeout "${long_poll_ms}ms" \
    --webhook-allow-network 127.0.0.1 >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  report="$(mktemp)"
  set +e
  EDDY_BASE_URL="http://127.0.0.1:$port" EDDY_LONG_POLL_MS="$long_poll_ms" \
    npx vitest run --reporter=json --outputFile="$report" >"$report.out" 2>&1
  set -e
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  # Failed tests go to stderr; the count line to stdout.
  if ! counts="$(node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const failed = r.testResults.flatMap(f => f.assertionResults).filter(t => t.status === "failed");
    for (const t of failed) console.error("  FAILED: " + t.fullName + "\n    " + (t.failureMessages[0] || "").split("\n")[0]);
    console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
    process.exit(r.numFailedTests === 0 && r.numPassedTests > 0 ? 0 : 1);
  ' "$report")"; then
    status=1
    [ -n "$counts" ] || counts="no report (see $report.out)"
  fi
  echo "conformance ($backend): $counts"
  if [ "$status" -ne 0 ]; then
    echo "  server log: $log; vitest output: $report.out"
  fi
  rm -rf "$data"
  if [ "$backend" = postgres ] && command -v psql >/dev/null; then
    psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  fi
done
exit "$status"
