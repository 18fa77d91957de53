#!/usr/bin/env bash
# Runs the public Durable Streams conformance suite against `eddy serve`, on
# each storage backend given (default: memory sqlite), side by side, and
# prints the pass counts. Exits non-zero if any test fails. `postgres` runs on
# the database at DATABASE_URL, in a schema of its own that it drops afterwards;
# `dynamodb` on a fresh table of the DynamoDB-compatible server at
# EDDY_DYNAMODB_ENDPOINT (moto: scripts/moto.sh start), made by `eddy dynamo
# create-table` (the binary needs the aws feature).
#
#   scripts/conformance/run.sh [memory|sqlite|postgres|dynamodb ...]
#   EDDY_BIN=target/debug/eddy scripts/conformance/run.sh memory
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -gt 0 ]; then backends=("$@"); else backends=(memory sqlite); fi
long_poll_ms="${EDDY_LONG_POLL_MS:-500}"
# DynamoDB (moto, a Python server answering one request at a time) takes
# longer per request; the suite's per-test timeout is the long-poll timeout
# plus 1 s, so its run gets a longer one.
dynamodb_long_poll_ms="${EDDY_DYNAMODB_LONG_POLL_MS:-1500}"

# EDDY_BIN names a binary already built (with the postgres and aws features
# for those backends); otherwise the release build.
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres,aws)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi

cd "$here"
if [ ! -d node_modules/@durable-streams/server-conformance-tests ]; then
  npm install --no-audit --no-fund --loglevel=error >/dev/null
fi

# shellcheck source=../lib/serve.sh
. "$root/scripts/lib/serve.sh"

# One backend's run: start a server, run the suite against it, print one
# count line (and, on failure, where the logs are). Exits non-zero on failure.
run_backend() {
  local backend="$1" port data log storage server report counts status=0 schema
  local long_poll_ms="$long_poll_ms"
  [ "$backend" != dynamodb ] || long_poll_ms="$dynamodb_long_poll_ms"
  port="$(free_port)"
  data="$(mktemp -d)"
  log="$(mktemp)"
  storage_for "$backend" "$data" "$log" "conformance ($backend)" || return 1
  # The suite's webhook receivers listen on 127.0.0.1, an internal address
  # that webhooks may not reach unless allowed.
  "$eddy" serve --listen "127.0.0.1:$port" "${storage[@]}" \
    --long-poll-timeout "${long_poll_ms}ms" \
    --webhook-allow-network 127.0.0.1 >"$log" 2>&1 &
  server=$!
  wait_healthy "http://127.0.0.1:$port" "$server" "$log" "conformance ($backend)" || return 1
  report="$(mktemp)"
  set +e
  EDDY_BASE_URL="http://127.0.0.1:$port" EDDY_LONG_POLL_MS="$long_poll_ms" \
    npx vitest run --reporter=json --outputFile="$report" >"$report.out" 2>&1
  set -e
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  # Failed tests are listed first; the count line comes last.
  if ! counts="$(node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const failed = r.testResults.flatMap(f => f.assertionResults).filter(t => t.status === "failed");
    for (const t of failed) console.error("  FAILED: " + t.fullName + "\n    " + (t.failureMessages[0] || "").split("\n")[0]);
    console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
    process.exit(r.numFailedTests === 0 && r.numPassedTests > 0 ? 0 : 1);
  ' "$report" 2>&1)"; then
    status=1
    [ -n "$counts" ] || counts="no report (see $report.out)"
  fi
  echo "conformance ($backend): ${counts##*$'\n'}"
  if [ "$status" -ne 0 ]; then
    [ "$counts" = "${counts##*$'\n'}" ] || echo "${counts%$'\n'*}"
    echo "  server log: $log; vitest output: $report.out"
  fi
  rm -rf "$data"
  drop_schema
  return "$status"
}

# The backends run side by side (the suite mostly waits on long polls).
run_side_by_side "${backends[@]}"
