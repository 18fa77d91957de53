# Pinning and slice statistics shared by server.sh's `pinned` and
# `postgres-pinned` modes (sourced): the server on SERVER_CORE, the load on
# LOAD_CORE; as root both run under SCHED_FIFO, so each has its core
# whatever else the shared machine runs (only while they measure).

server_core="${SERVER_CORE:-0}"
load_core="${LOAD_CORE:-1}"
if [ "$(id -u)" = 0 ]; then pin() { chrt -f 10 taskset -c "$@"; }; else pin() { taskset -c "$@"; }; fi
# A server runs in its own process (exec, not a child of a subshell), so
# that `$!` is its pid and stopping it really stops it.
exec_pinned() { if [ "$(id -u)" = 0 ]; then exec chrt -f 10 taskset -c "$@"; else exec taskset -c "$@"; fi; }
ratio_slices="${RATIO_SLICES:-8}"
slice_duration="${SLICE_DURATION:-2s}"

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
two_places() { awk '{ printf "%.2f", $1 }'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }
ratio2() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

pinned_rps() { # url [wrk args...]
  local url="$1"; shift
  local out; out="$(pin "$load_core" wrk -t1 -c"$pinned_connections" -d"$duration" "$@" "$url" 2>&1)"
  local bad; bad="$(grep -o 'Non-2xx or 3xx responses: [0-9]*' <<<"$out" | grep -o '[0-9]*$' || true)"
  [ -n "$bad" ] && echo "  warning: $bad non-2xx responses from $url" >&2
  grep 'Requests/sec' <<<"$out" | awk '{print $2}'
}

prepare_kb_stream() { # base: a text stream of 200 messages of 1 KB, one append each
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$1/bench/kb"
  local msg; msg="$(head -c 1024 /dev/zero | tr '\0' 'x')"
  for _ in $(seq 1 200); do curl -fsS -o /dev/null -X POST -H 'content-type: text/plain' --data "$msg" "$1/bench/kb"; done
}
