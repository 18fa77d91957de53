#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every crate's tests
# on every backend, the Durable Streams conformance suite against `eddy
# serve`, and the DynamoDB tests against a local moto server. It installs what
# is missing (CI runs as root on a fresh machine) and prints what ran.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"

log_dir="$(mktemp -d)"
summary=()

need() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
  if need apt-get && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing: $* (install them and run again)" >&2
    exit 1
  fi
}

step() {
  local name="$1"; shift
  echo "==> $name"
  local started=$SECONDS
  if "$@"; then
    summary+=("ok    $name ($((SECONDS - started)) s)")
  else
    summary+=("FAIL  $name ($((SECONDS - started)) s)")
    print_summary
    exit 1
  fi
}

print_summary() {
  echo
  echo "==> summary"
  printf '  %s\n' "${summary[@]}"
}

# What the tests need besides Rust, installed where missing and started:
# Node, Python's venv, headless Chromium and its WebDriver (the console's
# browser test), the local DynamoDB-compatible server (moto) and, unless
# DATABASE_URL names a database, a throwaway PostgreSQL cluster. This is
# downloads and disk more than CPU, so it runs in the background while the
# lint steps compile; the tests wait for it.
prepare_services() {
  need curl || apt_install curl
  need node || apt_install nodejs npm
  python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  [ -x /usr/bin/chromedriver ] || apt_install chromium chromium-driver
  scripts/moto.sh start >"$log_dir/services.env"
  [ -z "$own_postgres" ] || scripts/postgres.sh start >>"$log_dir/services.env"
}
own_postgres=""
[ -n "${DATABASE_URL:-}" ] || own_postgres=1
# On an early failure the background set-up is cut short rather than awaited.
stop_services() {
  kill "$services_pid" 2>/dev/null || true
  scripts/moto.sh stop >/dev/null 2>&1 || true
  [ -z "$own_postgres" ] || scripts/postgres.sh stop >/dev/null 2>&1 || true
}
trap stop_services EXIT
(set -e; prepare_services) >"$log_dir/services.log" 2>&1 &
services_pid=$!
services_ready() {
  if ! wait "$services_pid"; then
    cat "$log_dir/services.log" >&2
    return 1
  fi
  eval "$(cat "$log_dir/services.env")"
  echo "moto: $EDDY_DYNAMODB_ENDPOINT"
  echo "postgres: $DATABASE_URL"
}
export EDDY_REQUIRE_CHROMIUM=1 EDDY_REQUIRE_POSTGRES=1

# The AWS SDK and PostgreSQL backends are behind features; the test run
# enables them so the same suites run on the embedded stores, moto and
# PostgreSQL.
features="eddy/aws,eddy-dynamo/aws,eddy-dynamo/lambda,eddy-dynamo-cli/aws,eddy-streams-dynamodb/aws,eddy/postgres,eddy-projection/postgres"

# Each optional feature of the server and the binary builds (and lints) on
# its own, and with none.
each_feature() {
  local line crate optional feature
  for line in "eddy-server webhooks remote" "eddy webhooks aws postgres"; do
    read -r crate optional <<<"$line"
    for feature in "" $optional; do
      echo "  $crate --no-default-features ${feature:+--features $feature}"
      cargo clippy -q -p "$crate" --all-targets --no-default-features ${feature:+--features "$feature"} -- -D warnings || return 1
    done
  done
}

step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
step "cargo doc -D warnings" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet --features eddy/postgres
step "cargo clippy -D warnings (aws, lambda)" \
  cargo clippy --workspace --all-targets --features "$features" -- -D warnings
step "each feature alone" each_feature

# The tests, and the binaries the end-to-end steps below run (built with
# the same features, so nothing is compiled twice), build while the
# background set-up may still be going on.
step "build the tests and binaries" bash -c "cargo test --workspace --features '$features' --no-run --quiet \
  && cargo build --workspace --features '$features' --bin eddy --example freight --example state_interop --quiet"
export EDDY_BIN="$target_dir/debug/eddy"
step "services: moto, PostgreSQL, Chromium" services_ready

# Every crate's tests: memory, SQLite and moto backends, contract suites,
# crash tests, examples and doctests.
step "cargo test (workspace, with moto)" \
  bash -o pipefail -c "cargo test --workspace --features '$features' 2>&1 | tee '$log_dir/cargo-test.log'"
read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p+0, f+0 }' "$log_dir/cargo-test.log")
if [ "$passed" -eq 0 ]; then
  echo "cargo test ran no test" >&2
  exit 1
fi
moto_ran=$(grep -c '^test .*\(::dynamodb::\|moto::\).* ok$' "$log_dir/cargo-test.log" || true)
if [ "$moto_ran" -eq 0 ]; then
  echo "no DynamoDB (moto) test ran" >&2
  exit 1
fi
pg_ran=$(grep -c '^test .*postgres::.* ok$' "$log_dir/cargo-test.log" || true)
if [ "$pg_ran" -eq 0 ]; then
  echo "no PostgreSQL test ran" >&2
  exit 1
