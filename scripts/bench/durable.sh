# The `durable-pinned` mode of server.sh (sourced by it): durable single
# appends (SQLite, fsync on, the defaults) against memory ones per core,
# in alternating rounds (SQLite, memory, SQLite, memory, ...) of one run,
# the servers on the core that takes the disk's interrupts (below) and wrk
# on the other (pin.sh). Each round prints both
# rates, their ratio, and what the SQLite server's own metrics say of its
# group commits in that round: the mean group (calls per fsync) and the
# mean commit time (the COMMIT with its fsync). At DURABLE_CONNECTIONS
# (32) concurrent appenders the durable rate is about
# connections / (commit time + the CPU time of one group), so a round
# whose commit time rose (the disk is shared with whatever else the machine
# runs, which pinning does not isolate) shows why its ratio fell. The
# round's last columns split a durable append's share of the one core:
# the runtime's CPU, the writer thread's, and the idle rest (everyone
# waiting for the disk), with the share the host took the core (steal):
# a round whose CPU per append jumped with no change of build is the
# machine.
# With BASELINE=/path/to/an/older/eddy, that binary's SQLite server takes
# its turn in each round too, so before and after come from one run.
# Uses server.sh's helpers and variables, and pin.sh's.

. "$here/pin.sh"

# The core that takes the interrupts of the data disk's completions, if
# one takes most of them. An fsync waited for on another core ends with a
# wake-up across cores, which on a VM costs a VM exit: here a bare fsync
# probe took 135 us pinned to that core and 210 us pinned to the other, and
# a durable commit 200 us against 280 us. So the durable rounds put the
# server (and the memory server it is measured against) on that core,
# unless SERVER_CORE is set; the load goes to another.
disk_irq_core() {
  local disk driver
  disk="$(basename "$(df --output=source "$work" | tail -1)")"
  # A partition's disk is its parent in sysfs.
  [ -e "/sys/class/block/$disk/partition" ] \
    && disk="$(basename "$(dirname "$(readlink -f "/sys/class/block/$disk")")")"
  driver="$(basename "$(readlink -f "/sys/block/$disk/device" 2>/dev/null)" 2>/dev/null)"
  [ -n "$driver" ] || return 0
  awk -v driver="$driver" '
    NR == 1 { cpus = NF; next }
    $NF ~ "^" driver && $NF !~ /config$/ {
      for (c = 1; c <= cpus; c++) { count[c - 1] += $(c + 1); total += $(c + 1) }
    }
    END {
      for (c in count) if (count[c] > best) { best = count[c]; core = c }
      if (total > 0 && best > total / 2) print core
    }' /proc/interrupts
}
if [ -z "${SERVER_CORE:-}" ]; then
  irq_core="$(disk_irq_core)"
  if [ -n "$irq_core" ] && [ "$irq_core" != "$server_core" ]; then
    load_core="$server_core"; server_core="$irq_core"
  fi
fi
durable_rounds="${DURABLE_ROUNDS:-6}"
durable_seconds="${DURABLE_SECONDS:-4s}"
pinned_connections="${DURABLE_CONNECTIONS:-32}"

declare -A server_pid
start_durable() { # binary storage: starts a pinned server and sets `base`
  local port; port="$(free_port)"
  (exec_pinned "$server_core" "$1" serve --listen "127.0.0.1:$port" --storage "$2" --data "$work/durable-$2-$port" >/dev/null 2>&1) &
  pids+=($!); base="http://127.0.0.1:$port"; wait_up "$base"
  server_pid[$base]=$!
  curl -fsS -o /dev/null -X PUT -H 'content-type: text/plain' "$base/bench/append"
}

