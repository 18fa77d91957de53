# The `postgres-pinned` mode of server.sh (sourced by it): eddy on
# PostgreSQL beside eddy on SQLite, per core, for the targets of issue 27.
# The servers and PostgreSQL (a cluster of its own; fsync and
# synchronous_commit at their safe defaults, on) share core 0, the load
# (wrk -t1 -c$PG_CONNECTIONS, 32 by default) runs on core 1. Workloads:
#   - single appends to one stream (append.lua);
#   - 100-message producer batches, each request a new producer, over 16
#     streams (spread.lua BATCH=100), so no stream reaches its producer limit;
#   - single appends across 10 000 streams (spread.lua), created beforehand;
#   - the same, each stream created by a PUT on first use (first-use.lua:
#     new streams in each slice), for issue 35;
#   - catch-up reads of 200 x 1 KB messages.
# Each figure is taken in slices (RATIO_SLICES of SLICE_DURATION) that
# alternate between the servers, and the ratio PostgreSQL / SQLite is the
# median of the slices' ratios, with their range. With BASELINE=/path/to/an
# older eddy, that binary's PostgreSQL server runs in the same slices, on a
# database of its own. Per request, the statements PostgreSQL executed
# (pg_stat_statements calls; the driver's pings and its prepares are not
# statements, so they are not counted): a figure the machine's noise does
# not move. (Transactions and WAL flushes per request are not shown:
# PostgreSQL reports them to its statistics up to seconds late.) Last, appends across the 10 000 streams with two `eddy serve` on
# one database against one.
# PG_WORKLOADS picks workloads (append batch many first read by default);
# PG_TWO_SERVERS=0 leaves out the two-server part.
# Uses server.sh's helpers and variables, and pin.sh's.

. "$here/pin.sh"
pinned_connections="${PG_CONNECTIONS:-32}"
pg_streams="${PG_STREAMS:-10000}"
batch_streams=16

# PostgreSQL's cluster of its own, on the server core. Autovacuum is off:
# a worker vacuuming what one run wrote would take the core from the next
# server's slice (under SCHED_FIFO, until it blocks).
pg_state="$work/pg-state"
pg_wrap="taskset -c $server_core"
[ "$(id -u)" = 0 ] && pg_wrap="chrt -f 10 $pg_wrap"
eval "$(EDDY_PG_STATE="$pg_state" EDDY_PG_WRAP="$pg_wrap" \
  EDDY_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c autovacuum=off" "$root/scripts/postgres.sh" start)"
trap 'EDDY_PG_STATE="$pg_state" "$root/scripts/postgres.sh" stop >/dev/null 2>&1 || true; cleanup' EXIT
admin="$DATABASE_URL"
sql() { psql -qtAX "$admin" -c "$1"; }
sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
database() { # name -> URL of a new database
  sql "CREATE DATABASE $1" >/dev/null
  echo "${admin%/*}/$1"
}

start_server() { # binary storage [serve args...]: sets `base`
  local port bin="$1" storage="$2"; shift 2; port="$(free_port)"
  (exec_pinned "$server_core" "$bin" serve --listen "127.0.0.1:$port" --storage "$storage" \
    --data "$work/data-$port" "$@" >"$work/log-$port" 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
}

create_all() { # base prefix count content-type: creates <base>/bench/<prefix>-0.. at once
  local i cfg="$work/create-$$"
  for i in $(seq 0 $(($3 - 1))); do printf 'url = "%s/bench/%s-%d"\noutput = "/dev/null"\n' "$1" "$2" "$i"; done >"$cfg"
  curl -fsS --no-progress-meter -Z --parallel-max 16 -X PUT -H "content-type: $4" -K "$cfg"
}

prepare() { # base
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$1/bench/append"
  create_all "$1" b "$batch_streams" application/json
  create_all "$1" m "$pg_streams" text/plain
  prepare_kb_stream "$1"
}

statements() { # database -> statements executed so far
  sql "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
       WHERE d.datname = '$1'"
}

load() { # url connections [wrk args...] -> "req/s requests"
  local url="$1" c="$2"; shift 2
  RUN="$(date +%s%N)"; export RUN # names spread.lua's producers
  local out; out="$(pin "$load_core" wrk -t1 -c"$c" -d"$slice_duration" "$@" "$url" 2>&1)"
  local bad; bad="$(grep -o 'Non-2xx or 3xx responses: [0-9]*' <<<"$out" | grep -o '[0-9]*$' || true)"
  [ -n "$bad" ] && echo "  warning: $bad non-2xx responses from $url" >&2
  echo "$(awk '/Requests\/sec/ { print $2 }' <<<"$out") $(awk '/requests in/ { print $1 }' <<<"$out")"
}

workload_args() { # workload -> sets `path` and `args`
  case "$1" in
    append) path=/bench/append; args=(-s "$here/append.lua") ;;
    batch) path=/; args=(-s "$here/spread.lua") ;;
    many) path=/; args=(-s "$here/spread.lua") ;;
    first) path=/; args=(-s "$here/first-use.lua") ;;
    read) path=""; args=() ;; # each server's own first chunk (kb_url)
  esac
}

workload_env() { # workload -> the environment of spread.lua
  case "$1" in
    batch) echo "STREAMS=$batch_streams PREFIX=b BATCH=100" ;;
    first) echo "STREAMS=$pg_streams PREFIX=f" ;;
    *) echo "STREAMS=$pg_streams PREFIX=m BATCH=0" ;;
  esac
}

