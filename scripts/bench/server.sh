#!/usr/bin/env bash
# Side-by-side benchmark of `eddy serve` and the reference Node server
# (@durable-streams/server), both on loopback, driven by the same load:
#   - single-message appends (wrk, append.lua)
#   - batched JSON appends of 100 messages with an idempotent producer (wrk, batch.lua)
#   - catch-up reads of a 1000-message stream (wrk)
#   - append → live-reader latency, p50/p99 (the live_latency example of
#     eddy-server, a Rust long-poll client, so client overhead stays small)
# Memory storage is compared with the reference in-memory store, SQLite with
# the reference file store. Prints each figure for both and the ratio.
# Then eddy on PostgreSQL (DATABASE_URL, or a throwaway cluster from
# scripts/postgres.sh; fsync on) beside eddy on SQLite: one server, and two
# servers on one database with the load split between them and the live
# reader on the other server than the writer.
#
#   scripts/bench/server.sh            # 10 s per wrk run
#   DURATION=3s CONNECTIONS=16 scripts/bench/server.sh
#   scripts/bench/server.sh postgres   # only the PostgreSQL part (no Node)
#
# `pinned` mode measures eddy against itself, the server pinned to one
# core and the load generator to the other (taskset), and prints the
# ratios issue 12 sets targets for:
#   - SQLite catch-up reads of 200 x 1 KB messages / memory ones (>= 0.5)
#   - durable (SQLite, fsync) single appends / memory ones, 128 connections (>= 0.5)
#   - memory single appends / the server's own /healthz rate (>= 0.85)
#   - 10 000 long-poll readers of one stream: p50/p99 from the append to each
#     reader's answer (live_fanout, a Rust client; target: all within 100 ms),
#     over HTTP/1.1 and over h2c, each beside a bare hyper server's (the floor)
# The two append ratios are taken within alternating slices (RATIO_SLICES,
# default 8, of SLICE_DURATION, default 2s) against both stores' servers
# side by side, and printed as the median with the slices' range: on a
# shared VM a rate drifts by several percent from second to second.
# With BASELINE=/path/to/an/older/eddy it measures that binary too, in the
# same run, and prints both.
#
#   scripts/bench/server.sh pinned
#   BASELINE=/tmp/eddy-before DURATION=5s scripts/bench/server.sh pinned
#
# `durable-pinned` mode runs alternating rounds of durable (SQLite, fsync)
# and memory single appends at 32 connections, pinned, and prints each
# round's ratio with the SQLite server's group size and commit time (see
# durable.sh); BASELINE adds an older binary's SQLite server to each round.
#
#   BASELINE=/tmp/eddy-before scripts/bench/server.sh durable-pinned
#
# `postgres-pinned` mode measures eddy on PostgreSQL beside eddy on SQLite
# per core (servers and PostgreSQL on one core, the load on the other):
# the issue 27 targets, statements and transactions per request, and two
# servers on one database against one (see pg-pinned.sh).
#
#   BASELINE=/tmp/eddy-before scripts/bench/server.sh postgres-pinned
#   EDDY_BIN=/tmp/eddy-before scripts/bench/server.sh postgres-pinned
set -euo pipefail
mode="${1:-side-by-side}"

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duration="${DURATION:-10s}"
connections="${CONNECTIONS:-32}"
threads="${THREADS:-2}"

command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null 2>&1 || { echo "install wrk first" >&2; exit 1; }; }
[ "$mode" = pinned ] || [ "$mode" = durable-pinned ] || [ "$mode" = postgres ] || [ "$mode" = postgres-pinned ] || (cd "$here" && [ -d node_modules/@durable-streams/server ] || npm install --no-audit --no-fund --loglevel=error >/dev/null)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# EDDY_BIN names an eddy already built (with the postgres feature).
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi
[ "$mode" = postgres-pinned ] || [ "$mode" = durable-pinned ] || (cd "$root" && cargo build --quiet --release -p eddy-server --example live_latency --example live_fanout --example fanout_floor --example request_floor)
latency="$CARGO_TARGET_DIR/release/examples/live_latency"
fanout="$CARGO_TARGET_DIR/release/examples/live_fanout"
floor="$CARGO_TARGET_DIR/release/examples/fanout_floor"
request_floor="$CARGO_TARGET_DIR/release/examples/request_floor"

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_up() { for _ in $(seq 1 100); do curl -fsS -o /dev/null -X PUT "$1/bench/probe" 2>/dev/null && return; sleep 0.1; done; echo "server at $1 did not start" >&2; exit 1; }

