#!/usr/bin/env bash
# What a reserve decision costs Redis in instructions: the reserve script
# of two versions of the Lua (common.lua + configure.lua + reserve.lua in
# each directory) on bench_reserve's workloads, each counted in a
# redis-server of its own under valgrind --tool=callgrind. Only EVALSHA
# is counted (--toggle-collect=evalShaCommand: the scripts are loaded
# with SCRIPT LOAD and the deployments configured with EVAL, so neither
# counts); the clock is frozen (test_clock_offset_ms "=<ms>", written
# beside the configured limits) so that the same calls do the same work
# in every run. Unlike bench_reserve, whose figures are wall time on a
# shared machine, the same code gives the same count to within a few
# hundredths of a percent.
#   tests/bench/reserve_instructions.sh [OLD_DIR [NEW_DIR]] [-- workloads [batches]]
# OLD_DIR defaults to the scripts of 62942b1 (before issue 24), NEW_DIR
# to lua/ of this tree; workloads plain,split,lt,group (default all) and
# batches 1,10,100 (default all), comma-separated. Per workload and
# batch: a fresh ledger, then calls of that batch worth 400 items (at
# least 40 calls), all granted (checked). Prints, per workload and batch,
# the instructions per item of each version and new / old, and per
# workload the ratio of the summed counts over its batches. With
# AGENT=<id> every call names an agent ("@<id>/1000" before its ARGV, as
# sluiced's calls do): the records then carry it (field 13). With
# WAIT_NEW=<field> the new version's items carry that max wait field (the
# agent's "<max>:<waited>", e.g. 60000:1200) where the old's carry 60000.
# Needs valgrind, redis-server and the redis module of Debian's python3
# (deploy/install-deps.sh). About 2 minutes on the project's machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OLD=""; NEW="$ROOT/lua"; WORK=plain,split,lt,group; BATCH=1,10,100
pos=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then shift; WORK=${1:-$WORK}; BATCH=${2:-$BATCH}; break; fi
  pos+=("$1"); shift
