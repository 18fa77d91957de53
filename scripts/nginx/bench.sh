#!/usr/bin/env bash
# Issue 15 benchmarks, ratios in one run: a ~9 MB JSON stream caught up
# with and without compression (bytes on the wire, reads/s of a 1 MiB
# chunk), and a historical chunk read from eddy directly vs through an nginx
# proxy_cache. Needs wrk and nginx. Prints the machine load beside figures.
#
#   scripts/nginx/bench.sh        (EDDY_BIN=path uses a binary already built)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
eddy="${EDDY_BIN:-}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres)
  eddy="${CARGO_TARGET_DIR:-$root/target}/release/eddy"
fi
command -v wrk >/dev/null || { echo "missing: wrk (apt-get install wrk)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
work="$(mktemp -d)"; chmod 755 "$work"
ep="$(free_port)"; cp="$(free_port)"
direct="http://127.0.0.1:$ep"; cached="http://127.0.0.1:$cp"
"$eddy" serve --storage memory --listen "127.0.0.1:$ep" >"$work/eddy.log" 2>&1 & epid=$!
mkdir -p "$work/cache" "$work/tmp"; chmod 777 "$work/cache" "$work/tmp"
cat >"$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/tmp/body; proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi; uwsgi_temp_path $work/tmp/uwsgi; scgi_temp_path $work/tmp/scgi;
  proxy_cache_path $work/cache levels=1:2 keys_zone=eddy:10m max_size=512m inactive=60m use_temp_path=off;
  server {
    listen 127.0.0.1:$cp;
    location / { proxy_pass $direct; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_cache eddy; proxy_cache_lock on; }
  }
}
CONF
/usr/sbin/nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' >"$work/nginx.out" 2>&1 & npid=$!
trap 'kill $npid $epid 2>/dev/null; wait $npid $epid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do curl -fsS "$direct/healthz" >/dev/null 2>&1 && curl -fsS "$cached/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS -X PUT -H 'content-type: application/json' "$direct/big" >/dev/null
# About 9 MB of JSON events: 10 appends of 5 000 events of ~180 bytes.
python3 - "$work/batch.json" <<'PY'
import json, sys, random
random.seed(1)
events=[{"id":i,"type":random.choice(["order.created","order.paid","order.shipped"]),"customer":"c-%05d"%random.randrange(20000),"amount":round(random.random()*500,2),"items":[{"sku":"sku-%04d"%random.randrange(9999),"qty":random.randrange(1,5)} for _ in range(2)],"note":"standard delivery"} for i in range(5000)]
open(sys.argv[1],"w").write(json.dumps(events))
PY
for _ in $(seq 1 10); do curl -fsS -X POST -H 'content-type: application/json' --data-binary @"$work/batch.json" "$direct/big" >/dev/null; done
catchup() { # $1: accept-encoding or empty; prints wire bytes and decoded bytes of a full catch-up
  local off=-1 wire=0 body=0 h
  while :; do
    h="$(curl -sS ${1:+-H "accept-encoding: $1"} -D - -o "$work/chunk" "$direct/big?offset=$off" | tr -d '\r')"
    wire=$((wire + $(stat -c %s "$work/chunk")))
    off="$(awk -F': ' 'tolower($1)=="stream-next-offset"{print $2}' <<<"$h")"
    grep -qi '^stream-up-to-date: true' <<<"$h" && break
  done
  echo "$wire"
}
echo "load: $(uptime)"
for enc in "" gzip br zstd; do
  echo "catch-up of the ~9 MB JSON stream, accept-encoding=${enc:-none}: $(catchup "$enc") bytes on the wire"
done
for enc in "" gzip br zstd; do
  r="$(wrk -t1 -c4 -d8s ${enc:+-H "accept-encoding: $enc"} "$direct/big?offset=-1" | awk '/Requests\/sec/{print $2} /Transfer\/sec/{print $2}' | paste -sd' ')"
  echo "catch-up reads of the first 1 MiB chunk, accept-encoding=${enc:-none}: reads/s, transfer/s = $r"
done
# A historical chunk, cached by nginx vs direct.
curl -fsS -o /dev/null "$cached/big?offset=-1"
for url in "$direct" "$cached"; do
  r="$(wrk -t1 -c16 -d8s -H 'accept-encoding: gzip' "$url/big?offset=-1" | awk '/Requests\/sec/{print $2}')"
  echo "historical chunk (1 MiB JSON, gzip) from $( [ "$url" = "$direct" ] && echo 'eddy directly' || echo 'nginx cache'): $r reads/s"
done
echo "load: $(uptime)"
