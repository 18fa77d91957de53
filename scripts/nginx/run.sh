#!/usr/bin/env bash
# `eddy serve` behind a real cache: starts nginx (the Debian package,
# installed when missing) with proxy_cache in front of `eddy serve` and
# checks what issue 15 promises a CDN:
#   - 200 concurrent clients reading the same historical chunk cause exactly
#     one upstream read (eddy's own eddy_reads_total counts it);
#   - a read at the tail is never served stale (and neither is HEAD);
#   - compressed and plain copies are cached apart (Vary: Accept-Encoding);
#   - a read from `-1` is answered with its data and never stored (it
#     names whichever stream the path holds now), and names the immutable
#     URL of the same bytes in Content-Location;
#   - a stream deleted and created again, and a memory store restarted,
#     never get the old stream's cached chunks: `-1` (uncached) answers
#     with the new stream's data and names its own offsets, and the old
#     offsets are refused;
#   - with --redirect-first-reads, `-1` redirects (uncached) to the
#     stream's own offset, so 200 clients reading from `-1` through the
#     cache cause one upstream read.
# Prints what it checked; exits non-zero on the first failure.
#
#   scripts/nginx/run.sh
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1 \
      || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
  else
    echo "missing: nginx (apt-get install nginx)" >&2
    exit 1
  fi
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

# EDDY_BIN names a binary already built; otherwise the release build.
eddy="${EDDY_BIN:-}"
if [ -z "$eddy" ]; then
  (cd "$root" && cargo build --quiet --release -p eddy --features postgres)
  eddy="$CARGO_TARGET_DIR/release/eddy"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

work="$(mktemp -d)"
chmod 755 "$work"
eddy_port="$(free_port)"
cache_port="$(free_port)"
direct="http://127.0.0.1:$eddy_port"
cached="http://127.0.0.1:$cache_port"

# Reads carry at most 4 KiB, so a stream of 16 KiB has historical chunks.
"$eddy" serve --storage memory --listen "127.0.0.1:$eddy_port" --max-read-bytes 4096 \
  --long-poll-timeout 500ms >"$work/eddy.log" 2>&1 &
eddy_pid=$!

