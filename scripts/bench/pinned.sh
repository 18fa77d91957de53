# The `pinned` mode of server.sh (sourced by it): eddy against itself, the
# server on core 0 and the load on core 1, and the ratios issue 12 sets
# targets for. The long-poll fan-out runs over HTTP/1.1 (a connection per
# reader) and over a few h2c connections, each beside the fan-out floor
# (a bare hyper server, examples/fanout_floor.rs) under the same client.
# Uses server.sh's helpers and variables, and pin.sh's.

. "$here/pin.sh"
pinned_connections="${PINNED_CONNECTIONS:-128}"
fanout_readers="${FANOUT_READERS:-10000}"
fanout_rounds="${FANOUT_ROUNDS:-3}"
fanout_h2c="${FANOUT_H2C:-20}"

start_pinned() { # binary storage: starts a server and sets `base` (not in a subshell, so `pids` keeps it)
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" serve --listen "127.0.0.1:$port" --storage "$2" --data "$work/pinned-$2-$port" \
    --long-poll-timeout 60s --max-live-readers $((fanout_readers * 2)) \
    --max-connections $((fanout_readers + pinned_connections + 64)) \
    --http2-max-streams $((fanout_readers / fanout_h2c + 16)) >/dev/null 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
}

# A bare hyper server (BINARY, taking its address) on the server core,
# ready once PROBE answers: sets `base`.
start_bare() { # binary probe label
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" "127.0.0.1:$port" >/dev/null 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "$base$2" 2>/dev/null && return; sleep 0.1; done
  echo "the $3 at $base did not start" >&2; exit 1
}

# The fan-out floor (examples/fanout_floor.rs) answers parked long-polls
# with Eddy-shaped answers and does nothing else, so its figures are what
# hyper and the kernel alone cost here.
start_floor() { start_bare "$floor" /metrics "fan-out floor"; }

# The request floor (examples/request_floor.rs) answers a GET with `ok`
# and any other request with a 204, reading the body: what one request
# costs in hyper and the kernel alone.
start_request_floor() { start_bare "$request_floor" /healthz "request floor"; }

stop_pinned() { # the last server started that still runs
  local pid="${pids[-1]}"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'
}



fan_out() { # base [h2c:N] -> "p50/p99/max" (ms)
  local p50 p99 max
  read -r p50 p99 max _ <<<"$(pin "$load_core" "$fanout" "$1" "$fanout_readers" "$fanout_rounds" ${2:+"$2"})"
  echo "$p50/$p99/$max"
}

measure_floor() { # -> sets `floor_h1` and `floor_h2` ("p50/p99/max")
  start_floor
  floor_h1="$(fan_out "$base")"
  floor_h2="$(fan_out "$base" "h2c:$fanout_h2c")"
  stop_pinned
}


