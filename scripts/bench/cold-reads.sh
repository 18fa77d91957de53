#!/usr/bin/env bash
# Catch-up reads that the SQLite store answers from its file, not from its
# cache of recent messages: the history a new consumer or a rebuilt
# projection reads. One stream of 200 x 1 KB messages is read at its own
# offset (as server.sh's catch-up reads are) while it is in the cache,
# then again after 100-message producer batches over 16 other streams
# (spread.lua) have pushed it out. Pinned as server.sh's pinned modes are
# (pin.sh): the server on one core, wrk -c32 on the other.
#
#   scripts/bench/cold-reads.sh                          # this checkout's release build
#   EDDY_BIN=/tmp/eddy BASELINE=/tmp/eddy-before scripts/bench/cold-reads.sh
#
# ROUNDS (3) rounds; with BASELINE, that binary runs each round too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$here/pin.sh"
. "$root/scripts/lib/serve.sh" # free_port, wait_healthy
pinned_connections=32
rounds="${ROUNDS:-3}"
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi
work="$(mktemp -d)"
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

measure() { # binary -> "warm cold"
  local port base kb warm cold
  port="$(free_port)"; base="http://127.0.0.1:$port"
  (exec_pinned "$server_core" "$1" serve --listen "127.0.0.1:$port" --storage sqlite --data "$work/data-$port" >"$work/log-$port" 2>&1) &
  server=$!
  wait_healthy "$base" "$server" "$work/log-$port" "eddy serve ($1)" >&2
  prepare_kb_stream "$base"
  for i in $(seq 0 15); do curl -fsS -o /dev/null -X PUT -H 'content-type: application/json' "$base/bench/b-$i"; done
  kb="$(curl -fsS -o /dev/null -w '%{url_effective}' "$base/bench/kb?offset=-1")"
  warm="$(duration=4s pinned_rps "$kb")"
  RUN=cold STREAMS=16 PREFIX=b BATCH=100 duration=8s pinned_rps "$base/" -s "$here/spread.lua" >/dev/null
  cold="$(duration=4s pinned_rps "$kb")"
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
  echo "$warm $cold"
}

echo "== SQLite catch-up reads of 200 x 1 KB, in the cache and from the file (server on core $server_core, wrk -t1 -c$pinned_connections on core $load_core) =="
printf '%-6s %-12s %14s %14s\n' round build "cached req/s" "file req/s"
labels=("this build"); bins=("$eddy")
if [ -n "${BASELINE:-}" ]; then labels+=("baseline"); bins+=("$(realpath "$BASELINE")"); fi
for round in $(seq 1 "$rounds"); do
  for i in "${!bins[@]}"; do
    read -r warm cold <<<"$(measure "${bins[$i]}")"
    printf '%-6s %-12s %14s %14s\n' "$round" "${labels[$i]}" "$warm" "$cold"
  done
done