# Each start sets `base`; not run in a subshell, so `pids` keeps the server for cleanup.
start_eddy() { # storage [serve args...]
  local port storage="$1"; shift; port="$(free_port)"
  "$eddy" serve --listen "127.0.0.1:$port" --storage "$storage" --data "$(mktemp -d -p "$work")" --long-poll-timeout 5s "$@" >/dev/null 2>&1 &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
}
start_ref() { # [data dir]
  local port; port="$(free_port)"
  (cd "$here" && exec node ref-server.mjs "$port" "$@") >/dev/null 2>&1 &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
}

rps() { # url [wrk args...]: requests per second, and non-2xx count on stderr
  local url="$1"; shift
  local out; out="$(wrk -t"$threads" -c"$connections" -d"$duration" "$@" "$url" 2>&1)"
  local bad; bad="$(grep -o 'Non-2xx or 3xx responses: [0-9]*' <<<"$out" | grep -o '[0-9]*$' || true)"
  [ -n "$bad" ] && echo "  warning: $bad non-2xx responses from $url" >&2
  grep 'Requests/sec' <<<"$out" | awk '{print $2}'
}

# A catch-up read from -1 is a redirect to the stream's own offset (its
# incarnation's): a read benchmark reads the URL it leads to.
first_chunk_url() { # stream URL -> the URL of its first chunk
  curl -fsSL -o /dev/null -w '%{url_effective}' "$1?offset=-1"
}

prepare_read_stream() { # base: a text stream of 1000 messages of 100 bytes
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$1/bench/read"
  local msg; msg="$(head -c 100 /dev/zero | tr '\0' 'x')"
  for _ in $(seq 1 1000); do printf '%s' "$msg"; done > "$work/read-body"
  # one append per message keeps the stream's message count honest
  for _ in $(seq 1 1000); do curl -fsS -o /dev/null -X POST -H 'content-type: text/plain' --data "$msg" "$1/bench/read"; done
}

measure() { # label base -> "append batch read p50 p99"
  local base="$1"
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$base/bench/append"
  curl -fsS -o /dev/null -X PUT -H 'content-type: application/json' "$base/bench/batch"
  prepare_read_stream "$base"
  local a b r l
  a="$(rps "$base/bench/append" -s "$here/append.lua")"
  b="$(rps "$base/bench/batch" -s "$here/batch.lua")"
  r="$(rps "$(first_chunk_url "$base/bench/read")")"
  l="$("$latency" "$base" 300)"
  echo "$a $b $r $l"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "n/a" }'; }

report() { # title eddy-figures ref-figures
  read -r ea eb er el50 el99 _ <<<"$2"
  read -r ra rb rr rl50 rl99 _ <<<"$3"
  echo
  echo "== $1 (wrk -t$threads -c$connections -d$duration) =="
  printf '%-44s %14s %14s %8s\n' "" "eddy" "reference" "ratio"
  printf '%-44s %14s %14s %8s\n' "single-message appends (req/s)" "$ea" "$ra" "$(ratio "$ea" "$ra")"
  printf '%-44s %14s %14s %8s\n' "100-message producer batches (req/s)" "$eb" "$rb" "$(ratio "$eb" "$rb")"
  printf '%-44s %14s %14s %8s\n' "catch-up reads of 1000 messages (req/s)" "$er" "$rr" "$(ratio "$er" "$rr")"
  printf '%-44s %14s %14s %8s\n' "append -> live reader p50 (ms)" "$el50" "$rl50" "$(ratio "$rl50" "$el50")"
  printf '%-44s %14s %14s %8s\n' "append -> live reader p99 (ms)" "$el99" "$rl99" "$(ratio "$rl99" "$el99")"
}

