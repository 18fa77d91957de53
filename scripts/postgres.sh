#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the PostgreSQL tests: Debian's server
# package (installed when missing), a cluster in a temporary directory owned
# by the `postgres` system user (PostgreSQL refuses to run as root), on a
# free loopback port, trusting loopback connections. Never for real data.
#
#   scripts/postgres.sh start   # install if missing, create, start, wait;
#                               # prints `export DATABASE_URL=postgres://…`
#   scripts/postgres.sh url     # prints the URL of the running cluster
#   scripts/postgres.sh stop    # stops the cluster and removes its directory
#
# Typical use:  eval "$(scripts/postgres.sh start)" && cargo test -p eddy-streams --features postgres
#
# Environment: EDDY_PG_STATE (default <repo>/target/pg-run: the cluster's
# directory path and port); EDDY_PG_OPTIONS, more `-c name=value` server
# options; EDDY_PG_WRAP, a command the server starts under (as root), such
# as `taskset -c 0` to pin it to a core (the benchmarks do).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${EDDY_PG_STATE:-$root/target/pg-run}"

log() { echo "postgres.sh: $*" >&2; }

bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install() {
    if [[ -z "$(bin_dir)" ]]; then
        if [[ "$(id -u)" != 0 ]]; then
            log "PostgreSQL is not installed: apt-get install postgresql, or set DATABASE_URL"
            exit 1
        fi
        log "installing PostgreSQL"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
}

# Runs a command as the cluster's owner: `postgres` when we are root.
as_owner() {
    if [[ "$(id -u)" = 0 ]]; then
        su postgres -s /bin/sh -c "$*"
    else
        sh -c "$*"
    fi
}

# As `as_owner`, under EDDY_PG_WRAP when set.
as_owner_wrapped() {
    if [[ -n "${EDDY_PG_WRAP:-}" ]]; then
        # shellcheck disable=SC2086 # the wrapper is a command line
        if [[ "$(id -u)" = 0 ]]; then $EDDY_PG_WRAP su postgres -s /bin/sh -c "$*"; else $EDDY_PG_WRAP sh -c "$*"; fi
    else
        as_owner "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

url_of() { echo "postgres://postgres@127.0.0.1:$1/postgres"; }

running_port() {
    [[ -f "$state/dir" && -f "$state/port" ]] || return 1
    local bin
    bin="$(bin_dir)"
    [[ -n "$bin" ]] || return 1
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$state/port")" || return 1
    cat "$state/port"
}

start() {
    local port dir bin
    if port="$(running_port)"; then
        log "already running on port $port"
        echo "export DATABASE_URL=$(url_of "$port")"
        return
    fi
    install
    bin="$(bin_dir)"
    dir="$(mktemp -d /tmp/eddy-pg.XXXXXX)"
    chmod 755 "$dir"
    [[ "$(id -u)" = 0 ]] && chown postgres "$dir"
    port="$(free_port)"
    as_owner "'$bin/initdb' -D '$dir/db' -A trust -U postgres >'$dir/initdb.log' 2>&1"
    as_owner_wrapped "'$bin/pg_ctl' -D '$dir/db' -w -t 60 -l '$dir/log' \
        -o \"-p $port -k '$dir' -c listen_addresses=127.0.0.1 -c max_connections=300 ${EDDY_PG_OPTIONS:-}\" start >/dev/null"
    mkdir -p "$state"
    echo "$dir" >"$state/dir"
    echo "$port" >"$state/port"
    log "PostgreSQL is ready on 127.0.0.1:$port (cluster in $dir)"
    echo "export DATABASE_URL=$(url_of "$port")"
}

stop() {
    [[ -f "$state/dir" ]] || return 0
    local dir bin
    dir="$(cat "$state/dir")"
    bin="$(bin_dir)"
    if [[ -n "$bin" && -d "$dir/db" ]]; then
        as_owner "'$bin/pg_ctl' -D '$dir/db' -m fast stop >/dev/null 2>&1" || true
        log "stopped PostgreSQL (cluster in $dir)"
    fi
    rm -rf "$dir"
    rm -f "$state/dir" "$state/port"
}

url() {
    local port
    port="$(running_port)" || { log "no cluster is running; run: scripts/postgres.sh start"; exit 1; }
    url_of "$port"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
url) url ;;
*)
    echo "usage: $0 start|stop|url" >&2
    exit 2
    ;;
esac