# The CPU time so far, in ns, of a server's runtime threads and of its
# store's writer thread (the kernel's per-thread schedstat): "runtime writer".
thread_cpu() { # pid
  local task comm ns runtime=0 writer=0
  for task in /proc/"$1"/task/*; do
    read -r comm <"$task/comm" 2>/dev/null || continue
    read -r ns _ <"$task/schedstat" 2>/dev/null || continue
    case "$comm" in
      eddy-streams-wr*) writer=$((writer + ns)) ;;
      *) runtime=$((runtime + ns)) ;;
    esac
  done
  echo "$runtime $writer"
}

commit_totals() { # base -> "calls commits seconds" of the store's commit metrics so far
  curl -fsS "$1/metrics" | awk '
    /^eddy_store_commit_group_size_sum / { calls = $2 }
    /^eddy_store_commit_group_size_count / { commits = $2 }
    /^eddy_store_commit_duration_seconds_sum / { seconds = $2 }
    END { print calls + 0, commits + 0, seconds + 0 }'
}

# The server core's steal time so far, in clock ticks: time the host gave
# this VM's core to someone else, which inflates every figure of a round.
core_steal() { awk -v cpu="cpu$server_core" '$1 == cpu { print $9 }' /proc/stat; }

durable_round() { # base -> "rate mean-group mean-commit-ms runtime-us writer-us idle-us steal-%" of one round of appends
  local c0 n0 s0 c1 n1 s1 r0 w0 r1 w1 t0 t1 rate
  read -r c0 n0 s0 <<<"$(commit_totals "$1")"
  read -r r0 w0 <<<"$(thread_cpu "${server_pid[$1]}")"
  t0="$(core_steal)"
  rate="$(duration="$durable_seconds" pinned_rps "$1/bench/append" -s "$here/append.lua")"
  t1="$(core_steal)"
  read -r r1 w1 <<<"$(thread_cpu "${server_pid[$1]}")"
  read -r c1 n1 s1 <<<"$(commit_totals "$1")"
  # Per append: the CPU of each side, and what is left of the append's
  # share of the wall clock (1 / rate) on the one core: the core idle,
  # every thread waiting for the disk.
  awk -v r="$rate" -v c="$((c1 - c0))" -v n="$((n1 - n0))" -v s0="$s0" -v s1="$s1" \
    -v rt="$((r1 - r0))" -v wr="$((w1 - w0))" -v secs="${durable_seconds%s}" \
    -v steal="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" '
    BEGIN {
      appends = r * secs; rt_us = rt / 1000 / appends; wr_us = wr / 1000 / appends
      idle = 1e6 / r - rt_us - wr_us; stolen = steal / hz / secs * 100
      if (n > 0) printf "%s %.1f %.3f %.1f %.1f %.1f %.0f", r, c / n, (s1 - s0) / n * 1000, rt_us, wr_us, idle, stolen
      else printf "%s n/a n/a %.1f %.1f %.1f %.0f", r, rt_us, wr_us, idle, stolen
    }'
}

# The disk's own fsync now, from the server's core: the median of 64
# rounds (after 8 to warm up) of four overwritten WAL-sized frames and an
# fsync, in the bench's data directory. A commit is mostly its fsync, and
# the durable rate at 32 appenders follows it: this column shows when a
# round's ratio moved with the disk (a shared VM's disk varies from minute
# to minute), not with the build.
disk_fsync_us() {
  taskset -c "$server_core" python3 - "$work" <<'PROBE'
import os, sys, time
# One file for every probe, written whole once: a file made and removed
# each round made the next probes wait for the discard of its blocks.
path = os.path.join(sys.argv[1], "fsync-probe")
frame = b"x" * 4120
fresh = not os.path.exists(path)
fd = os.open(path, os.O_RDWR | os.O_CREAT)
if fresh:
    os.pwrite(fd, frame * 256, 0)
    os.fsync(fd)
times = []
for i in range(72):
    for k in range(4):
        os.pwrite(fd, frame, ((i * 4 + k) % 256) * len(frame))
    start = time.perf_counter()
    os.fsync(fd)
    times.append(time.perf_counter() - start)
os.close(fd)
times = sorted(times[8:])
print(round(times[len(times) // 2] * 1e6))
PROBE
}

labels=("this build")
bins=("$eddy")
if [ -n "${BASELINE:-}" ]; then labels+=("baseline"); bins+=("$(realpath "$BASELINE")"); fi
sql=()
for bin in "${bins[@]}"; do start_durable "$bin" sqlite; sql+=("$base"); done
start_durable "$eddy" memory; mem="$base"

echo
echo "== durable single appends per core (server on core $server_core, wrk -t1 -c$pinned_connections on core $load_core) =="
echo "   ($durable_rounds rounds of $durable_seconds per server, alternating; group = calls per fsync, commit = COMMIT with its fsync,"
echo "    fsync = the disk's own, probed after the round; µs per durable append: the runtime's CPU, the writer's,"
echo "    and the core idle while every appender waits for the disk; steal = the share of the round the host took the core)"
printf '%-6s %-12s %10s %10s %7s %7s %11s %10s %9s %9s %9s %7s\n' round build "SQLite/s" "memory/s" ratio group "commit ms" "fsync µs" runtime writer idle steal
declare -A ratios
for round in $(seq 1 "$durable_rounds"); do
  rows=()
  for i in "${!sql[@]}"; do rows+=("$(durable_round "${sql[$i]}")"); done
  m="$(duration="$durable_seconds" pinned_rps "$mem/bench/append" -s "$here/append.lua")"
  disk="$(disk_fsync_us)"
  for i in "${!sql[@]}"; do
    read -r s group commit runtime writer idle stolen <<<"${rows[$i]}"
    r="$(ratio2 "$s" "$m")"; ratios[$i]="${ratios[$i]:-} $r"
    printf '%-6s %-12s %10s %10s %7s %7s %11s %10s %9s %9s %9s %6s%%\n' "$round" "${labels[$i]}" "$s" "$m" "$r" "$group" "$commit" "$disk" "$runtime" "$writer" "$idle" "$stolen"
  done
done
for i in "${!sql[@]}"; do
  printf '%-52s %6s  (rounds %s; target >= 0.50)\n' "ratio SQLite / memory single appends, ${labels[$i]}" \
    "$(median <<<"${ratios[$i]}" | two_places)" "$(range <<<"${ratios[$i]}")"
done
