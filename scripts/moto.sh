#!/usr/bin/env bash
# A local DynamoDB-compatible server for the eddy-dynamo tests: moto's server
# from PyPI, in a virtual environment this script creates, bound to 127.0.0.1
# on a free port, serving one request at a time (scripts/moto_serial.py:
# moto's transactions are not safe under concurrent requests).
#
#   scripts/moto.sh start   # install if missing, start, wait until it answers;
#                           # prints `export EDDY_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT`
#   scripts/moto.sh url     # prints the endpoint of the running server
#   scripts/moto.sh reset   # drops every table (POST /moto-api/reset)
#   scripts/moto.sh stop    # stops the server this script started
#
# Typical use:  eval "$(scripts/moto.sh start)" && cargo test -p eddy-dynamo --features aws
#
# Environment: MOTO_VENV (default <repo>/.venv-moto), MOTO_STATE (default
# $MOTO_VENV/run: pid, port and log of the running server).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MOTO_VENV:-$root/.venv-moto}"
state="${MOTO_STATE:-$venv/run}"

log() { echo "moto.sh: $*" >&2; }

ready() {
    # With credentials in the request, as the SDK sends them: moto routes
    # a request by its signing scope.
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
        -H 'Content-Type: application/x-amz-json-1.0' \
        -d '{}' "http://127.0.0.1:$1/" 2>/dev/null | grep -q '^200$'
}

running_port() {
    [[ -f "$state/pid" && -f "$state/port" ]] || return 1
    local pid port
    pid="$(cat "$state/pid")"
    port="$(cat "$state/port")"
    kill -0 "$pid" 2>/dev/null || return 1
    ready "$port" || return 1
    echo "$port"
}

# The release the tests and scripts/moto_serial.py (which patches moto's
# internals) were checked against; a new release may route or serialise
# differently (5.2.6 answers a request without credentials as S3).
moto_version=5.2.5

installed_version() {
    "$venv/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null
}

install() {
    if [[ "$(installed_version)" != "$moto_version" ]]; then
        log "installing moto[server]==$moto_version into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "moto[server]==$moto_version" >&2
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
    local port
    if port="$(running_port)"; then
        log "already running on port $port"
        echo "export EDDY_DYNAMODB_ENDPOINT=http://127.0.0.1:$port"
        return
    fi
    install
    mkdir -p "$state"
    for _attempt in 1 2 3; do
        port="$(free_port)"
        # One request at a time: see moto_serial.py.
        nohup "$venv/bin/python" "$root/scripts/moto_serial.py" 127.0.0.1 "$port" >"$state/log" 2>&1 &
        echo $! >"$state/pid"
        echo "$port" >"$state/port"
        for _ in $(seq 1 150); do
            if ready "$port"; then
                log "moto is ready on 127.0.0.1:$port (pid $(cat "$state/pid"))"
                echo "export EDDY_DYNAMODB_ENDPOINT=http://127.0.0.1:$port"
                return
            fi
            kill -0 "$(cat "$state/pid")" 2>/dev/null || break
            sleep 0.2
        done
        log "moto did not answer on port $port; retrying (log: $state/log)"
        kill "$(cat "$state/pid")" 2>/dev/null || true
    done
    log "could not start moto; see $state/log"
    exit 1
}

stop() {
    if [[ -f "$state/pid" ]]; then
        local pid
        pid="$(cat "$state/pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            log "stopped moto (pid $pid)"
        fi
        rm -f "$state/pid" "$state/port"
    fi
}

url() {
    local port
    port="$(running_port)" || { log "moto is not running; run: scripts/moto.sh start"; exit 1; }
    echo "http://127.0.0.1:$port"
}

reset() {
    curl -s -X POST "$(url)/moto-api/reset" >/dev/null
}

case "${1:-}" in
start) start ;;
stop) stop ;;
url) url ;;
reset) reset ;;
*)
    echo "usage: $0 start|stop|url|reset" >&2
    exit 2
    ;;
esac
