#!/usr/bin/env bash
# The freight example's notices served live: `eddy serve` on a DynamoDB
# table (moto), `curl` tailing `freight/notices` over SSE, and the freight
# demo (on its embedded table) delivering each scan's notice through
# eddy-bridge. Passes when curl saw every notice exactly once, each
# shipment's in scan order.
#
#   EDDY_BIN=target/debug/eddy FREIGHT_BIN=target/debug/examples/freight \
#     EDDY_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT scripts/bridge/notices.sh
set -euo pipefail
: "${EDDY_BIN:?the eddy binary (feature aws)}"
: "${FREIGHT_BIN:?the freight example of eddy-dynamo-cli}"
: "${EDDY_DYNAMODB_ENDPOINT:?a DynamoDB-compatible endpoint (scripts/moto.sh start)}"
export AWS_ENDPOINT_URL="$EDDY_DYNAMODB_ENDPOINT" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

streams="notices-$$-$RANDOM"
"$EDDY_BIN" dynamo create-table --table "$streams" >/dev/null
"$EDDY_BIN" serve --listen 127.0.0.1:0 --storage "dynamodb://$streams" >"$work/serve.out" 2>"$work/serve.err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on ' "$work/serve.out" && break; sleep 0.1; done
url="$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$work/serve.out")"
[ -n "$url" ] || { echo "eddy serve did not start:"; cat "$work/serve.err"; exit 1; }

curl -fsS -X PUT -H 'content-type: application/json' "$url/freight/notices" >/dev/null
curl -fsSN "$url/freight/notices?offset=-1&live=sse" >"$work/notices.sse" &
pids+=($!)

"$FREIGHT_BIN" demo --batch 1 --notices-to "$url" >/dev/null

# Every scan leaves a notice: sh-1 three, sh-2 one.
expected=4
for _ in $(seq 1 100); do
  [ "$(grep -o '"kind"' "$work/notices.sse" | wc -l)" -ge "$expected" ] && break
  sleep 0.1
done
python3 - "$work/notices.sse" <<'PY'
import json, sys
notices = []
for line in open(sys.argv[1]):
    if line.startswith("data:"):
        try:
            value = json.loads(line[5:])
        except ValueError:
            continue
        if isinstance(value, list):
            notices.extend(value)
by_row = {}
for notice in notices:
    by_row.setdefault(notice["shipmentId"], []).append(notice["kind"])
want = {"sh-1": ["at Hamburg", "at Rotterdam", "at Felixstowe"], "sh-2": ["at Antwerp"]}
if by_row != want:
    sys.exit(f"freight notices over SSE: got {by_row}, want {want}")
print(f"bridge: curl tailed {len(notices)} freight notices live over eddy serve on DynamoDB, each once, in scan order")
PY
