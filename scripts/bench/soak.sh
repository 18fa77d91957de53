#!/usr/bin/env bash
# Memory soak (issue 24): `eddy serve` on SQLite (release build, default
# 64 MiB message cache) under appends to STREAMS streams over CONNECTIONS
# connections (wrk, spread.lua) with READERS long-poll readers churning
# over random streams (wrk, longpoll.lua). Samples the server's resident
# memory every SAMPLE seconds and prints each sample, then the maximum and
# the growth over the second half of the run (last sample against the one
# at half time).
#
#   scripts/bench/soak.sh                      # 600 s
#   DURATION=180 scripts/bench/soak.sh         # a shorter run
#   EDDY=/tmp/eddy-before scripts/bench/soak.sh   # another binary
#
# Target (issue 24): RSS under 160 MiB throughout, < 10 % growth over the
# second half.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duration="${DURATION:-600}"
streams="${STREAMS:-10000}"
connections="${CONNECTIONS:-32}"
readers="${READERS:-50}"
sample="${SAMPLE:-10}"

if [ -z "${EDDY:-}" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
  (cd "$root" && cargo build --quiet --release -p eddy)
  EDDY="$CARGO_TARGET_DIR/release/eddy"
fi

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
base="http://127.0.0.1:$port"
"$EDDY" serve --listen "127.0.0.1:$port" --storage sqlite --data "$work/data" \
  --max-live-readers $((readers * 4)) >"$work/server.log" 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 1 100); do curl -fsS -o /dev/null "$base/healthz" 2>/dev/null && break; sleep 0.1; done

# The streams, created over parallel connections by one curl.
for n in $(seq 0 $((streams - 1))); do echo "url = \"$base/bench/m-$n\""; echo "output = /dev/null"; done >"$work/create.curl"
curl -sS --no-progress-meter --parallel --parallel-max 32 -X PUT -H 'Content-Type: text/plain' -K "$work/create.curl"

rss_mib() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$server/status"; }

STREAMS="$streams" wrk -t2 -c"$connections" -d"${duration}s" -s "$here/spread.lua" "$base" >"$work/append.out" 2>&1 &
pids+=($!)
STREAMS="$streams" wrk -t1 -c"$readers" -d"${duration}s" --timeout 30s -s "$here/longpoll.lua" "$base" >"$work/read.out" 2>&1 &
pids+=($!)

samples=()
echo "seconds rss_mib"
for ((t = sample; t <= duration; t += sample)); do
  sleep "$sample"
  rss="$(rss_mib)"
  samples+=("$rss")
  echo "$t $rss"
done
wait "${pids[-1]}" "${pids[-2]}" 2>/dev/null || true

echo "appends: $(grep -E 'Requests/sec' "$work/append.out" || true)"
echo "long-polls: $(grep -E 'requests in' "$work/read.out" || true)"
printf '%s\n' "${samples[@]}" | awk -v half=$(( ${#samples[@]} / 2 )) '
  { s[NR] = $1; if ($1 > max) max = $1 }
  END {
    mid = s[half > 0 ? half : 1]; last = s[NR];
    printf "max RSS %.1f MiB; second half %.1f -> %.1f MiB (%+.1f %%)\n", max, mid, last, (last - mid) * 100 / mid
  }'