fi
browser_ran=$(grep -c '^test console::.* ok$' "$log_dir/cargo-test.log" || true)
if [ "$browser_ran" -eq 0 ]; then
  echo "no console (headless Chromium) test ran" >&2
  exit 1
fi
summary+=("      cargo test: $passed passed, $failed failed ($moto_ran of them on moto, $pg_ran on PostgreSQL, $browser_ran console tests in Chromium; screenshot in target/tmp/console.png)")

# The freight example on DynamoDB (moto): `demo` folds the scenario through
# process_batch with every scan's notice delivered, then `verify` checks the
# table through the AWS SDK alone (GetItem/Query: rows, checkpoints,
# tombstone, delivered notices, empty outbox) and fails on any difference.
# So that it cannot pass silently, the same check must then refuse a row
# damaged on purpose (sh-1 rebuilt from its scans only).
freight_on_moto() {
  local table="freight-$$-$RANDOM"
  local freight=("$target_dir/debug/examples/freight" --dynamodb-endpoint "$EDDY_DYNAMODB_ENDPOINT")
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
  "${freight[@]}" --table-name "$table" demo --batch 1 || return 1
  "${freight[@]}" --table-name "$table" verify --batch 1 || return 1
  "${freight[@]}" --table-name "$table" rebuild --projection shipments \
    --key '{"shipmentId":"sh-1"}' --instance 'scan=shipmentId=sh-1' || return 1
  if "${freight[@]}" --table-name "$table" verify --batch 1 2>"$log_dir/freight-refused.log"; then
    echo "freight verify passed a table whose row sh-1 it must refuse" >&2
    return 1
  fi
  grep -q '^differs: sh-1: parcels' "$log_dir/freight-refused.log" || {
    echo "freight verify failed for another reason than the damaged row:" >&2
    cat "$log_dir/freight-refused.log" >&2
    return 1
  }
  echo "freight on moto: verified, and a damaged row refused"
}
step "freight example on moto, checked through the AWS SDK" freight_on_moto

# The bridge: the freight example's notices, delivered through eddy-bridge
# into `eddy serve` on a DynamoDB table (moto), tailed live by curl over SSE.
step "freight notices live over eddy serve on DynamoDB (eddy-bridge)" bash -o pipefail -c \
  "FREIGHT_BIN='$target_dir/debug/examples/freight' scripts/bridge/notices.sh | tee '$log_dir/bridge.log'"
while read -r line; do summary+=("      $line"); done < <(grep '^bridge:' "$log_dir/bridge.log")

# The public Durable Streams conformance suite, on every storage backend side
# by side (DynamoDB on a fresh table of moto).
step "conformance suite" bash -o pipefail -c "scripts/conformance/run.sh memory sqlite postgres dynamodb | tee '$log_dir/conformance.log'"
while read -r line; do summary+=("      $line"); done < <(grep '^conformance' "$log_dir/conformance.log")

# The public Python client (durable-streams on PyPI), on every backend: it
# follows no redirect, so it reads what any plain HTTP client reads.
step "Python client (durable-streams)" bash -o pipefail -c "EDDY_BIN='$EDDY_BIN' scripts/python/run.sh memory sqlite postgres dynamodb | tee '$log_dir/python.log'"
while read -r line; do summary+=("      $line"); done < <(grep '^python client (' "$log_dir/python.log")

# State streams between eddy and the public @durable-streams/state package,
# both ways, on every backend (DynamoDB on a fresh table of moto): what the
# package writes (upsert, a null value, controls with offsets) eddy reads to
# the same rows, what eddy writes the package's JSON schema and readers
# accept, and a stream the server's sweep compacted reads to the same rows.
step "state streams with @durable-streams/state, both ways" bash -o pipefail -c \
  "EDDY_BIN='$EDDY_BIN' STATE_INTEROP_BIN='$target_dir/debug/examples/state_interop' scripts/state/run.sh memory sqlite postgres dynamodb | tee '$log_dir/state.log'"
if ! grep -q '^state (' "$log_dir/state.log"; then
  echo "the state stream check ran nothing" >&2
  exit 1
fi
while read -r line; do summary+=("      $line"); done < <(grep '^state (' "$log_dir/state.log")

# nginx with proxy_cache in front of `eddy serve`: one upstream read for 200
# concurrent readers of a historical chunk, never a stale tail.
step "nginx cache in front of eddy serve" bash -o pipefail -c "scripts/nginx/run.sh | tee '$log_dir/nginx.log'"
while read -r line; do summary+=("      $line"); done < <(grep '^nginx:' "$log_dir/nginx.log")

print_summary
total_passed=$passed
total_failed=$failed
for log in conformance python; do
  for n in $(grep -o '[0-9]* passed' "$log_dir/$log.log" | awk '{print $1}'); do total_passed=$((total_passed + n)); done
  for n in $(grep -o '[0-9]* failed' "$log_dir/$log.log" | awk '{print $1}'); do total_failed=$((total_failed + n)); done
done
echo
echo "all: $total_passed passed, $total_failed failed"