# One workload over the servers in alternating slices. Servers: "label
# base database" lines (database empty for SQLite, first). Prints, per
# server after the first: "median-req/s ratio range statements/req".
measure_workload() { # workload servers...
  local workload="$1"; shift
  local -A rates ratios stmts requests
  local slice label url db r n before target
  workload_args "$workload"
  for slice in $(seq 1 "$ratio_slices"); do
    local first=""
    for server in "$@"; do
      read -r label url db <<<"$server"
      [ -n "$db" ] && before="$(statements "$db")"
      # shellcheck disable=SC2046 # the environment is words
      target="$url$path"
      [ "$workload" = read ] && target="${kb_url[$label]}"
      read -r r n <<<"$(export $(workload_env "$workload"); load "$target" "$pinned_connections" "${args[@]}")"
      rates[$label]="${rates[$label]:-} $r"
      if [ -z "$first" ]; then first="$r"; else ratios[$label]="${ratios[$label]:-} $(ratio2 "$r" "$first")"; fi
      if [ -n "$db" ]; then
        stmts[$label]=$(( ${stmts[$label]:-0} + $(statements "$db") - before ))
        requests[$label]=$(( ${requests[$label]:-0} + n ))
      fi
    done
  done
  for server in "$@"; do
    read -r label url db <<<"$server"
    if [ -z "$db" ]; then
      echo "$label $(median <<<"${rates[$label]}")"
    else
      echo "$label $(median <<<"${rates[$label]}") $(median <<<"${ratios[$label]}" | two_places) $(range <<<"${ratios[$label]}") \
$(awk -v s="${stmts[$label]}" -v n="${requests[$label]}" 'BEGIN { printf "%.2f", n ? s / n : 0 }')"
    fi
  done
}

declare -A kb_url
start_server "$eddy" sqlite; sqlite_base="$base"; prepare "$base"
kb_url[sqlite]="$(first_chunk_url "$base/bench/kb")"
new_url="$(database bench_new)"
start_server "$eddy" "$new_url"; new_base="$base"; prepare "$base"
kb_url[postgres]="$(first_chunk_url "$base/bench/kb")"
servers=("sqlite $sqlite_base" "postgres $new_base bench_new")
if [ -n "${BASELINE:-}" ]; then
  base_url="$(database bench_baseline)"
  start_server "$BASELINE" "$base_url"; prepare "$base"
  kb_url[baseline]="$(first_chunk_url "$base/bench/kb")"
  servers+=("baseline $base bench_baseline")
fi

echo
echo "== eddy on PostgreSQL beside eddy on SQLite, per core (servers and PostgreSQL on core $server_core; wrk -t1 -c$pinned_connections on core $load_core) =="
echo "   ($ratio_slices slices of $slice_duration per workload and server, alternating; medians; fsync and synchronous_commit on)"
printf '%-40s %10s  %-10s %10s %7s %-11s %9s\n' "" "SQLite" "server" "req/s" "/SQLite" "(slices)" "stmts/req"
for workload in ${PG_WORKLOADS:-append batch many first read}; do
  case "$workload" in
    append) title="single appends, one stream" ;;
    batch) title="100-message producer batches" ;;
    many) title="single appends across $pg_streams streams" ;;
    first) title="... each created by PUT on first use" ;;
    read) title="catch-up reads, 200 x 1 KB" ;;
  esac
  mapfile -t rows < <(measure_workload "$workload" "${servers[@]}")
  read -r _ sqlite_rate <<<"${rows[0]}"
  for row in "${rows[@]:1}"; do
    read -r label rate ratio spread per_stmt <<<"$row"
    printf '%-40s %10s  %-10s %10s %7s %-11s %9s\n' "$title" "$sqlite_rate" "$label" "$rate" "$ratio" "($spread)" "$per_stmt"
    title=""; sqlite_rate=""
  done
done

[ "${PG_TWO_SERVERS:-1}" = 1 ] || exit 0

# Two servers on one database: the appends across many streams split
# between them (two wrk on the load core, half the connections each),
# against one server taking them all, in alternating slices.
start_server "$eddy" "$new_url"; second_base="$base"
ones="" twos="" ratios=""
# shellcheck disable=SC2046 # the environment is words
export $(workload_env many)
for _ in $(seq 1 "$ratio_slices"); do
  read -r one _ <<<"$(load "$new_base/" "$pinned_connections" -s "$here/spread.lua")"
  half=$((pinned_connections / 2))
  load "$new_base/" "$half" -s "$here/spread.lua" >"$work/two-a" &
  other=$!
  read -r b _ <<<"$(load "$second_base/" "$half" -s "$here/spread.lua")"
  wait "$other"
  read -r a _ <"$work/two-a"
  two="$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a + b }')"
  ones="$ones $one"; twos="$twos $two"; ratios="$ratios $(ratio2 "$two" "$one")"
done
echo
echo "== appends across $pg_streams streams: two eddy serve on one database against one (same cores) =="
printf '%-40s %10s\n' "one server (req/s)" "$(median <<<"$ones")"
printf '%-40s %10s\n' "two servers, load split (req/s)" "$(median <<<"$twos")"
printf '%-40s %10s  (slices %s; target >= 1.5)\n' "ratio two / one" "$(median <<<"$ratios" | two_places)" "$(range <<<"$ratios")"
