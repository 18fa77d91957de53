#!/usr/bin/env bash
# Live fan-out over HTTP/2 (issue 15): SSE readers of one stream spread
# over a few cleartext HTTP/2 connections, one append, the time until each
# reader has the event; p50/p99/max. The server is pinned to one core and
# the client (the sse_fanout example of eddy-server, reqwest with HTTP/2)
# to the other, as in server.sh's pinned mode; memory and SQLite storage.
#
#   scripts/bench/sse-fanout.sh                   # 1000 readers, 10 connections, 5 rounds
#   READERS=2000 CONNECTIONS=20 ROUNDS=3 scripts/bench/sse-fanout.sh
#   BASELINE=/tmp/eddy-before scripts/bench/sse-fanout.sh   # that binary too, same run
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
readers="${READERS:-1000}"
connections="${CONNECTIONS:-10}"
rounds="${ROUNDS:-5}"
server_core="${SERVER_CORE:-0}"
load_core="${LOAD_CORE:-1}"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --quiet --release -p eddy --features postgres && cargo build --quiet --release -p eddy-server --example sse_fanout)
eddy="$CARGO_TARGET_DIR/release/eddy"
fanout="$CARGO_TARGET_DIR/release/examples/sse_fanout"

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# As root, server and client run under SCHED_FIFO so each keeps its core
# while the machine builds beside them.
if [ "$(id -u)" = 0 ]; then pin() { chrt -f 10 taskset -c "$@"; }; else pin() { taskset -c "$@"; }; fi
# The server runs in its own process (exec, not a child of a subshell), so
# that `$!` is its pid and stopping it really stops it.
exec_pinned() { if [ "$(id -u)" = 0 ]; then exec chrt -f 10 taskset -c "$@"; else exec taskset -c "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_up() { for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1/healthz" 2>/dev/null && return; sleep 0.1; done; echo "server at $1 did not start" >&2; exit 1; }

start_pinned() { # binary storage: starts a server and sets `base` (not in a subshell, so `pids` keeps it)
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" serve --listen "127.0.0.1:$port" --storage "$2" --data "$work/$2-$port" \
    --max-live-readers $((readers * 2)) --http2-max-streams $((readers / connections + 16)) >/dev/null 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
}

stop_pinned() { # the last server started
  local pid="${pids[-1]}"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

measure() { # binary storage -> "p50 p99 max within100 samples"
  start_pinned "$1" "$2"
  pin "$load_core" "$fanout" "$base" "$readers" "$connections" "$rounds"
  stop_pinned
}

report() { # label
  local storage p50 p99 max within samples
  echo
  echo "== $1: $readers SSE readers over $connections HTTP/2 connections, $rounds appends (server on core $server_core, client on core $load_core) =="
  printf '%-10s %10s %10s %10s %14s %8s\n' storage "p50 (ms)" "p99 (ms)" "max (ms)" "<= 100 ms (%)" samples
  for storage in memory sqlite; do
    read -r p50 p99 max within samples <<<"$(measure "$2" "$storage")"
    printf '%-10s %10s %10s %10s %14s %8s\n' "$storage" "$p50" "$p99" "$max" "$within" "$samples"
  done
}

echo "load before: $(uptime)"
[ -n "${BASELINE:-}" ] && report "baseline: $BASELINE" "$BASELINE"
report "this build: $eddy" "$eddy"
echo "load after: $(uptime)"