done
[ ${#pos[@]} -ge 1 ] && OLD=${pos[0]}
[ ${#pos[@]} -ge 2 ] && NEW=${pos[1]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$OLD" ]; then
  OLD=$tmp/old
  mkdir -p "$OLD"
  for f in common configure reserve; do git -C "$ROOT" show "62942b1:lua/$f.lua" >"$OLD/$f.lua"; done
fi
for d in "$OLD" "$NEW"; do
  for f in common configure reserve; do [ -f "$d/$f.lua" ] || { echo "reserve_instructions: $d/$f.lua missing" >&2; exit 2; }; done
done
if ! command -v valgrind >/dev/null || ! command -v redis-server >/dev/null; then
  echo "reserve_instructions: needs valgrind and redis-server (deploy/install-deps.sh)" >&2; exit 2
fi

# Without address randomisation where setarch allows (Lua tables keyed by
# tables hash their addresses).
NOASLR=""
setarch "$(uname -m)" -R true 2>/dev/null && NOASLR="setarch $(uname -m) -R"

# One count: the Lua of $1, workload $2, batch $3, items' max wait field
# $4; prints the total Ir.
count() {
  local dir=$1 w=$2 b=$3 wait=$4 sock=$tmp/redis.sock out=$tmp/cg.out
  rm -f "$sock" "$out"
  $NOASLR valgrind --tool=callgrind --toggle-collect=evalShaCommand --callgrind-out-file="$out" \
    redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --daemonize no \
    --logfile "$tmp/redis.log" >"$tmp/vg.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { echo "reserve_instructions: redis-server did not start" >&2; cat "$tmp/vg.log" >&2; exit 1; }
  /usr/bin/python3 - "$sock" "$dir" "$w" "$b" "${AGENT:-}" "$wait" <<'EOF'
import sys, redis
sock, d, w, b, agent, wait = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
r = redis.Redis(unix_socket_path=sock)
for _ in range(100):
    try:
        r.ping(); break
    except redis.exceptions.BusyLoadingError:
        import time; time.sleep(0.1)
src = lambda f: open(d + '/common.lua').read() + open(d + '/' + f).read()
configure, reserve = src('configure.lua'), src('reserve.lua')
sha = r.script_load(reserve)
SUF = ['limits', 'state', 'grants', 'leases', 'refq:requests', 'refq:tokens', 'daily', 'retry', 'agents',
       'refq:input', 'refq:output']
keys = lambda dep: ['sluice:{%s}:%s' % (dep, s) for s in SUF]
# bench_reserve's deployments (tests/bench/bench_reserve.c)
PLENTY = ['rpm', '100000000000', 'burst_requests', '100000000', 'lease_ms', '600000']
cfg = {
    'plain': PLENTY + ['tpm', '100000000000000', 'burst_tokens', '1000000000'],
    'split': PLENTY + ['itpm', '100000000000000', 'burst_input', '1000000000', 'otpm', '100000000000000',
                       'burst_output', '1000000000'],
    'lt': PLENTY + ['tpm', '100000000000000', 'burst_tokens', '1000000000', 'lane.interactive', '0,-1,0.2',
                    'lane.batch', '1,-1,0', 'tenant.a', '3,0,0,0', 'tenant.b', '1,0,0,0'],
}
deps = ['m1', 'm2', 'm3'] if w == 'group' else [w]
for dep in deps:
    res = r.eval(configure, 11, *keys(dep), *cfg['plain' if w == 'group' else w])
    r.hset(keys(dep)[0], 'test_clock_offset_ms', '=1790000000000')
if w == 'group':
    orders = ['1,2,3', '2,3,1', '3,1,2']
    argv = ['group', '3', '1000', 'priority', str(b)]
    for i in range(b): argv += ['100', wait, '', '', orders[i % 3]]
    ks, at = sum((keys(dep) for dep in deps), []), 1
else:
    argv = [str(b)]
    for i in range(b):
        argv += ['60+40' if w == 'split' else '100', wait]
        if w == 'lt': argv += ['batch', 'a' if i % 2 else 'b']
    ks, at = keys(w), 5
if agent: argv = ['@%s/1000' % agent] + argv
calls = max(40, 400 // b)
for _ in range(calls):
    rep = r.evalsha(sha, len(ks), *ks, *argv)
    assert len(rep) == at + b and all(v[0] == 1 for v in rep[at:]), rep
r.shutdown(nosave=True)
EOF
  wait "$pid" || true
  [ -n "${KEEP:-}" ] && cp "$out" "$KEEP/cg.$(basename "$dir").$w.$b"
  awk '/^(summary|totals):/ {print $2; exit}' "$out"
}

printf '| workload | batch | old Ir/item | new Ir/item | new / old |\n|---|---:|---:|---:|---:|\n'
declare -A sum_old sum_new
for w in ${WORK//,/ }; do
  sum_old[$w]=0; sum_new[$w]=0
  for b in ${BATCH//,/ }; do
    n=$(( 400 / b )); [ $n -lt 40 ] && n=40
    o=$(count "$OLD" "$w" "$b" 60000); v=$(count "$NEW" "$w" "$b" "${WAIT_NEW:-60000}")
    sum_old[$w]=$(( ${sum_old[$w]} + o )); sum_new[$w]=$(( ${sum_new[$w]} + v ))
    awk -v w="$w" -v b="$b" -v o="$o" -v v="$v" -v n="$((n * b))" \
      'BEGIN {printf "| %s | %d | %.0f | %.0f | %.4f |\n", w, b, o / n, v / n, v / o}'
  done
done
printf '\nper workload, summed over its batches (new / old):'
for w in ${WORK//,/ }; do
  awk -v w="$w" -v o="${sum_old[$w]}" -v v="${sum_new[$w]}" 'BEGIN {printf " %s %.4f;", w, v / o}'
done
printf '\n'
