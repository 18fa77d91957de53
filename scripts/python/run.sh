#!/usr/bin/env bash
# The public Python client of the Durable Streams protocol (`durable-streams`
# on PyPI, installed into <repo>/.venv-python when missing) against `eddy
# serve` on each storage backend given (default: memory sqlite), side by
# side: create, batched and sequential appends, reads from the start, resume
# from an offset, long-poll, SSE, bytes streams, Stream-Seq and idempotent
# producers (client_test.py). Prints one count line per backend; exits
# non-zero if any check fails. `postgres` runs on DATABASE_URL in a schema of
# its own; `dynamodb` on a fresh table at EDDY_DYNAMODB_ENDPOINT.
#
#   scripts/python/run.sh [memory|sqlite|postgres|dynamodb ...]
#   EDDY_BIN=target/debug/eddy scripts/python/run.sh memory
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -gt 0 ]; then backends=("$@"); else backends=(memory sqlite); fi

# The client version the checks were written against; a newer one is
# tried on purpose, by changing it here.
client="durable-streams==0.1.0"
venv="${PYTHON_CLIENT_VENV:-$root/.venv-python}"
if ! "$venv/bin/python" -c 'import durable_streams' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "$client" >&2
fi

eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres,aws)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi

# shellcheck source=../lib/serve.sh
. "$root/scripts/lib/serve.sh"

run_backend() {
  local backend="$1" port data log server status=0 storage schema
  port="$(free_port)"
  data="$(mktemp -d)"
  log="$(mktemp)"
  storage_for "$backend" "$data" "$log" "python client ($backend)" || return 1
  "$eddy" serve --listen "127.0.0.1:$port" "${storage[@]}" --long-poll-timeout 2s >"$log" 2>&1 &
  server=$!
  wait_healthy "http://127.0.0.1:$port" "$server" "$log" "python client ($backend)" || return 1
  "$venv/bin/python" "$here/client_test.py" "http://127.0.0.1:$port" "$backend" || status=1
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  [ "$status" -eq 0 ] || echo "  server log: $log"
  rm -rf "$data"
  drop_schema
  return "$status"
}

run_side_by_side "${backends[@]}"