mkdir -p "$work/cache" "$work/tmp"
chmod 777 "$work/cache" "$work/tmp"
cat >"$work/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 2048; }
http {
  log_format cache '\$request_uri \$status \$upstream_cache_status';
  access_log $work/access.log cache;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi;
  uwsgi_temp_path $work/tmp/uwsgi;
  scgi_temp_path $work/tmp/scgi;
  proxy_cache_path $work/cache levels=1:2 keys_zone=eddy:10m max_size=256m inactive=60m use_temp_path=off;
  server {
    listen 127.0.0.1:$cache_port;
    location / {
      proxy_pass $direct;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache eddy;
      # One request per key goes upstream; the others wait for its answer.
      proxy_cache_lock on;
      proxy_cache_lock_timeout 60s;
      proxy_cache_revalidate on;
      proxy_read_timeout 1h;
      add_header X-Cache \$upstream_cache_status always;
    }
  }
}
CONF
"$nginx_bin" -c "$work/nginx.conf" -p "$work" -g 'daemon off;' >"$work/nginx.out" 2>&1 &
nginx_pid=$!
cleanup() {
  kill "$nginx_pid" "$eddy_pid" 2>/dev/null || true
  wait "$nginx_pid" "$eddy_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  curl -fsS "$direct/healthz" >/dev/null 2>&1 && curl -fsS "$cached/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$cached/healthz" >/dev/null || { cat "$work/nginx.out" "$work/error.log" >&2; exit 1; }

fail() { echo "FAILED: $*" >&2; exit 1; }
reads() { curl -fsS "$direct/metrics" | awk '$1 == "eddy_reads_total" { print $2 }'; }

# A JSON stream of 16 messages of 1 KiB: four historical chunks.
curl -fsS -X PUT -H 'content-type: application/json' "$direct/feed" >/dev/null
msg="$(python3 -c 'print("[" + ",".join("{\"n\":%d,\"pad\":\"%s\"}" % (i, "x" * 1000) for i in range(16)) + "]")')"
curl -fsS -X POST -H 'content-type: application/json' --data-binary "$msg" "$direct/feed" >/dev/null

# The URL of the first chunk of the stream at /feed now, at its own
# offset: what a read from `-1` names in Content-Location.
first_chunk() {
  local location
  location="$(curl -fsS -D - -o /dev/null "$cached/feed?offset=-1" | tr -d '\r' \
    | awk -F': ' 'tolower($1) == "content-location" { print $2 }')"
  [ -n "$location" ] || fail "a read from -1 names no Content-Location"
  echo "$cached/feed$location"
}

# 0. A read from -1 is answered with its data and never stored.
before="$(reads)"
for _ in 1 2; do
  headers="$(curl -fsS -D - -o "$work/first" "$cached/feed?offset=-1" | tr -d '\r')"
  grep -qi '^cache-control: no-store' <<<"$headers" || fail "a read from -1 is cacheable: $headers"
  grep -q '"n":0' "$work/first" || fail "a read from -1 did not answer the first messages"
done
[ $(($(reads) - before)) = 2 ] || fail "nginx answered a read from -1 from its cache"
echo "nginx: a read from -1 is answered with its data, never from the cache"

# 1. 200 concurrent clients, one historical chunk, one upstream read.
old_chunk="$(first_chunk)"
case "$old_chunk" in */feed\?offset=*_0000000000000000) ;; *) fail "-1 does not name the stream's own offset: $old_chunk" ;; esac
before="$(reads)"
seq 1 200 | xargs -P 200 -I{} curl -fsS -o "$work/out.{}" "$old_chunk"
after="$(reads)"
upstream=$((after - before))
distinct="$(md5sum "$work"/out.* | awk '{print $1}' | sort -u | wc -l)"
[ "$distinct" = 1 ] || fail "the 200 clients got $distinct different bodies"
[ "$upstream" = 1 ] || fail "200 clients caused $upstream upstream reads, not 1"
cmp -s "$work/out.1" "$work/first" || fail "the immutable URL names other bytes than -1 answered"
hits="$(grep -c "^/feed?offset=${old_chunk##*offset=} 200 HIT" "$work/access.log" || true)"
echo "nginx: 200 concurrent reads of one historical chunk -> $upstream upstream read ($hits cache hits)"

# 2. A compressed copy is cached apart from the plain one.
gz="$(curl -fsS -H 'accept-encoding: gzip' -D - -o "$work/gz" "$old_chunk" | tr -d '\r')"
grep -qi '^content-encoding: gzip' <<<"$gz" || fail "no gzip copy through nginx"
gunzip -c <"$work/gz" | cmp -s - "$work/out.1" || fail "the gzip copy decodes to other bytes"
curl -fsS -o /dev/null "$old_chunk" # plain again: still a hit
echo "nginx: gzip and plain copies of the chunk are cached apart, same bytes after decoding"

# 3. The tail is never stale: read it, append, read the same URL again.
tail_offset="$(curl -fsS -I "$direct/feed" | tr -d '\r' | awk -F': ' 'tolower($1) == "stream-next-offset" { print $2 }')"
first="$(curl -fsS -D "$work/h1" "$cached/feed?offset=$tail_offset")"
[ "$first" = "[]" ] || fail "the tail read returned $first"
grep -qi '^cache-control: no-store' "$work/h1" || fail "the tail read is cacheable"
curl -fsS -X POST -H 'content-type: application/json' --data-binary '[{"n":"late"}]' "$direct/feed" >/dev/null
second="$(curl -fsS -D "$work/h2" "$cached/feed?offset=$tail_offset")"
[ "$second" = '[{"n":"late"}]' ] || fail "the tail read after an append was stale: $second"
grep -qi '^x-cache: HIT' "$work/h2" && fail "the tail was served from the cache"
head_next="$(curl -fsS -I "$cached/feed" | tr -d '\r' | awk -F': ' 'tolower($1) == "stream-next-offset" { print $2 }')"
[ "$head_next" != "$tail_offset" ] || fail "HEAD through nginx was stale"
echo "nginx: a tail read after an append returns the new data; HEAD is fresh"

# 4. Delete /feed and create it again with other messages: its cached
# chunks are never served for the new stream, and the old offsets are
# refused upstream (never served with the new stream's data).
fill_feed() {
  curl -fsS -X PUT -H 'content-type: application/json' "$direct/feed" >/dev/null
  local body
  body="$(python3 -c 'import sys; print("[" + ",".join("{\"n\":%d,\"%s\":\"%s\"}" % (i, sys.argv[1], "y" * 1000) for i in range(16)) + "]")' "$1")"
  curl -fsS -X POST -H 'content-type: application/json' --data-binary "$body" "$direct/feed" >/dev/null
}
new_feed_is_served() {
  local what="$1" chunk
  chunk="$(first_chunk)"
  [ "$chunk" != "$old_chunk" ] || fail "$what: the new stream's first chunk has the old chunk's URL"
  curl -fsS -o "$work/new" "$cached/feed?offset=-1"
  grep -q "\"$2\"" "$work/new" || fail "$what: -1 through nginx served other bytes than the new stream's"
  cmp -s "$work/new" "$work/out.1" && fail "$what: -1 through nginx served the old stream's cached chunk"
  status="$(curl -sS -o /dev/null -w '%{http_code}' "$direct/feed?offset=${old_chunk##*offset=}")"
  [ "$status" = 410 ] || fail "$what: the old stream's offset read upstream answered $status, not 410"
}
curl -fsS -X DELETE "$direct/feed" >/dev/null
fill_feed again
new_feed_is_served "delete and create again" again
echo "nginx: a stream deleted and created again gets its own chunk URLs; the old offsets answer 410"

# 5. Restart the memory store and create /feed again: the new process's
# stream has other offsets than the cached ones of the old process's.
kill "$eddy_pid"; wait "$eddy_pid" 2>/dev/null || true
"$eddy" serve --storage memory --listen "127.0.0.1:$eddy_port" --max-read-bytes 4096 \
  --long-poll-timeout 500ms >>"$work/eddy.log" 2>&1 &
eddy_pid=$!
for _ in $(seq 1 100); do curl -fsS "$direct/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
fill_feed restarted
new_feed_is_served "a memory store restarted" restarted
echo "nginx: a restarted memory store's stream gets its own chunk URLs"

# 6. With --redirect-first-reads, `-1` is a redirect (never stored) to the
# stream's own offset, so 200 clients reading from `-1` through the cache
# (following the redirect) cause one upstream read.
kill "$eddy_pid"; wait "$eddy_pid" 2>/dev/null || true
"$eddy" serve --storage memory --listen "127.0.0.1:$eddy_port" --max-read-bytes 4096 \
  --long-poll-timeout 500ms --redirect-first-reads >>"$work/eddy.log" 2>&1 &
eddy_pid=$!
for _ in $(seq 1 100); do curl -fsS "$direct/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
fill_feed redirected
status="$(curl -sS -o /dev/null -w '%{http_code}' "$cached/feed?offset=-1")"
[ "$status" = 307 ] || fail "with --redirect-first-reads, -1 answered $status, not 307"
before="$(reads)"
seq 1 200 | xargs -P 200 -I{} curl -fsSL -o "$work/redirected.{}" "$cached/feed?offset=-1"
upstream=$(($(reads) - before))
[ "$upstream" = 1 ] || fail "with --redirect-first-reads, 200 clients at -1 caused $upstream upstream reads, not 1"
grep -q '"redirected"' "$work/redirected.1" || fail "the redirected read served other bytes"
echo "nginx: with --redirect-first-reads, 200 concurrent reads from -1 -> $upstream upstream read"
