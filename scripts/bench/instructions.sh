#!/usr/bin/env bash
# Instructions per request of `eddy serve` (memory storage, or STORAGE) for /healthz,
# for single-message appends and for catch-up reads of one historical chunk
# (its own offset, 16 messages of 1 KiB), counted by valgrind's callgrind: the same
# figure for the same binary whatever else the machine does, so a change of
# a few hundred instructions per request shows where wrk's req/s cannot
# (they move ±5 % from run to run on a shared VM). Kernel time is not
# counted. The append figure minus the /healthz one is what an append
# costs beyond /healthz; the first row is the true floor, a bare hyper
# server (examples/request_floor.rs) answering the same requests.
#
#   scripts/bench/instructions.sh                      # this checkout's release build
#   scripts/bench/instructions.sh /tmp/eddy-before     # that binary, then this build's
#   NO_BUILD=1 scripts/bench/instructions.sh A B       # those binaries only
#   SECONDS_PER_ROUTE=4 scripts/bench/instructions.sh
#   STORAGE=sqlite scripts/bench/instructions.sh   # the durable store (its writer thread counts too)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${SECONDS_PER_ROUTE:-8}"
storage="${STORAGE:-memory}"
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
command -v valgrind >/dev/null || apt-get install -y valgrind >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# The features server.sh builds with, so the two share one binary.
[ -n "${NO_BUILD:-}" ] || (cd "$root" && cargo build --quiet --release -p eddy --features postgres \
  && cargo build --quiet --release -p eddy-server --example request_floor)
work="$(mktemp -d)"
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

measure() { # binary -> prints "label healthz_ir append_ir difference"
  local bin="$1" port label; port="$(free_port)"; label="$(basename "$bin")"
  local args=(serve --listen "127.0.0.1:$port" --storage "$storage" --data "$work/data-$port")
  [ "$label" = request_floor ] && args=("127.0.0.1:$port")
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" "${args[@]}" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 1 200); do curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break; sleep 0.2; done
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "http://127.0.0.1:$port/bench/append"
  # A stream whose first chunk (16 KiB) ends before its tail: its read is
  # historical. Its URL is the one `-1` leads to (the stream's own offset
  # since incarnations; `-1` itself before them).
  curl -fsS -o /dev/null -X PUT -H 'content-type: application/json' "http://127.0.0.1:$port/bench/read"
  local body; body="$(python3 -c 'print("[" + ",".join("\"%s\"" % ("x" * 1022) for _ in range(64)) + "]")')"
  curl -fsS -o /dev/null -X POST -H 'content-type: application/json' --data-binary "$body" "http://127.0.0.1:$port/bench/read"
  local chunk; chunk="$(curl -fsSL -o /dev/null -H 'eddy-max-bytes: 16384' -w '%{url_effective}' "http://127.0.0.1:$port/bench/read?offset=-1")"
  local figures=()
  for route in healthz append read; do
    local url="http://127.0.0.1:$port/healthz" script=()
    if [ "$route" = append ]; then url="http://127.0.0.1:$port/bench/append"; script=(-s "$here/append.lua"); fi
    if [ "$route" = read ]; then url="$chunk"; script=(-H 'eddy-max-bytes: 16384'); fi
    wrk -t1 -c8 -d2s "${script[@]}" "$url" >/dev/null # warm up
    callgrind_control -z "$server" >/dev/null 2>&1
    local requests; requests="$(wrk -t1 -c8 -d"${seconds}s" "${script[@]}" "$url" | awk '/requests in/ {print $1}')"
    callgrind_control -d "$route" "$server" >/dev/null 2>&1
    local dump; dump="$(ls -t "$work"/cg."$server".* | head -1)"
    local ir; ir="$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")"
    figures+=("$((ir / requests))")
  done
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
  printf '%-28s %12s %12s %12s %12s\n' "$label" "${figures[0]}" "${figures[1]}" "$((figures[1] - figures[0]))" "${figures[2]}"
}

printf '%-28s %12s %12s %12s %12s\n' "instructions per request ($storage)" "/healthz" "append" "difference" "read"
# The floor first: a bare hyper server answering a GET and a POST with
# fixed bodies (examples/request_floor.rs); its "read" is a plain GET.
[ -n "${NO_BUILD:-}" ] || measure "$CARGO_TARGET_DIR/release/examples/request_floor"
for bin in "$@"; do measure "$bin"; done
[ -n "${NO_BUILD:-}" ] || measure "$CARGO_TARGET_DIR/release/eddy"
