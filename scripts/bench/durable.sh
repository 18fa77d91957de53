# The `durable-pinned` mode of server.sh (sourced by it): durable single
# appends (SQLite, fsync on, the defaults) against memory ones per core,
# in alternating rounds (SQLite, memory, SQLite, memory, ...) of one run,
# the server on core 0 and wrk on core 1 (pin.sh). Each round prints both
# rates, their ratio, and what the SQLite server's own metrics say of its
# group commits in that round: the mean group (calls per fsync) and the
# mean commit time (the COMMIT with its fsync). At DURABLE_CONNECTIONS
# (32) concurrent appenders the durable rate is about
# connections / (commit time + the CPU time of one group), so a round
# whose commit time rose (the disk is shared with whatever else the machine
# runs, which pinning does not isolate) shows why its ratio fell.
# With BASELINE=/path/to/an/older/eddy, that binary's SQLite server takes
# its turn in each round too, so before and after come from one run.
# Uses server.sh's helpers and variables, and pin.sh's.

. "$here/pin.sh"
durable_rounds="${DURABLE_ROUNDS:-6}"
durable_seconds="${DURABLE_SECONDS:-4s}"
pinned_connections="${DURABLE_CONNECTIONS:-32}"

start_durable() { # binary storage: starts a pinned server and sets `base`
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" serve --listen "127.0.0.1:$port" --storage "$2" --data "$work/durable-$2-$port" >/dev/null 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$base/bench/append"
}

commit_totals() { # base -> "calls commits seconds" of the store's commit metrics so far
  curl -fsS "$1/metrics" | awk '
    /^eddy_store_commit_group_size_sum / { calls = $2 }
    /^eddy_store_commit_group_size_count / { commits = $2 }
    /^eddy_store_commit_duration_seconds_sum / { seconds = $2 }
    END { print calls + 0, commits + 0, seconds + 0 }'
}

durable_round() { # base -> "rate mean-group mean-commit-ms" of one round of appends
  local c0 n0 s0 c1 n1 s1 rate
  read -r c0 n0 s0 <<<"$(commit_totals "$1")"
  rate="$(duration="$durable_seconds" pinned_rps "$1/bench/append" -s "$here/append.lua")"
  read -r c1 n1 s1 <<<"$(commit_totals "$1")"
  awk -v r="$rate" -v c="$((c1 - c0))" -v n="$((n1 - n0))" -v s0="$s0" -v s1="$s1" \
    'BEGIN { if (n > 0) printf "%s %.1f %.3f", r, c / n, (s1 - s0) / n * 1000; else printf "%s n/a n/a", r }'
}

labels=("this build")
bins=("$eddy")
if [ -n "${BASELINE:-}" ]; then labels+=("baseline"); bins+=("$(realpath "$BASELINE")"); fi
sql=()
for bin in "${bins[@]}"; do start_durable "$bin" sqlite; sql+=("$base"); done
start_durable "$eddy" memory; mem="$base"

echo
echo "== durable single appends per core (server on core $server_core, wrk -t1 -c$pinned_connections on core $load_core) =="
echo "   ($durable_rounds rounds of $durable_seconds per server, alternating; group = calls per fsync, commit = COMMIT with its fsync)"
printf '%-6s %-12s %10s %10s %7s %7s %11s\n' round build "SQLite/s" "memory/s" ratio group "commit ms"
declare -A ratios
for round in $(seq 1 "$durable_rounds"); do
  rows=()
  for i in "${!sql[@]}"; do rows+=("$(durable_round "${sql[$i]}")"); done
  m="$(duration="$durable_seconds" pinned_rps "$mem/bench/append" -s "$here/append.lua")"
  for i in "${!sql[@]}"; do
    read -r s group commit <<<"${rows[$i]}"
    r="$(ratio2 "$s" "$m")"; ratios[$i]="${ratios[$i]:-} $r"
    printf '%-6s %-12s %10s %10s %7s %7s %11s\n' "$round" "${labels[$i]}" "$s" "$m" "$r" "$group" "$commit"
  done
done
for i in "${!sql[@]}"; do
  printf '%-52s %6s  (rounds %s; target >= 0.50)\n' "ratio SQLite / memory single appends, ${labels[$i]}" \
    "$(median <<<"${ratios[$i]}" | two_places)" "$(range <<<"${ratios[$i]}")"
done
