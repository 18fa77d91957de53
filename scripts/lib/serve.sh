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

# The `eddy serve` storage arguments of BACKEND (memory, sqlite, postgres,
# dynamodb), in the array `storage`: `postgres` in a schema of its own on
# DATABASE_URL (named in `schema`, to drop with drop_schema), `dynamodb` on
# a fresh table made by `$eddy dynamo create-table` at
# EDDY_DYNAMODB_ENDPOINT. Fails, saying why as LABEL, when the table cannot
# be made.
#   storage_for BACKEND DATA_DIR LOG LABEL
storage_for() {
  local backend="$1" data="$2" log="$3" label="$4"
  storage=("--storage" "$backend" "--data" "$data")
  schema=""
  if [ "$backend" = postgres ]; then
    : "${DATABASE_URL:?postgres needs DATABASE_URL}"
    schema="eddy_script_$$_$RANDOM"
    storage=("--storage" "$DATABASE_URL" "--pg-schema" "$schema")
  fi
  if [ "$backend" = dynamodb ]; then
    : "${EDDY_DYNAMODB_ENDPOINT:?dynamodb needs EDDY_DYNAMODB_ENDPOINT}"
    export AWS_ENDPOINT_URL="$EDDY_DYNAMODB_ENDPOINT" AWS_REGION=us-east-1 \
      AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    local table="eddy-script-$$-$RANDOM"
    "$eddy" dynamo create-table --table "$table" >"$log" 2>&1 || {
      echo "$label: could not create the table; its log:"
      cat "$log"
      return 1
    }
    storage=("--storage" "dynamodb://$table")
  fi
}

# Drops the PostgreSQL schema storage_for made, if any.
drop_schema() {
  if [ -n "${schema:-}" ] && command -v psql >/dev/null; then
    psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  fi
}

# Runs `run_backend BACKEND` for each backend given, side by side, each
# into its own output file, printed in the order given; fails if any did.
#   run_side_by_side memory sqlite ...
run_side_by_side() {
  local out_dir status=0 i
  local -a pids=() backends=("$@")
  out_dir="$(mktemp -d)"
  for backend in "${backends[@]}"; do
    run_backend "$backend" >"$out_dir/$backend" 2>&1 &
    pids+=($!)
  done
  for i in "${!backends[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "$out_dir/${backends[$i]}"
  done
  rm -rf "$out_dir"
  return "$status"
}