measure_pinned() { # binary -> sets `figures` (see pinned_report)
  local bin="$1" mem sql fl h ma sa fg fp mr sr fan_h1 fan_h2 hs="" mas="" sas="" r_ma="" r_sa="" r_hf="" r_af=""
  # Both stores' servers run side by side on the server core (an idle one
  # costs nothing), and the load alternates between them in short slices:
  # on a shared VM a figure drifts by several percent from one second to
  # the next, so each ratio is taken within a slice and the median of the
  # slices is reported, with their range.
  start_pinned "$bin" memory; mem="$base"
  start_pinned "$bin" sqlite; sql="$base"
  start_request_floor; fl="$base"
  for b in "$mem" "$sql"; do
    curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$b/bench/append"
    prepare_kb_stream "$b"
  done
  # Each ratio's two rates run back to back, and every other slice runs
  # them in the reverse order (A B, then B A), so that a drift of the
  # machine's speed within a slice falls on both sides alike.
  local -A url=([h]="$mem/healthz" [fg]="$fl/healthz" [fp]="$fl/bench/append" [ma]="$mem/bench/append" [sa]="$sql/bench/append")
  local -A got
  local order=(h fg fp ma sa) name
  for _ in $(seq 1 "$ratio_slices"); do
    for name in "${order[@]}"; do
      local script=()
      [[ "${url[$name]}" == */bench/append ]] && script=(-s "$here/append.lua")
      got[$name]="$(duration="$slice_duration" pinned_rps "${url[$name]}" "${script[@]}")"
    done
    mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    h="${got[h]}"; fg="${got[fg]}"; fp="${got[fp]}"; ma="${got[ma]}"; sa="${got[sa]}"
    hs="$hs $h"; mas="$mas $ma"; sas="$sas $sa"
    r_ma="$r_ma $(ratio2 "$ma" "$h")"; r_sa="$r_sa $(ratio2 "$sa" "$ma")"
    r_hf="$r_hf $(ratio2 "$h" "$fg")"; r_af="$r_af $(ratio2 "$ma" "$fp")"
  done
  stop_pinned
  mr="$(pinned_rps "$(first_chunk_url "$mem/bench/kb")")"
  sr="$(pinned_rps "$(first_chunk_url "$sql/bench/kb")")"
  fan_h1="$(fan_out "$mem")"
  fan_h2="$(fan_out "$mem" "h2c:$fanout_h2c")"
  stop_pinned; stop_pinned
  figures="$(median <<<"$hs") $(median <<<"$mas") $(median <<<"$sas") $mr $sr $fan_h1 $fan_h2"
  figures="$figures $(median <<<"$r_sa" | two_places) $(range <<<"$r_sa") $(median <<<"$r_ma" | two_places) $(range <<<"$r_ma")"
  figures="$figures $(median <<<"$r_hf" | two_places) $(range <<<"$r_hf") $(median <<<"$r_af" | two_places) $(range <<<"$r_af")"
}

pinned_report() { # label figures
  local h ma sa mr sr fan_h1 fan_h2 r_sa range_sa r_ma range_ma r_hf range_hf r_af range_af
  read -r h ma sa mr sr fan_h1 fan_h2 r_sa range_sa r_ma range_ma r_hf range_hf r_af range_af <<<"$2"
  echo
  echo "== $1 (server on core $server_core, wrk -t1 -c$pinned_connections on core $load_core) =="
  echo "   ($ratio_slices slices of $slice_duration per rate and store, medians; reads $duration)"
  printf '%-52s %12s\n' "/healthz (req/s)" "$h"
  printf '%-52s %12s\n' "memory single appends (req/s)" "$ma"
  printf '%-52s %12s\n' "SQLite single appends, fsync (req/s)" "$sa"
  printf '%-52s %12s\n' "memory catch-up reads, 200 x 1 KB (req/s)" "$mr"
  printf '%-52s %12s\n' "SQLite catch-up reads, 200 x 1 KB (req/s)" "$sr"
  printf '%-52s %12s  (target >= 0.50)\n' "ratio SQLite / memory catch-up reads" "$(ratio2 "$sr" "$mr")"
  printf '%-52s %12s  (slices %s; target >= 0.50)\n' "ratio SQLite / memory single appends" "$r_sa" "$range_sa"
  # /healthz skips the middleware since issue 35: the floor ratios below
  # are the measure of what a request costs.
  printf '%-52s %12s  (slices %s)\n' "ratio memory appends / healthz" "$r_ma" "$range_ma"
  printf '%-52s %12s  (slices %s; target >= 0.90)\n' "ratio /healthz / request floor GET" "$r_hf" "$range_hf"
  printf '%-52s %12s  (slices %s; target >= 0.70)\n' "ratio memory appends / request floor POST" "$r_af" "$range_af"
  printf '%-52s %18s  (floor %s; target: all <= 100 ms)\n' "$fanout_readers long-poll readers, HTTP/1.1, p50/p99/max ms" "$fan_h1" "$floor_h1"
  printf '%-52s %18s  (floor %s)\n' "  the same over $fanout_h2c h2c connections" "$fan_h2" "$floor_h2"
}


measure_floor
if [ -n "${BASELINE:-}" ]; then
  measure_pinned "$BASELINE"
  pinned_report "baseline: $BASELINE" "$figures"
fi
measure_pinned "$eddy"
pinned_report "this build: $eddy" "$figures"
