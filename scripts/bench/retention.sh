#!/usr/bin/env bash
# Retention dropping 1 GB while appends go on (issue 34), on SQLite and
# PostgreSQL, per core: `eddy serve` (and PostgreSQL) on core 0, the load
# on core 1, both under SCHED_FIFO as root (pin.sh; PostgreSQL pinned
# without it), so nothing else may run pinned there meanwhile. Durability
# settings stay at their safe defaults; autovacuum is on.
#
# For each store, twice in a row:
#   fill  - 16 KiB appends to `bench/kept` (policy `age=$AGE`) until it
#           holds $FILL_MB MB;
#   drop  - small appends to the same stream for $DROP_SECONDS s, with
#           wrk's latency distribution, while the age bound lets the whole
#           filled part go and the sweeper (every 1 s) drops it in steps.
# Printed per round: the bytes kept before and after the drop, how long the
# drop took, the appends' p99 and slowest (the target: none above 100 ms),
# the store's commits slower than 50 ms (a slow append with none waited
# for something other than the disk's sync),
# and the bytes on disk (SQLite: the data directory; PostgreSQL: the
# database) after each fill and drop; on PostgreSQL also the WAL the drop
# wrote and the checkpoints it took. The second fill reusing the space the
# first drop freed shows the space is reclaimed: disk after fill 2 is about
# disk after fill 1, not twice it.
#
#   scripts/bench/retention.sh [sqlite|postgres|both]
#   FILL_MB=1024 AGE=40s DROP_SECONDS=60 scripts/bench/retention.sh both
#   CONTROL=1 scripts/bench/retention.sh postgres   # the same without a policy:
#                                                    # what the appends do with nothing dropped
set -euo pipefail
stores="${1:-both}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
fill_mb="${FILL_MB:-1024}"
age="${AGE:-40s}"
drop_seconds="${DROP_SECONDS:-60}"

command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null 2>&1 || { echo "install wrk first" >&2; exit 1; }; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi

work="$(mktemp -d)"
pids=()
pg_state="$work/pg-state"
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -d "$pg_state" ] && EDDY_PG_STATE="$pg_state" "$root/scripts/postgres.sh" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
. "$here/pin.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_up() { for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1/healthz" 2>/dev/null && return; sleep 0.1; done; echo "server at $1 did not start" >&2; exit 1; }

cat >"$work/fill.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
-- Random letters: PostgreSQL compresses large values, and a repeated
-- byte would make its bytes on disk say nothing.
local letters = {}
for i = 1, 16384 do letters[i] = string.char(math.random(97, 122)) end
wrk.body = table.concat(letters)
EOF
cat >"$work/small.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
wrk.body = "a small append while the prefix goes"
EOF

# Commits of the store slower than 50 ms so far (the histogram's count
# above its 0.05 s bucket): a slow append that came with one waited for
# the disk (the commit's sync, or a checkpoint SQLite ran inside it).
slow_commits() {
  curl -fsS "$base/metrics" | awk '
    /^eddy_store_commit_duration_seconds_bucket\{le="0.05"\}/ { fast = $2 }
    /^eddy_store_commit_duration_seconds_count/ { all = $2 }
    END { printf "%d", all - fast }'
}

kept_bytes() { curl -fsS -I "$base/bench/kept" | tr -d '\r' | awk -F': ' 'tolower($1) == "eddy-stream-bytes" { print $2 }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.0f MB", b / 1e6 }'; }

fill() { # until the stream holds fill_mb MB
  while [ "$(kept_bytes)" -lt $((fill_mb * 1000000)) ]; do
    pin "$load_core" wrk -t1 -c4 -d2s -s "$work/fill.lua" "$base/bench/kept" >/dev/null 2>&1
  done
}

# The slowest append of the drop phase, and its p99, in milliseconds.
drop() {
  local before start done_at out
  before="$(kept_bytes)"
  local wal_before="" checkpoints_before=""
  if [ "$name" = postgres ]; then
    wal_before="$(pg_wal)"; checkpoints_before="$(pg_checkpoints)"
  fi
  local slow_before
  slow_before="$(slow_commits)"
  start="$(date +%s.%N)"
  pin "$load_core" wrk -t1 -c4 -d"${drop_seconds}s" --latency -s "$work/small.lua" "$base/bench/kept" >"$work/wrk.out" 2>&1 &
  local load=$!
  done_at=""
  while kill -0 "$load" 2>/dev/null; do
    if [ -z "$done_at" ] && [ "$(kept_bytes)" -lt $((before / 10)) ]; then done_at="$(date +%s.%N)"; fi
    sleep 0.5
  done
  wait "$load" || true
  out="$(cat "$work/wrk.out")"
  local p99 max took
  p99="$(awk '$1 == "99%" { print $2 }' <<<"$out")"
  max="$(awk '$1 == "Latency" { print $4; exit }' <<<"$out")"
  took="$( [ -n "$done_at" ] && awk -v a="$start" -v b="$done_at" 'BEGIN { printf "%.0f s", b - a }' || echo "not within ${drop_seconds} s")"
  local dropped="dropped in $took"
  [ -n "${CONTROL:-}" ] && dropped="nothing dropped (control)"
  local wal=""
  if [ -n "$wal_before" ]; then
    wal="; WAL written $(mb $(($(pg_wal) - wal_before))), checkpoints $(($(pg_checkpoints) - checkpoints_before))"
  fi
  echo "    drop: $(mb "$before") kept before, $(mb "$(kept_bytes)") after; $dropped; appends: $(grep -o '[0-9]* requests' <<<"$out"), p99 $p99, slowest $max; commits over 50 ms: $(($(slow_commits) - slow_before))$wal"
  slowest+=("$max")
}