if [ "$mode" = pinned ]; then
  . "$here/pinned.sh"
  exit 0
fi
if [ "$mode" = postgres-pinned ]; then
  . "$here/pg-pinned.sh"
  exit 0
fi
if [ "$mode" = durable-pinned ]; then
  . "$here/durable.sh"
  exit 0
fi

if [ "$mode" != postgres ]; then
  start_eddy memory; eddy_mem="$base"
  start_ref; ref_mem="$base"
  report "memory storage" "$(measure "$eddy_mem")" "$(measure "$ref_mem")"

  start_eddy sqlite; eddy_sql="$base"
  start_ref "$work/ref-data"; ref_file="$base"
  report "durable storage: eddy SQLite (fsync per group commit) vs reference file store" "$(measure "$eddy_sql")" "$(measure "$ref_file")"
  echo
  echo "(ratios: throughput eddy/reference; latency reference/eddy; higher is better for eddy)"
fi

# PostgreSQL: one server, then two on one schema.
if [ -z "${DATABASE_URL:-}" ]; then
  eval "$("$root/scripts/postgres.sh" start)"
  trap 'cleanup; "$root/scripts/postgres.sh" stop >/dev/null 2>&1 || true' EXIT
fi
start_eddy "$DATABASE_URL" --pg-schema "bench_one_$$"; pg_one="$base"
start_eddy "$DATABASE_URL" --pg-schema "bench_two_$$"; pg_a="$base"
start_eddy "$DATABASE_URL" --pg-schema "bench_two_$$"; pg_b="$base"

split_rps() { # path [wrk args...]: wrk on both servers at once, half the connections each; the sum
  local path="$1"; shift
  local half=$((connections / 2))
  wrk -t1 -c"$half" -d"$duration" "$@" "$pg_a$path" >"$work/wrk-a" 2>&1 &
  local a=$!
  wrk -t1 -c"$half" -d"$duration" "$@" "$pg_b$path" >"$work/wrk-b" 2>&1
  wait "$a"
  cat "$work/wrk-a" "$work/wrk-b" | awk '/Requests\/sec/ { s += $2 } END { printf "%.2f", s }'
}

measure_two() { # -> "append batch read p50 p99": load on both servers, reader on the other one
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$pg_a/bench/append"
  curl -fsS -o /dev/null -X PUT -H 'content-type: application/json' "$pg_a/bench/batch"
  prepare_read_stream "$pg_a"
  local a b r l first_read
  first_read="$(first_chunk_url "$pg_a/bench/read")"
  a="$(split_rps /bench/append -s "$here/append.lua")"
  b="$(split_rps /bench/batch -s "$here/batch.lua")"
  r="$(split_rps "${first_read#"$pg_a"}")"
  l="$("$latency" "$pg_a" 300 "$pg_b")"
  echo "$a $b $r $l"
}

start_eddy sqlite
read -r sa sb sr sl50 sl99 _ <<<"$(measure "$base")"
read -r oa ob or ol50 ol99 _ <<<"$(measure "$pg_one")"
read -r ta tb tr tl50 tl99 _ <<<"$(measure_two)"
echo
echo "== eddy on PostgreSQL (synchronous_commit on) beside eddy on SQLite (wrk -c$connections -d$duration) =="
printf '%-44s %12s %12s %16s\n' "" "SQLite" "PG, 1 server" "PG, 2 servers"
printf '%-44s %12s %12s %16s\n' "single-message appends (req/s)" "$sa" "$oa" "$ta"
printf '%-44s %12s %12s %16s\n' "100-message producer batches (req/s)" "$sb" "$ob" "$tb"
printf '%-44s %12s %12s %16s\n' "catch-up reads of 1000 messages (req/s)" "$sr" "$or" "$tr"
printf '%-44s %12s %12s %16s\n' "append -> live reader p50 (ms)" "$sl50" "$ol50" "$tl50"
printf '%-44s %12s %12s %16s\n' "append -> live reader p99 (ms)" "$sl99" "$ol99" "$tl99"
echo "(2 servers: the load split between them; the live reader on the other server than the writer)"
