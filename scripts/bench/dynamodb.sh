#!/usr/bin/env bash
# The figures of issue 28 (crates/eddy-streams-dynamodb/DESIGN.md), in one
# run, on a moto server of its own (scripts/moto.sh, one request at a time;
# its speed is not DynamoDB's, so the request counts come first):
#   1. DynamoDB requests per single append, per 100-message producer batch
#      and per catch-up read of 200 x 1 KB messages, counted by the store
#      (Table::request_stats, the `requests` example of
#      eddy-streams-dynamodb): exact whatever the machine's load;
#   2. appends/s and reads/s through one `eddy serve` on the table beside
#      the same binary on SQLite (wrk -c$CONNECTIONS -d$DURATION, one
#      server after the other on the same workloads);
#   3. append -> live reader latency p50/p99 across two `eddy serve` on one
#      table (writer on one, long-poll reader on the other; the other
#      server's poll, --dynamodb-poll, 100 ms by default, bounds it), beside
#      one server on the table and one on SQLite.
# Prints the date, the machine's load before and after, and a summary.
#
# WAITED="1 1000 10000" measures instead how the reader's server's wait
# set slows part 3's cross-server latency: for each P, two fresh servers
# on a fresh table, P idle long-poll readers (on P other streams) held open
# on the reader's server, then ROUNDS samples on one more stream; beside
# them the derived bound (DESIGN.md, "Live reads across processes") from
# moto's measured BatchGetItem time, both as DynamoDB runs the poll's
# chunks (8 at once) and as moto does (one request at a time).
#
#   scripts/bench/dynamodb.sh
#   DURATION=5s CONNECTIONS=16 ROUNDS=100 scripts/bench/dynamodb.sh
#   EDDY_BIN=target/release/eddy scripts/bench/dynamodb.sh   # a binary built with --features aws
#
# Environment: MOTO_VENV (where moto is installed, scripts/moto.sh's default
# if unset), DURATION (10s), CONNECTIONS (16), ROUNDS (300 latency samples),
# POLL (--dynamodb-poll, 100ms), WAITED (unset), LONG_POLL (the servers'
# --long-poll-timeout, 5s; 60s when WAITED is set, so that the held
# readers are not all asked again at once every few seconds).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duration="${DURATION:-10s}"
connections="${CONNECTIONS:-16}"
rounds="${ROUNDS:-300}"
poll="${POLL:-100ms}"
waited="${WAITED:-}"
long_poll="${LONG_POLL:-$([ -n "$waited" ] && echo 60s || echo 5s)}"
# A held reader is a socket on each side.
[ -n "$waited" ] && ulimit -n "$(ulimit -Hn)"

command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null 2>&1 || { echo "install wrk first" >&2; exit 1; }; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features aws)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi
(cd "$root" && cargo build --quiet --release -p eddy-server --example live_latency \
  && cargo build --quiet --release -p eddy-streams-dynamodb --features aws --example requests)
latency="$CARGO_TARGET_DIR/release/examples/live_latency"
requests="$CARGO_TARGET_DIR/release/examples/requests"

work="$(mktemp -d)"
pids=()
moto_state="$work/moto"
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  MOTO_STATE="$moto_state" "$root/scripts/moto.sh" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

load_average() { cut -d' ' -f1-3 /proc/loadavg; }
before="$(load_average)"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores; load average: $before"

# A moto of its own, so that no other client's requests share its one thread.
moto_env="$(MOTO_STATE="$moto_state" "$root/scripts/moto.sh" start 2>"$work/moto.err")" \
  || { cat "$work/moto.err" >&2; exit 1; }
eval "$moto_env"
export AWS_ENDPOINT_URL="$EDDY_DYNAMODB_ENDPOINT" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing

# 1. Requests per operation.
"$requests" >"$work/requests" 2>&1 || { cat "$work/requests" >&2; exit 1; }

# 2 and 3. Through `eddy serve`.
. "$here/pin.sh" # prepare_kb_stream
. "$root/scripts/lib/serve.sh" # free_port, wait_healthy
start_eddy() { # storage [serve args...]: sets `base`
  local port storage="$1"; shift; port="$(free_port)"
  "$eddy" serve --listen "127.0.0.1:$port" --storage "$storage" --data "$(mktemp -d -p "$work")" \
    --long-poll-timeout "$long_poll" "$@" >"$work/log-$port" 2>&1 &
  pids+=($!); base="http://127.0.0.1:$port"; wait_healthy "$base" "$!" "$work/log-$port" "eddy serve ($storage)" >&2
}

rps() { # url [wrk args...]: requests per second (non-2xx responses reported on stderr)
  local url="$1"; shift
  local out; out="$(wrk -t1 -c"$connections" -d"$duration" --timeout 30s "$@" "$url" 2>&1)"
  local bad; bad="$(grep -o 'Non-2xx or 3xx responses: [0-9]*' <<<"$out" | grep -o '[0-9]*$' || true)"
  [ -n "$bad" ] && echo "  warning: $bad non-2xx responses from $url" >&2
  awk '/Requests\/sec/ { print $2 }' <<<"$out"
}

batch_streams=16
measure() { # base -> "appends/s batches/s messages-in-batches/s reads/s"
  local base="$1" i a b r kb
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$base/bench/append"
  for i in $(seq 0 $((batch_streams - 1))); do
    curl -fsS -o /dev/null -X PUT -H 'content-type: application/json' "$base/bench/b-$i"
  done
  prepare_kb_stream "$base"
  # A catch-up read from -1 redirects to the stream's own first offset.
  kb="$(curl -fsSL -o /dev/null -w '%{url_effective}' "$base/bench/kb?offset=-1")"
  a="$(rps "$base/bench/append" -s "$here/append.lua")"
  b="$(STREAMS=$batch_streams PREFIX=b BATCH=100 RUN="$(date +%s%N)" rps "$base/" -s "$here/spread.lua")"
  r="$(rps "$kb")"
  echo "$a $b $(awk -v b="$b" 'BEGIN { printf "%.0f", b * 100 }') $r"
}