run_store() { # name storage-url disk-command
  local name="$1" storage="$2" disk="$3" port
  port="$(free_port)"
  (exec_pinned "$server_core" "$eddy" serve --listen "127.0.0.1:$port" --storage "$storage" \
    --data "$work/data-$name" --sweep-interval 1s >"$work/log-$name" 2>&1) &
  pids+=($!)
  base="http://127.0.0.1:$port"
  wait_up "$base"
  local policy=(-H "Eddy-Retention: age=$age") rounds="1 2"
  if [ -n "${CONTROL:-}" ]; then
    policy=() rounds=1
    echo "$name: CONTROL: fill $fill_mb MB with no retention policy, then the same appends (nothing is dropped)"
  else
    echo "$name: fill $fill_mb MB (policy age=$age), then appends while it is dropped; twice"
  fi
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "${policy[@]}" "$base/bench/kept"
  slowest=()
  for round in $rounds; do
    fill
    echo "  round $round: on disk after the fill: $(mb "$($disk)")"
    drop
    echo "    on disk after the drop: $(mb "$($disk)")"
    [ "$name" = postgres ] && [ "$round" = 1 ] && await_vacuum
  done
  local worst
  worst="$(printf '%s\n' "${slowest[@]}" | awk '
    /us$/ { v = $1 + 0; v /= 1000 } /ms$/ { v = $1 + 0 } /[0-9]s$/ { v = ($1 + 0) * 1000 }
    { if (v > m) m = v } END { printf "%.1f", m }')"
  if awk -v w="$worst" 'BEGIN { exit !(w <= 100) }'; then
    echo "  slowest append while dropping: $worst ms (target: none above 100 ms) - met"
  else
    echo "  slowest append while dropping: $worst ms (target: none above 100 ms) - NOT met"
  fi
  kill "${pids[-1]}" 2>/dev/null || true
}

case "$stores" in sqlite|postgres|both) ;; *) echo "usage: $0 [sqlite|postgres|both]" >&2; exit 2 ;; esac

if [ "$stores" != postgres ]; then
  sqlite_disk() { du -sb "$work/data-sqlite" | awk '{ print $1 }'; }
  run_store sqlite sqlite sqlite_disk
fi
if [ "$stores" != sqlite ]; then
  # PostgreSQL shares the server's core but not SCHED_FIFO: under it an
  # autovacuum worker would hold the core until it blocks, which no
  # deployment does. Autovacuum stays on (it is what frees the space).
  # max_wal_size: a drop rewrites every page it frees, and the first
  # change of a page after a checkpoint logs the whole page, so dropping
  # 1 GB writes about 1 GB of WAL. With the default of 1 GB that starts a
  # checkpoint every few seconds, and each checkpoint's sync stalls every
  # commit (PostgreSQL logs "checkpoints are occurring too frequently" and
  # advises raising it). PG_MAX_WAL_SIZE=1GB measures the default.
  eval "$(EDDY_PG_STATE="$pg_state" EDDY_PG_WRAP="taskset -c $server_core" \
    EDDY_PG_OPTIONS="-c max_wal_size=${PG_MAX_WAL_SIZE:-4GB} -c log_checkpoints=on ${PG_OPTIONS:-}" "$root/scripts/postgres.sh" start)"
  echo "postgres: max_wal_size=${PG_MAX_WAL_SIZE:-4GB} ${PG_OPTIONS:-}"
  pg_wal() { psql -qtAX "$DATABASE_URL" -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"; }
  pg_checkpoints() { psql -qtAX "$DATABASE_URL" -c "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"; }
  pg_disk() { psql -qtAX "$DATABASE_URL" -c "SELECT pg_database_size(current_database())"; }
  # Space a drop frees is reused once autovacuum has been through the
  # tables: wait for that (at most 5 minutes) before the second fill.
  await_vacuum() {
    local dead waited=0
    while [ "$waited" -lt 300 ]; do
      dead="$(psql -qtAX "$DATABASE_URL" -c "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_all_tables WHERE relname = 'messages' OR relname LIKE 'pg_toast_%'")"
      [ "$dead" -lt 10000 ] && break
      sleep 5; waited=$((waited + 5))
    done
    echo "    autovacuum went through the dropped rows within ${waited} s"
  }
  run_store postgres "$DATABASE_URL" pg_disk
fi
