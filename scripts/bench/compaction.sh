#!/usr/bin/env bash
# Compaction bench (issue 34): `eddy serve` (release build) on STORAGE
# (sqlite by default; postgres with DATABASE_URL) takes UPSERTS upserts
# (1 000 000) over KEYS keys (10 000), about 150 bytes each, in batches
# of BATCH (100) from one client: first into a plain JSON stream, then
# into a stream created with `Eddy-Compaction: POLICY` (on) while the
# server's sweep (every second) compacts it. compaction.mjs prints:
#
# - append p50/p99 per phase (the ratio is the figure: the compacted
#   phase runs while compaction passes run between the appends);
# - the bytes each stream keeps once compaction settled, and the working
#   set (the latest message of every key): kept / working set;
# - a newcomer's read from -1 and its fold of the rows, plain against
#   compacted (time, bytes, messages), checked to give the same rows;
#
# then the data directory's size (SQLite).
#
#   scripts/bench/compaction.sh
#   UPSERTS=100000 scripts/bench/compaction.sh
#   EDDY=target/debug/eddy STORAGE=postgres scripts/bench/compaction.sh
#
# Targets (issue 34): kept within 1.5x the working set; append p99 while
# compacting within 2x of without.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
backend="${STORAGE:-sqlite}"

if [ -z "${EDDY:-}" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
  (cd "$root" && cargo build --quiet --release -p eddy)
  EDDY="$CARGO_TARGET_DIR/release/eddy"
fi

# shellcheck source=../lib/serve.sh
. "$root/scripts/lib/serve.sh"

work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -n "${schema:-}" ] && drop_schema
  rm -rf "$work"
}
trap cleanup EXIT

storage_for "$backend" "$work/data" "$work/server.log" "compaction bench"
port="$(free_port)"
"$EDDY" serve --listen "127.0.0.1:$port" "${storage[@]}" --sweep-interval 1s \
  >"$work/server.log" 2>&1 &
server=$!
wait_healthy "http://127.0.0.1:$port" "$server" "$work/server.log" "compaction bench"

echo "backend $backend"
node "$here/compaction.mjs" "http://127.0.0.1:$port"
if [ "$backend" = sqlite ]; then
  echo "data_dir_bytes $(du -sb "$work/data" | cut -f1)"
fi
