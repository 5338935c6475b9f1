#!/usr/bin/env bash
# budget_fleet.sh: budgets in money once in real time (issue 25): a
# private redis-server, 3 sluiced agents on one configuration, and
# tests/bench/budget_fleet.py's 64 callers against a daily budget their
# demand exceeds tenfold. Judged by the provider's bill (see the .py).
#
#   tests/bench/budget_fleet.sh [BUILD_DIR] [--budget USD] [--seed N]
#
# BUILD_DIR defaults to $SLUICE_BUILD_DIR, else build. Exit 0 on PASS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${SLUICE_BUILD_DIR:-build}
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
budget=5
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
sluiced=$build/agent/sluiced
[[ -x $sluiced ]] || { echo "budget_fleet: no $sluiced (build first)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "budget_fleet: redis-server not found" >&2; exit 2; }
dir=$(mktemp -d /tmp/sluice-budget-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$dir/redis.sock" --save '' --appendonly no --dir "$dir" \
  --daemonize no >"$dir/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S $dir/redis.sock ]] && break; sleep 0.05; done
socks=()
for i in 0 1 2; do
  cat >"$dir/a$i.yaml" <<YAML
redis:
  url: unix://$dir/redis.sock
agent:
  id: agent-$i
  socket: $dir/a$i.sock
deployments:
  gpt:
    rpm: 600000
    tpm: 1000000000
    lease_s: 5
    max_wait_ms: 2000
    price: { input: 2.5, output: 10, currency: USD }
budgets:
  team:
    tenant: t1
    currency: USD
    daily: $budget
YAML
  "$sluiced" --config "$dir/a$i.yaml" >"$dir/a$i.log" 2>&1 &
  pids+=($!)
  socks+=("$dir/a$i.sock")
done
for s in "${socks[@]}"; do
  for _ in $(seq 200); do [[ -S $s ]] && redis-cli -s "$s" PING >/dev/null 2>&1 && break; sleep 0.05; done
done
IFS=,
python3 "$here/budget_fleet.py" --sockets "${socks[*]}" --redis-cli "redis-cli -s $dir/redis.sock" \
  --budget "$budget" "${extra[@]}"
