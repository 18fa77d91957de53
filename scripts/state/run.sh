#!/usr/bin/env bash
# State streams between eddy and the public `@durable-streams/state`
# package, both ways (interop.mjs says what is checked), through `eddy
# serve` on each storage backend given (default: memory sqlite). Prints the
# `state:` lines of each run; exits non-zero on any failure, and when a run
# printed no check at all. `postgres` runs on DATABASE_URL in a schema of
# its own, `dynamodb` on a fresh table at EDDY_DYNAMODB_ENDPOINT (moto), as
# the conformance run does (the binary needs the postgres and aws
# features: pass EDDY_BIN).
#
#   scripts/state/run.sh [memory|sqlite|postgres|dynamodb ...]
#   EDDY_BIN=target/debug/eddy STATE_INTEROP_BIN=target/debug/examples/state_interop scripts/state/run.sh
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -gt 0 ]; then backends=("$@"); else backends=(memory sqlite); fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

# EDDY_BIN and STATE_INTEROP_BIN name binaries already built; otherwise
# the debug builds.
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
interop="${STATE_INTEROP_BIN:+$(realpath "$STATE_INTEROP_BIN")}"
if [ -z "$eddy" ] || [ -z "$interop" ]; then
  (cd "$root" && cargo build --quiet -p eddy && cargo build --quiet -p eddy-server --example state_interop)
  eddy="${eddy:-$CARGO_TARGET_DIR/debug/eddy}"
  interop="${interop:-$CARGO_TARGET_DIR/debug/examples/state_interop}"
fi

cd "$here"
if [ ! -d node_modules/@durable-streams/state ] || [ ! -d node_modules/@tanstack/db ]; then
  npm install --no-audit --no-fund --loglevel=error >/dev/null
fi

# shellcheck source=../lib/serve.sh
. "$root/scripts/lib/serve.sh"

run_backend() {
  local backend="$1" port data log out server status=0 schema
  port="$(free_port)"
  data="$(mktemp -d)"
  log="$(mktemp)"
  out="$(mktemp)"
  storage_for "$backend" "$data" "$log" "state ($backend)" || return 1
  # A short sweep interval: the compaction check waits for the sweep.
  "$eddy" serve --listen "127.0.0.1:$port" "${storage[@]}" --sweep-interval 100ms >"$log" 2>&1 &
  server=$!
  wait_healthy "http://127.0.0.1:$port" "$server" "$log" "state ($backend)" || return 1
  node interop.mjs "http://127.0.0.1:$port" "$interop" >"$out" 2>&1 || status=1
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  sed "s/^state: /state ($backend): /" "$out"
  if ! grep -q '^state: ' "$out"; then
    echo "state ($backend): no check ran"
    status=1
  fi
  [ "$status" -eq 0 ] || echo "state ($backend): FAILED; server log: $log"
  rm -rf "$data"
  drop_schema
  return "$status"
}

status=0
for backend in "${backends[@]}"; do
  run_backend "$backend" || status=1
done
exit "$status"
