# Helpers for scripts that start `eddy serve` (sourced, not run).

# A TCP port free on 127.0.0.1 right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits up to 10 s for the server at URL (process PID, writing LOG) to
# answer /healthz. If it does not: prints "LABEL: the server did not start"
# and its log, stops it, and fails.
#   wait_healthy URL PID LOG LABEL
wait_healthy() {
  local url="$1" pid="$2" log="$3" label="$4"
  for _ in $(seq 1 100); do
    curl -fsS "$url/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  curl -fsS "$url/healthz" >/dev/null 2>&1 && return 0
  echo "$label: the server did not start; its log:"
  cat "$log"
  kill "$pid" 2>/dev/null || true
  return 1
}
