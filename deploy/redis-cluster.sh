#!/usr/bin/env bash
# A local Redis Cluster for trying sluice out and for tests: 3 masters and
# 3 replicas (`redis-server --cluster-enabled yes` x6, then
# `redis-cli --cluster create ... --cluster-replicas 1`), on 127.0.0.1 only.
#
#   deploy/redis-cluster.sh start  [--dir DIR] [--port BASE]
#   deploy/redis-cluster.sh status [--dir DIR]
#   deploy/redis-cluster.sh seeds  [--dir DIR]     # host:port,host:port,... (for scripts)
#   deploy/redis-cluster.sh stop   [--dir DIR]
#
# DIR holds each node's config, log, pid file and nodes.conf (default
# $SLUICE_CLUSTER_DIR, else ${TMPDIR:-/tmp}/sluice-redis-cluster). Ports:
# BASE..BASE+5 and their cluster bus ports +10000, all checked free by
# binding them first; without --port the first free block from 30001 up (step
# 10) is used.
#
# start is idempotent: on a running cluster it only prints it; it restarts
# nodes that died (kill a master's pid to try a failover, then `start` brings
# the old master back as a replica). stop shuts every node down, removes the
# files it made, and removes DIR if start created it. A start that fails
# stops what it started. Exit status: 0 ok, 1 error, 2 usage, 3 (status) not
# running.
#
# Nodes use cluster-node-timeout 3000 ms, no persistence (save "", no AOF),
# and cluster-require-full-coverage no (a down master stops only its own
# slots: the other deployments keep governing). Data is for trying out.
set -euo pipefail

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
HOST=127.0.0.1
NODES=6
DEFAULT_BASE=30001
NODE_TIMEOUT_MS=3000
WAIT_S=${SLUICE_CLUSTER_WAIT_S:-30}

die() { echo "redis-cluster: $*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
DIR=${SLUICE_CLUSTER_DIR:-${TMPDIR:-/tmp}/sluice-redis-cluster}
BASE=
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || usage; DIR=$2; shift 2 ;;
    --dir=*) DIR=${1#--dir=}; shift ;;
    --port) [ $# -ge 2 ] || usage; BASE=$2; shift 2 ;;
    --port=*) BASE=${1#--port=}; shift ;;
    -h|--help) usage ;;
    *) echo "redis-cluster: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$BASE" ]; then
  if ! [[ "$BASE" =~ ^[0-9]+$ ]] || [ "$BASE" -lt 1024 ] || [ "$BASE" -gt $((65535 - 10000 - NODES + 1)) ]; then
    die "--port must be 1024..$((65535 - 10000 - NODES + 1)) (the bus ports are +10000), got '$BASE'"
  fi
fi
STATE=$DIR/cluster.env

# ---- helpers ---------------------------------------------------------------------------

# shellcheck source=deploy/redis-local.sh
. "$(dirname "$0")/redis-local.sh"

block_free() { ports_free "$1" "$NODES" bus; }

write_conf() {
  local p=$1
  mkdir -p "$DIR/$p"
  cat >"$DIR/$p/redis.conf" <<EOF
# written by deploy/redis-cluster.sh
port $p
bind $HOST
protected-mode yes
daemonize yes
pidfile $DIR/$p/redis.pid
logfile $DIR/$p/redis.log
dir $DIR/$p
save ""
appendonly no
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout $NODE_TIMEOUT_MS
cluster-require-full-coverage no
cluster-replica-validity-factor 0
EOF
}

launch() {
  local p=$1
  rm -f "$DIR/$p/redis.pid"
  "$REDIS_SERVER" "$DIR/$p/redis.conf" >/dev/null || die "redis-server on port $p did not start (see $DIR/$p/redis.log)"
}

# 0 when every node answers and says cluster_state:ok with 3 masters
# holding all slots and 3 replicas.
cluster_ok() {
  local p info nodes masters slaves
  for p in $PORTS; do
    info=$(cli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r') || return 1
    grep -q '^cluster_state:ok$' <<<"$info" || return 1
    grep -q '^cluster_slots_assigned:16384$' <<<"$info" || return 1
    grep -q "^cluster_known_nodes:$NODES\$" <<<"$info" || return 1
  done
  nodes=$(cli "${PORTS%% *}" CLUSTER NODES 2>/dev/null) || return 1
  masters=$(awk '$3 ~ /master/ && $3 !~ /fail/ {n++} END {print n+0}' <<<"$nodes")
  slaves=$(awk '$3 ~ /slave/ && $3 !~ /fail/ && $8 == "connected" {n++} END {print n+0}' <<<"$nodes")
  [ "$masters" -eq $((NODES / 2)) ] && [ "$slaves" -eq $((NODES / 2)) ]
}

wait_ok() {
  local i
  for ((i = 0; i < WAIT_S * 5; i++)); do
    cluster_ok && return 0
    sleep 0.2
  done
  return 1
}

seeds() {
  local p out=
  for p in $PORTS; do out+="${out:+,}$HOST:$p"; done
  echo "$out"
}

print_cluster() {
  local p pid role
  echo "redis-cluster: $NODES nodes in $DIR"
  for p in $PORTS; do
    pid=$(node_pid "$p" || true)
    if [ -n "$pid" ]; then
      role=$(cli "$p" ROLE 2>/dev/null | head -1 || true)
      printf '  %s:%s  pid %-7s %s\n' "$HOST" "$p" "$pid" "${role:-not answering}"
    else
      printf '  %s:%s  down\n' "$HOST" "$p"
    fi
  done
  echo "seeds: $(seeds)"
  echo "try:   $REDIS_CLI -c -p ${PORTS%% *} CLUSTER INFO"
  echo "sluiced configuration:"
  echo "  redis:"
  echo "    cluster: [$(seeds | sed 's/,/, /g')]"
}

load_state() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
  [ -n "${PORTS:-}" ]
}