table() { # a fresh table on moto, made as a user would
  local name="bench-$$-$RANDOM"
  "$eddy" dynamo create-table --table "$name" >/dev/null
  echo "$name"
}

if [ -n "$waited" ]; then
  # moto's time per poll chunk, on a table of its own, before any server
  # loads it.
  t="$(awk -F'; ' '/^poll BatchGetItem/ { split($2, a, " "); print a[1] }' "$work/requests")"
  poll_ms="$(awk -v p="$poll" 'BEGIN { v = p + 0; if (p ~ /ms$/) print v; else if (p ~ /s$/) print v * 1000; else print v }')"
  rows=()
  for p in $waited; do
    shared="$(table)"
    # Room for the held readers beyond the defaults' 10 000 connections
    # and live readers (more would wait in the backlog or get 503).
    room=(--max-connections $((p + 100)) --max-live-readers $((p + 100)))
    start_eddy "dynamodb://$shared" --dynamodb-poll "$poll"; writer="$base"
    start_eddy "dynamodb://$shared" --dynamodb-poll "$poll" "${room[@]}"; reader="$base"
    read -r l50 l99 n <<<"$(WAITED=$p "$latency" "$writer" "$rounds" "$reader" || true)"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    pids=()
    if [ -z "${n:-}" ]; then # its error is on stderr
      rows+=("$(printf '%8d %s' "$p" "no samples: the held readers did not all become live")")
      continue
    fi
    # Waited paths: the P held ones and the sampled one.
    rows+=("$(awk -v p="$p" -v t="$t" -v poll="$poll_ms" -v l50="$l50" -v l99="$l99" -v n="$n" 'BEGIN {
      paths = p + 1
      dynamo = poll + int((paths + 799) / 800) * t
      round = int((paths + 99) / 100) * t
      moto = (round > poll ? round : poll) + round
      printf "%8d %10.1f %10.1f %12.1f %12.1f %8d", p, l50, l99, dynamo, moto, n }')")
  done
  after="$(load_average)"
  echo
  echo "== moto's own request time =="
  grep '^poll BatchGetItem' "$work/requests" | sed 's/^/  /'
  echo
  echo "== append -> live long-poll reader across two servers on one table, reader's server waiting on P more paths =="
  echo "   (poll $poll, $rounds samples; bound = the DESIGN's derived bound for the wake, at moto's $t ms a BatchGetItem:"
  echo "    DynamoDB's poll + ceil((P+1)/800) x t; moto's max(poll, R) + R with R = ceil((P+1)/100) x t, one request at a time)"
  printf '%8s %10s %10s %12s %12s %8s\n' "P" "p50 ms" "p99 ms" "bound DDB" "bound moto" "samples"
  printf '%s\n' "${rows[@]}"
  echo
  echo "load average (1, 5, 15 min) before: $before; after: $after"
  exit 0
fi

start_eddy sqlite; sqlite="$base"
start_eddy "dynamodb://$(table)" --dynamodb-poll "$poll"; dynamo="$base"
read -r sa sb sm sr <<<"$(measure "$sqlite")"
read -r da db dm dr <<<"$(measure "$dynamo")"

shared="$(table)"
start_eddy "dynamodb://$shared" --dynamodb-poll "$poll"; dynamo_a="$base"
start_eddy "dynamodb://$shared" --dynamodb-poll "$poll"; dynamo_b="$base"
read -r sl50 sl99 _ <<<"$("$latency" "$sqlite" "$rounds")"
read -r ol50 ol99 _ <<<"$("$latency" "$dynamo" "$rounds")"
read -r tl50 tl99 _ <<<"$("$latency" "$dynamo_a" "$rounds" "$dynamo_b")"
after="$(load_average)"

echo
echo "== DynamoDB requests per operation (eddy-streams-dynamodb, counted by Table::request_stats; 1 KB messages) =="
sed -e '/^table:/d' -e 's/^/  /' "$work/requests"
echo
echo "== eddy serve on moto beside eddy serve on SQLite (wrk -t1 -c$connections -d$duration, one after the other) =="
printf '%-52s %12s %12s %8s\n' "" "SQLite" "DynamoDB" "ratio"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2g", a / b; else print "n/a" }'; }
printf '%-52s %12s %12s %8s\n' "single appends, one stream (req/s)" "$sa" "$da" "$(ratio "$da" "$sa")"
printf '%-52s %12s %12s %8s\n' "100-message producer batches, 16 streams (req/s)" "$sb" "$db" "$(ratio "$db" "$sb")"
printf '%-52s %12s %12s %8s\n' "  (messages/s)" "$sm" "$dm" ""
printf '%-52s %12s %12s %8s\n' "catch-up reads of 200 x 1 KB (req/s)" "$sr" "$dr" "$(ratio "$dr" "$sr")"
echo
echo "== append -> live long-poll reader, $rounds samples (ms) =="
printf '%-52s %12s %12s\n' "" "p50" "p99"
printf '%-52s %12s %12s\n' "SQLite, one server" "$sl50" "$sl99"
printf '%-52s %12s %12s\n' "DynamoDB, one server" "$ol50" "$ol99"
printf '%-52s %12s %12s\n' "DynamoDB, two servers on one table (poll $poll)" "$tl50" "$tl99"
echo
echo "load average (1, 5, 15 min) before: $before; after: $after"
