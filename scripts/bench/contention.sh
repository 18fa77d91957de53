#!/usr/bin/env bash
# Writers of one stream in different processes, on DynamoDB (a moto server
# of its own, scripts/moto.sh): W `eddy serve` on one table, each with its
# own wrk appending single messages to the same stream for DURATION, all at
# once; then the appends answered, the appends refused (non-2xx: a call
# that lost every race with the other processes for as long as the store
# retries), their share and the worst writer's 99th percentile latency,
# for W = 2, 8 and 16. With OLD_BIN, an older
# binary runs the same rounds first, in the same run.
#
#   scripts/bench/contention.sh
#   OLD_BIN=/tmp/eddy-old WRITERS="2 8 16" DURATION=20s scripts/bench/contention.sh
#   EDDY_BIN=target/release/eddy scripts/bench/contention.sh   # built with --features aws
#
# moto serves one request at a time and far slower than DynamoDB, so the
# rates say little about DynamoDB; the share of refused appends is what
# the run is for. Environment: WRITERS ("2 8 16"), DURATION (10s),
# CONNECTIONS per writer (4), MOTO_VENV.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
writers_list="${WRITERS:-2 8 16}"
duration="${DURATION:-10s}"
connections="${CONNECTIONS:-4}"

command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
eddy="${EDDY_BIN:+$(realpath "$EDDY_BIN")}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features aws)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi
builds=()
[ -n "${OLD_BIN:-}" ] && builds+=("old=$(realpath "$OLD_BIN")")
builds+=("new=$eddy")

work="$(mktemp -d)"
pids=()
moto_state="$work/moto"
stop_servers() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_servers
  MOTO_STATE="$moto_state" "$root/scripts/moto.sh" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
moto_env="$(MOTO_STATE="$moto_state" "$root/scripts/moto.sh" start 2>"$work/moto.err")" \
  || { cat "$work/moto.err" >&2; exit 1; }
eval "$moto_env"
export AWS_ENDPOINT_URL="$EDDY_DYNAMODB_ENDPOINT" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing

# shellcheck source=../lib/serve.sh
. "$root/scripts/lib/serve.sh" # free_port, wait_healthy

# One round: W servers of BINARY on a fresh table, each appended to by its
# own wrk at once. Prints "answered refused".
round() {
  local binary="$1" writers="$2" table port i
  table="contention-$$-$RANDOM"
  "$binary" dynamo create-table --table "$table" >/dev/null
  local bases=()
  for i in $(seq 1 "$writers"); do
    port="$(free_port)"
    "$binary" serve --listen "127.0.0.1:$port" --storage "dynamodb://$table" \
      --data "$(mktemp -d -p "$work")" >"$work/log-$port" 2>&1 &
    pids+=($!)
    wait_healthy "http://127.0.0.1:$port" "$!" "$work/log-$port" "eddy serve" >&2
    bases+=("http://127.0.0.1:$port")
  done
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "${bases[0]}/bench/contended"
  local loads=()
  for i in "${!bases[@]}"; do
    wrk -t1 -c"$connections" -d"$duration" --timeout 60s --latency -s "$here/append.lua" \
      "${bases[$i]}/bench/contended" >"$work/wrk-$i" 2>&1 &
    loads+=($!)
  done
  wait "${loads[@]}"
  local answered=0 refused=0 n bad p99
  p99="$(awk '$1 == "99%" { v = $2; f = v ~ /us$/ ? 0.001 : v ~ /ms$/ ? 1 : v ~ /m$/ ? 60000 : 1000
                             sub(/[a-z]+$/, "", v); ms = v * f; if (ms > worst) worst = ms }
             END { printf "%.0fms", worst }' "$work"/wrk-*)"
  for i in "${!bases[@]}"; do
    n="$(awk '/requests in/ { print $1 }' "$work/wrk-$i")"
    bad="$(grep -o 'Non-2xx or 3xx responses: [0-9]*' "$work/wrk-$i" | grep -o '[0-9]*$' || echo 0)"
    answered=$((answered + n - bad)); refused=$((refused + bad))
  done
  stop_servers
  echo "$answered $refused $p99"
}

printf '%-6s %8s %10s %10s %9s %12s\n' build writers answered refused "refused%" "worst p99"
for writers in $writers_list; do
  for build in "${builds[@]}"; do
    read -r answered refused p99 <<<"$(round "${build#*=}" "$writers")"
    printf '%-6s %8s %10s %10s %9s %12s\n' "${build%%=*}" "$writers" "$answered" "$refused" \
      "$(awk -v a="$answered" -v r="$refused" 'BEGIN { t = a + r; printf "%.1f", t ? 100 * r / t : 0 }')" "$p99"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