# Shuts down every node in $PORTS; removes what we wrote.
stop_all() {
  local p pid i pids=()
  # All at once; NOW: a master does not wait for its replicas (Redis 7).
  for p in $PORTS; do
    pid=$(node_pid "$p" || true)
    [ -n "$pid" ] || continue
    pids+=("$pid")
    cli "$p" SHUTDOWN NOSAVE NOW >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  done
  # SHUTDOWN may be refused (an ACL on the node): SIGTERM after 1 s, SIGKILL after 5 s.
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      if [ "$i" = 10 ]; then kill -TERM "$pid" 2>/dev/null || true; fi
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  for p in $PORTS; do
    rm -f "$DIR/$p/redis.conf" "$DIR/$p/redis.pid" "$DIR/$p/redis.log" "$DIR/$p/nodes.conf" \
          "$DIR/$p/dump.rdb" "$DIR/$p/nodes.conf.lock"
    rmdir "$DIR/$p" 2>/dev/null || true
  done
  rm -f "$STATE" "$DIR/create.log"
  if [ "${OWN_DIR:-0}" = 1 ]; then rmdir "$DIR" 2>/dev/null || true; fi
}

# ---- commands --------------------------------------------------------------------------

do_start() {
  command -v "$REDIS_SERVER" >/dev/null || die "$REDIS_SERVER not found (deploy/install-deps.sh installs it)"
  command -v "$REDIS_CLI" >/dev/null || die "$REDIS_CLI not found"
  local p
  if load_state; then
    # Already set up: restart dead nodes, then report.
    for p in $PORTS; do
      if ! node_pid "$p" >/dev/null; then
        port_free "$p" || die "node $p is down but port $p is taken by something else"
        echo "redis-cluster: restarting node $HOST:$p"
        launch "$p"
      fi
    done
    for p in $PORTS; do wait_up "$p"; done
    if [ "${CREATED:-0}" = 1 ]; then
      wait_ok || { print_cluster; die "cluster not ok after ${WAIT_S}s (see $REDIS_CLI -p ${PORTS%% *} CLUSTER NODES)"; }
      print_cluster
      return 0
    fi
    # Nodes up but never joined (an earlier start died in between): start over.
    stop_all
  fi

  if [ -z "$BASE" ]; then
    local b
    for ((b = DEFAULT_BASE; b < DEFAULT_BASE + 500; b += 10)); do
      if block_free "$b"; then BASE=$b; break; fi
    done
    [ -n "$BASE" ] || die "no free block of $NODES ports (and bus ports +10000) from $DEFAULT_BASE up"
  else
    block_free "$BASE" || die "ports $BASE..$((BASE + NODES - 1)) or their bus ports (+10000) are in use"
  fi
  PORTS=
  for ((p = BASE; p < BASE + NODES; p++)); do PORTS+="${PORTS:+ }$p"; done
  OWN_DIR=0
  if [ ! -d "$DIR" ]; then mkdir -p "$DIR"; OWN_DIR=1; fi
  printf 'PORTS="%s"\nOWN_DIR=%s\nCREATED=0\n' "$PORTS" "$OWN_DIR" >"$STATE"

  # From here a failure stops the nodes we started.
  # shellcheck disable=SC2154
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "redis-cluster: start failed; stopping the nodes" >&2; stop_all; fi' EXIT
  trap 'exit 130' INT TERM
  for p in $PORTS; do write_conf "$p"; launch "$p"; done
  for p in $PORTS; do wait_up "$p"; done
  local addrs=()
  for p in $PORTS; do addrs+=("$HOST:$p"); done
  if ! "$REDIS_CLI" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1; then
    cat "$DIR/create.log" >&2
    die "redis-cli --cluster create failed"
  fi
  wait_ok || die "cluster not ok after ${WAIT_S}s"
  printf 'PORTS="%s"\nOWN_DIR=%s\nCREATED=1\n' "$PORTS" "$OWN_DIR" >"$STATE"
  trap - EXIT INT TERM
  print_cluster
}

do_status() {
  if ! load_state; then echo "redis-cluster: not running (no $STATE)"; exit 3; fi
  print_cluster
  local p n=0
  for p in $PORTS; do node_up "$p" && n=$((n + 1)); done
  if [ "$n" -eq 0 ]; then echo "redis-cluster: no node is running"; exit 3; fi
  local info
  info=$(cli "$(for p in $PORTS; do node_up "$p" && { echo "$p"; break; }; done)" CLUSTER INFO | tr -d '\r')
  grep -E '^cluster_(state|slots_ok|known_nodes|size):' <<<"$info" | tr '\n' ' '
  echo
  if cluster_ok; then echo "redis-cluster: ok"; else echo "redis-cluster: NOT ok ($n/$NODES nodes up)"; exit 1; fi
}

do_seeds() {
  load_state || { echo "redis-cluster: not running (no $STATE)" >&2; exit 3; }
  seeds
}

do_stop() {
  if ! load_state; then echo "redis-cluster: nothing to stop in $DIR"; return 0; fi
  stop_all
  echo "redis-cluster: stopped ($PORTS)"
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  seeds) do_seeds ;;
  -h|--help|help) usage ;;
  *) echo "redis-cluster: unknown command '$cmd'" >&2; usage ;;
esac
