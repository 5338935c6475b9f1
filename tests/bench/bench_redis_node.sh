#!/usr/bin/env bash
# bench_redis_node: what one Redis node sustains of sluice's real scripts,
# measured with redis-benchmark over TCP loopback (the figures quoted in
# docs/operations.md, "Sizing"). Starts its own redis-server on a free
# 127.0.0.1 port in a temp dir, loads lua/common.lua + lua/<script>.lua as
# the agent does, configures a plentiful deployment (every item granted at
# once: the figure is the cost of the decision), and prints the median of
# ROUNDS runs per configuration. A benchmark: prints, asserts nothing.
#   tests/bench/bench_redis_node.sh [ROUNDS (3)] [REQUESTS per run (40000)]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
N=${2:-40000}
command -v redis-benchmark >/dev/null || { echo "bench_redis_node: redis-benchmark not found" >&2; exit 1; }

T=$(mktemp -d)
PID=
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill "$PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
  --logfile "$T/redis.log" --daemonize yes --pidfile "$T/redis.pid"
for _ in $(seq 100); do [ -s "$T/redis.pid" ] && redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.05; done
PID=$(cat "$T/redis.pid")
R=(redis-cli -p "$PORT")

sha() { cat lua/common.lua "lua/$1.lua" | "${R[@]}" -x SCRIPT LOAD; }
SHA_CONFIGURE=$(sha configure)
SHA_RESERVE=$(sha reserve)
SHA_STATUS=$(sha status)
SHA_HEARTBEAT=$(sha heartbeat)
KEYS=()
for k in limits state grants leases refq:requests refq:tokens daily retry agents refq:input refq:output; do KEYS+=("sluice:{bench}:$k"); done
# A fresh, plentiful deployment (before every run, so no run pays for the
# expired grants of the one before).
reset() {
  "${R[@]}" DEL "${KEYS[@]}" >/dev/null
  "${R[@]}" EVALSHA "$SHA_CONFIGURE" 11 "${KEYS[@]}" rpm 100000000000 tpm 100000000000000 \
    burst_requests 100000000 burst_tokens 1000000000 lease_ms 60000 >/dev/null
}
# The agents' user, with the rules of deploy/acl.conf (after the password hash).
set -f
# shellcheck disable=SC2046
"${R[@]}" ACL SETUSER sluice reset on '>bench' $(grep '^user sluice on ' deploy/acl.conf | cut -d' ' -f5-) >/dev/null
set +f

# reserve's ARGV for n items: n, then (tokens 100, max_wait 60000) n times.
items() { local n=$1 i; ITEMS=("$n"); for ((i = 0; i < n; i++)); do ITEMS+=(100 60000); done; }

# run LABEL ITEMS_PER_CALL redis-benchmark-args... -- command...
run() {
  local label=$1 per=$2; shift 2
  local args=() v=() r
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  for ((k = 0; k < ROUNDS; k++)); do
    reset
    r=$(redis-benchmark -p "$PORT" "${args[@]}" --csv "$@" 2>/dev/null | awk -F'","' 'NR==2 {print $2+0}')
    v+=("$r")
  done
  local med
  med=$(printf '%s\n' "${v[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  if [ "$per" = 0 ]; then
    printf '| %s | %.0f | - |\n' "$label" "$med"
  else
    printf '| %s | %.0f | %.0f |\n' "$label" "$med" "$(awk -v m="$med" -v p="$per" 'BEGIN {print m * p}')"
  fi
}

items 1; I1=("${ITEMS[@]}"); items 10; I10=("${ITEMS[@]}"); items 100; I100=("${ITEMS[@]}")

echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), TCP 127.0.0.1, $(nproc) cores, median of $ROUNDS runs of $N calls"
echo
echo "| configuration | calls/s | decisions/s |"
echo "|---|---:|---:|"
run "PING, 50 clients (baseline)" 0 -n "$((N * 2))" -c 50 -- PING
run "status (read-only), 50 clients" 0 -n "$N" -c 50 -- EVALSHA "$SHA_STATUS" 11 "${KEYS[@]}"
run "heartbeat, 50 clients, 1000 agent ids" 0 -n "$N" -c 50 -r 1000 -- EVALSHA "$SHA_HEARTBEAT" 11 "${KEYS[@]}" agent-__rand_int__ 3000
run "reserve 1 item, 1 client" 1 -n "$((N / 4))" -c 1 -- EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I1[@]}"
run "reserve 1 item, 50 clients" 1 -n "$N" -c 50 -- EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I1[@]}"
run "reserve 1 item, 50 clients, ACL user sluice" 1 -n "$N" -c 50 --user sluice -a bench -- \
  EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I1[@]}"
run "reserve 1 item, 50 clients, pipeline 16" 1 -n "$N" -c 50 -P 16 -- EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I1[@]}"
run "reserve 10 items, 50 clients" 10 -n "$((N / 4))" -c 50 -- EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I10[@]}"
run "reserve 100 items, 50 clients" 100 -n "$((N / 20))" -c 50 -- EVALSHA "$SHA_RESERVE" 11 "${KEYS[@]}" "${I100[@]}"
echo
echo "after the last reserve run: $("${R[@]}" HLEN 'sluice:{bench}:grants') grants outstanding (60 s leases)," \
  "used_memory $("${R[@]}" INFO memory | tr -d '\r' | awk -F: '$1=="used_memory_human" {print $2}')"
