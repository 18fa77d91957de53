#!/usr/bin/env bash
# This build of `eddy serve` against an older one (by default 36207e0, the
# build of 2026-11-30, before HTTP/2, compression, caching headers,
# request ids and the metrics crates), in the same run: the servers pinned
# to one core (memory store), wrk -c32 pinned to the other, /healthz and
# single-message appends, in alternating rounds; then the instructions per
# request of both (instructions.sh). A change that makes a plain request
# (no Accept-Encoding, HTTP/1.1, a small body) pay for a feature it does
# not use shows here.
#
#   scripts/bench/old-build.sh                  # against 36207e0, 2 rounds of 10 s
#   OLD=066820a ROUNDS=4 DURATION=5s scripts/bench/old-build.sh
#   OLD_BIN=/tmp/eddy-old scripts/bench/old-build.sh   # an old binary already built
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
old="${OLD:-36207e0}"
rounds="${ROUNDS:-2}"
duration="${DURATION:-10s}"
pinned_connections="${CONNECTIONS:-32}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
# shellcheck source=pin.sh
source "$here/pin.sh"

work="$(mktemp -d)"
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -d "$work/old" ] && git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

new_bin="${NEW_BIN:-}"
if [ -z "$new_bin" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres)
  new_bin="$work/eddy-new"
  cp "$CARGO_TARGET_DIR/release/eddy" "$new_bin"
fi
old_bin="${OLD_BIN:-}"
if [ -z "$old_bin" ]; then
  git -C "$root" worktree add --detach "$work/old" "$old" >/dev/null
  (cd "$work/old" && cargo build --quiet --release -p eddy --features postgres)
  old_bin="$work/eddy-$old"
  cp "$CARGO_TARGET_DIR/release/eddy" "$old_bin"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
start() { # binary -> prints its base URL
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" serve --storage memory --listen "127.0.0.1:$port" >/dev/null 2>&1) &
  servers+=($!)
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break; sleep 0.1; done
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "http://127.0.0.1:$port/bench/append"
  echo "http://127.0.0.1:$port"
}

old_url="$(start "$old_bin")"
new_url="$(start "$new_bin")"
printf '%-8s %-10s %14s %14s %8s\n' round route "old req/s" "new req/s" new/old
for round in $(seq 1 "$rounds"); do
  for route in healthz append; do
    args=(); path=/healthz
    if [ "$route" = append ]; then args=(-s "$here/append.lua"); path=/bench/append; fi
    # Alternate which build goes first.
    if [ $((round % 2)) = 1 ]; then
      o="$(pinned_rps "$old_url$path" "${args[@]}")"; n="$(pinned_rps "$new_url$path" "${args[@]}")"
    else
      n="$(pinned_rps "$new_url$path" "${args[@]}")"; o="$(pinned_rps "$old_url$path" "${args[@]}")"
    fi
    printf '%-8s %-10s %14s %14s %8s\n' "$round" "$route" "$o" "$n" "$(ratio2 "$n" "$o")"
  done
done
for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
servers=()
echo
NO_BUILD=1 "$here/instructions.sh" "$old_bin" "$new_bin"
