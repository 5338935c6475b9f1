#!/usr/bin/env bash
# Runs lib/examples/governed_call (docs/library.md) as an application
# would: an embedded governor on a private redis-server, six prompts at
# once against a `sluice mock` provider, a deployment with a burst of 2 at
# 600 RPM, so the calls are paced 100 ms apart. Passes when every prompt
# is answered "ok", the mock's own ledger accepted exactly six requests
# with no 429, and the pacing shows (the last call waited for its slot).
#   tests/example_governed_call.sh EXAMPLE_BINARY SLUICE_BINARY
set -euo pipefail
example=$1
sluice=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/example_governed_call-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# Waits (bounded, 10 s) for a condition instead of sleeping a fixed time.
wait_for() {
  for _ in $(seq 1 200); do
    if eval "$1"; then return 0; fi
    sleep 0.05
  done
  echo "example_governed_call: timed out waiting for: $1" >&2
  return 1
}

redis-server --port 0 --unixsocket "$dir/redis.sock" --save '' --appendonly no --dir "$dir" \
  >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_for "redis-cli -s '$dir/redis.sock' ping 2>/dev/null | grep -q PONG"

"$sluice" mock --port 0 --port-file "$dir/port" --rpm 600 --burst 10 --service-ms 20-40 >"$dir/mock.out" 2>&1 &
pids+=($!)
wait_for "[ -s '$dir/port' ]"
port=$(cat "$dir/port")

out=$(LLM_URL="http://127.0.0.1:$port/openai/deployments/ex/chat/completions?api-version=2024-06-01" \
      SLUICE_DEPLOYMENT=ex SLUICE_REDIS_URL="unix://$dir/redis.sock" \
      SLUICE_DEPLOYMENTS='{ex: {rpm: 600, burst: {requests: 2}}}' \
      "$example" "one" "two" "three" "four" "five" 'six, with "quotes"')
echo "$out"
[ "$(grep -c ' ok: ' <<<"$out")" -eq 6 ] || { echo "example_governed_call: not every prompt was answered" >&2; exit 1; }
# Six calls, a burst of 2 at 10/s: the last slot is 400 ms after the first.
max_wait=$(sed -n 's/.*waited \([0-9]*\) ms.*/\1/p' <<<"$out" | sort -n | tail -1)
[ "$max_wait" -ge 300 ] || { echo "example_governed_call: no pacing (longest wait $max_wait ms)" >&2; exit 1; }

stats=$(curl -s "http://127.0.0.1:$port/stats")
python3 - "$stats" <<'EOF'
import json, sys
t = json.loads(sys.argv[1])["totals"]
assert t["accepted"] == 6 and t["requests"] == 6 and t["status_429"] == 0, t
print("example_governed_call: the provider accepted 6 of 6, no 429")
EOF
