#!/usr/bin/env bash
# A local Redis Sentinel setup for trying sluice out and for tests: one
# master, one replica and three sentinels (quorum 2), on 127.0.0.1 only.
#
#   deploy/redis-sentinel.sh start    [--dir DIR] [--port BASE] [--name NAME]
#   deploy/redis-sentinel.sh status   [--dir DIR]
#   deploy/redis-sentinel.sh failover [--dir DIR] [--kill]
#   deploy/redis-sentinel.sh stop     [--dir DIR]
#
# Ports: BASE and BASE+1 are the two Redis servers (the master at first),
# BASE+2..BASE+4 the sentinels; all checked free by binding them first;
# without --port the first free block from 36001 up (step 10). The master
# name defaults to "sluice". DIR (default $SLUICE_SENTINEL_DIR, else
# ${TMPDIR:-/tmp}/sluice-redis-sentinel) holds configs, logs and pid files;
# the sentinels rewrite their configs there as usual.
#
# failover asks a sentinel for a failover (SENTINEL FAILOVER) and waits
# until all three sentinels name the new master; with --kill it kills the
# master's process instead (a crash: detected after down-after-milliseconds
# 2000) and leaves it down; `start` restarts it and the sentinels make it a
# replica. start is idempotent (restarts dead processes); a start that fails
# stops what it started. Exit status: 0 ok, 1 error, 2 usage, 3 (status)
# not running. No persistence: data is for trying out.
set -euo pipefail

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
HOST=127.0.0.1
DEFAULT_BASE=36001
DOWN_AFTER_MS=2000
FAILOVER_TIMEOUT_MS=10000
WAIT_S=${SLUICE_SENTINEL_WAIT_S:-30}

die() { echo "redis-sentinel: $*" >&2; exit 1; }
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
DIR=${SLUICE_SENTINEL_DIR:-${TMPDIR:-/tmp}/sluice-redis-sentinel}
BASE=
NAME_ARG=
KILL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || usage; DIR=$2; shift 2 ;;
    --dir=*) DIR=${1#--dir=}; shift ;;
    --port) [ $# -ge 2 ] || usage; BASE=$2; shift 2 ;;
    --port=*) BASE=${1#--port=}; shift ;;
    --name) [ $# -ge 2 ] || usage; NAME_ARG=$2; shift 2 ;;
    --name=*) NAME_ARG=${1#--name=}; shift ;;
    --kill) KILL=1; shift ;;
    -h|--help) usage ;;
    *) echo "redis-sentinel: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$BASE" ]; then
  if ! [[ "$BASE" =~ ^[0-9]+$ ]] || [ "$BASE" -lt 1024 ] || [ "$BASE" -gt 65531 ]; then
    die "--port must be 1024..65531, got '$BASE'"
  fi
fi
if [ -n "$NAME_ARG" ] && ! [[ "$NAME_ARG" =~ ^[A-Za-z0-9._-]{1,64}$ ]]; then
  die "--name must be 1-64 characters of A-Z a-z 0-9 . _ -"
fi
STATE=$DIR/sentinel.env

# ---- helpers ---------------------------------------------------------------------------

# shellcheck source=deploy/redis-local.sh
. "$(dirname "$0")/redis-local.sh"

block_free() { ports_free "$1" 5; }

write_redis_conf() {
  local p=$1 replicaof=$2
  mkdir -p "$DIR/$p"
  cat >"$DIR/$p/redis.conf" <<EOF
# written by deploy/redis-sentinel.sh
port $p
bind $HOST
protected-mode yes
daemonize yes
pidfile $DIR/$p/redis.pid
logfile $DIR/$p/redis.log
dir $DIR/$p
save ""
appendonly no
EOF
  if [ -n "$replicaof" ]; then echo "replicaof $HOST $replicaof" >>"$DIR/$p/redis.conf"; fi
}

write_sentinel_conf() {
  local p=$1 master=$2
  mkdir -p "$DIR/$p"
  cat >"$DIR/$p/redis.conf" <<EOF
# written by deploy/redis-sentinel.sh (and rewritten by the sentinel)
port $p
bind $HOST
protected-mode yes
daemonize yes
pidfile $DIR/$p/redis.pid
logfile $DIR/$p/redis.log
dir $DIR/$p
sentinel resolve-hostnames no
sentinel monitor $NAME $HOST $master 2
sentinel down-after-milliseconds $NAME $DOWN_AFTER_MS
sentinel failover-timeout $NAME $FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $NAME 1
EOF
}

# launch PORT [extra redis-server arguments]
launch() {
  local p=$1 extra=("${@:2}")
  rm -f "$DIR/$p/redis.pid"
  case " $SENTINELS " in *" $p "*) extra+=(--sentinel) ;; esac
  "$REDIS_SERVER" "$DIR/$p/redis.conf" "${extra[@]}" >/dev/null ||
    die "redis-server on port $p did not start (see $DIR/$p/redis.log)"
}

# The master's port according to sentinel $1 (empty if unknown).
sentinel_master_port() {
  cli "$1" SENTINEL GET-MASTER-ADDR-BY-NAME "$NAME" 2>/dev/null | sed -n 2p | tr -d '\r'
}

# A field of SENTINEL MASTER NAME on sentinel $1.
sentinel_field() {
  cli "$1" SENTINEL MASTER "$NAME" 2>/dev/null | tr -d '\r' | awk -v f="$2" 'NR % 2 == 1 && $0 == f {getline; print; exit}'
}

role_of() { cli "$1" ROLE 2>/dev/null | head -1 | tr -d '\r'; }

# 0 when all three sentinels agree on a master that says it is one, see
# each other and the replica, and the replica's link is up.
healthy() {
  local s m="" ms flags p
  for s in $SENTINELS; do
    ms=$(sentinel_master_port "$s")
    [ -n "$ms" ] || return 1
    if [ -z "$m" ]; then m=$ms; elif [ "$m" != "$ms" ]; then return 1; fi
    flags=$(sentinel_field "$s" flags)
    [ "$flags" = master ] || return 1
    [ "$(sentinel_field "$s" num-other-sentinels)" = 2 ] || return 1
    [ "$(sentinel_field "$s" num-slaves)" -ge 1 ] 2>/dev/null || return 1
  done
  [ "$(role_of "$m")" = master ] || return 1
  for p in $SERVERS; do
    [ "$p" = "$m" ] && continue
    node_up "$p" || continue
    [ "$(role_of "$p")" = slave ] || return 1
    cli "$p" INFO replication 2>/dev/null | tr -d '\r' | grep -q "^master_port:$m\$" || return 1
    cli "$p" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up$' || return 1
  done
  CURRENT_MASTER=$m
}

wait_healthy() {
  local i
  for ((i = 0; i < WAIT_S * 5; i++)); do
    healthy && return 0
    sleep 0.2
  done
  return 1
}

first_live_sentinel() {
  local s
  for s in $SENTINELS; do node_up "$s" && { echo "$s"; return 0; }; done
  return 1
}

sentinel_list() {
  local s out=
  for s in $SENTINELS; do out+="${out:+, }$HOST:$s"; done
  echo "$out"
}

print_setup() {
  local p pid role s m
  echo "redis-sentinel: master name '$NAME' in $DIR"
  for p in $SERVERS $SENTINELS; do
    pid=$(node_pid "$p" || true)
    case " $SENTINELS " in *" $p "*) role=sentinel ;; *) role=$(role_of "$p" || true) ;; esac
    if [ -n "$pid" ]; then
      printf '  %s:%s  pid %-7s %s\n' "$HOST" "$p" "$pid" "${role:-not answering}"
    else
      printf '  %s:%s  down\n' "$HOST" "$p"
    fi
  done
  s=$(first_live_sentinel || true)
  m=${s:+$(sentinel_master_port "$s")}
  echo "master: $HOST:${m:-unknown}"
  echo "sentinels: $(sentinel_list | sed 's/, /,/g')"
  echo "try:   $REDIS_CLI -p ${SENTINELS%% *} SENTINEL GET-MASTER-ADDR-BY-NAME $NAME"
  echo "sluiced configuration:"
  echo "  redis:"
  echo "    sentinel: { master: $NAME, nodes: [$(sentinel_list)] }"
}

load_state() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
  [ -n "${SERVERS:-}" ] && [ -n "${SENTINELS:-}" ]
}

save_state() {
  printf 'SERVERS="%s"\nSENTINELS="%s"\nNAME="%s"\nOWN_DIR=%s\nREADY=%s\n' \
    "$SERVERS" "$SENTINELS" "$NAME" "$OWN_DIR" "$1" >"$STATE"
}

stop_all() {
  local p pid i group pids
  # Sentinels first, so they do not fail over while the servers go down;
  # each group at once; NOW: a master does not wait for its replica (Redis 7).
  for group in "$SENTINELS" "$SERVERS"; do
    pids=()
    for p in $group; do
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
  done
  for p in $SERVERS $SENTINELS; do
    rm -f "$DIR/$p/redis.conf" "$DIR/$p/redis.pid" "$DIR/$p/redis.log" "$DIR/$p/dump.rdb"
    rmdir "$DIR/$p" 2>/dev/null || true
  done
  rm -f "$STATE"
  if [ "${OWN_DIR:-0}" = 1 ]; then rmdir "$DIR" 2>/dev/null || true; fi
}

# ---- commands --------------------------------------------------------------------------

do_start() {
  command -v "$REDIS_SERVER" >/dev/null || die "$REDIS_SERVER not found (deploy/install-deps.sh installs it)"
  command -v "$REDIS_CLI" >/dev/null || die "$REDIS_CLI not found"
  local p
  if load_state; then
    [ -z "$NAME_ARG" ] || [ "$NAME_ARG" = "$NAME" ] || die "already set up with master name '$NAME' in $DIR"
    # A server that comes back while the sentinels name another master
    # starts as that master's replica (as an operator would), not as a
    # second, empty master that the sentinels would demote only later.
    local s m=""
    s=$(first_live_sentinel || true)
    if [ -n "$s" ]; then m=$(sentinel_master_port "$s"); fi
    for p in $SERVERS $SENTINELS; do
      if ! node_pid "$p" >/dev/null; then
        port_free "$p" || die "$p is down but port $p is taken by something else"
        if [ -n "$m" ] && [ "$m" != "$p" ] && case " $SERVERS " in *" $p "*) true ;; *) false ;; esac; then
          echo "redis-sentinel: restarting $HOST:$p as a replica of $HOST:$m"
          sed -i '/^replicaof /d' "$DIR/$p/redis.conf"
          echo "replicaof $HOST $m" >>"$DIR/$p/redis.conf"
        else
          echo "redis-sentinel: restarting $HOST:$p"
        fi
        launch "$p"
      fi
    done
    for p in $SERVERS $SENTINELS; do wait_up "$p"; done
    if [ "${READY:-0}" = 1 ]; then
      wait_healthy || { print_setup; die "not healthy after ${WAIT_S}s"; }
      print_setup
      return 0
    fi
    stop_all
  fi

  NAME=${NAME_ARG:-sluice}
  if [ -z "$BASE" ]; then
    local b
    for ((b = DEFAULT_BASE; b < DEFAULT_BASE + 500; b += 10)); do
      if block_free "$b"; then BASE=$b; break; fi
    done
    [ -n "$BASE" ] || die "no free block of 5 ports from $DEFAULT_BASE up"
  else
    block_free "$BASE" || die "ports $BASE..$((BASE + 4)) are not all free"
  fi
  SERVERS="$BASE $((BASE + 1))"
  SENTINELS="$((BASE + 2)) $((BASE + 3)) $((BASE + 4))"
  OWN_DIR=0
  if [ ! -d "$DIR" ]; then mkdir -p "$DIR"; OWN_DIR=1; fi
  save_state 0

  # shellcheck disable=SC2154
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "redis-sentinel: start failed; stopping what it started" >&2; stop_all; fi' EXIT
  trap 'exit 130' INT TERM
  write_redis_conf "$BASE" ""
  write_redis_conf "$((BASE + 1))" "$BASE"
  for p in $SENTINELS; do write_sentinel_conf "$p" "$BASE"; done
  for p in $SERVERS; do launch "$p"; done
  for p in $SERVERS; do wait_up "$p"; done
  for p in $SENTINELS; do launch "$p"; done
  for p in $SENTINELS; do wait_up "$p"; done
  wait_healthy || die "sentinels did not agree on a healthy master within ${WAIT_S}s (see $DIR/*/redis.log)"
  save_state 1
  trap - EXIT INT TERM
  print_setup
}

do_status() {
  if ! load_state; then echo "redis-sentinel: not running (no $STATE)"; exit 3; fi
  print_setup
  local s
  s=$(first_live_sentinel) || { echo "redis-sentinel: no sentinel is running"; exit 3; }
  echo "quorum: $(cli "$s" SENTINEL CKQUORUM "$NAME" 2>&1 | tr -d '\r')"
  if healthy; then echo "redis-sentinel: ok"; else echo "redis-sentinel: NOT ok (a process is down, the sentinels disagree, or replication is not up)"; exit 1; fi
}

do_failover() {
  load_state || die "not running (no $STATE)"
  wait_healthy || die "not healthy before the failover; see: $0 status --dir $DIR"
  local old=$CURRENT_MASTER s i m="" t0 t1
  s=$(first_live_sentinel) || die "no sentinel is running"
  t0=$(date +%s%N)
  if [ "$KILL" = 1 ]; then
    local pid
    pid=$(node_pid "$old") || die "cannot find the master's process ($old)"
    echo "redis-sentinel: killing the master $HOST:$old (pid $pid)"
    kill -KILL "$pid"
  else
    echo "redis-sentinel: SENTINEL FAILOVER $NAME (master $HOST:$old)"
    cli "$s" SENTINEL FAILOVER "$NAME" | grep -q OK || die "SENTINEL FAILOVER refused"
  fi
  for ((i = 0; i < WAIT_S * 10; i++)); do
    m=
    local all=1 ms
    for s in $SENTINELS; do
      ms=$(sentinel_master_port "$s")
      if [ -z "$ms" ] || [ "$ms" = "$old" ]; then all=0; break; fi
      if [ -z "$m" ]; then m=$ms; elif [ "$m" != "$ms" ]; then all=0; break; fi
    done
    if [ "$all" = 1 ] && [ "$(role_of "$m")" = master ]; then break; fi
    m=
    sleep 0.1
  done
  [ -n "$m" ] || die "no new master within ${WAIT_S}s"
  t1=$(date +%s%N)
  echo "redis-sentinel: new master $HOST:$m after $(((t1 - t0) / 1000000)) ms (old $HOST:$old)"
  if [ "$KILL" = 1 ]; then
    echo "redis-sentinel: $HOST:$old is down; '$0 start --dir $DIR' brings it back as a replica"
  else
    wait_healthy || die "not healthy after the failover"
    echo "redis-sentinel: $HOST:$old is now a replica of $HOST:$m"
  fi
}

do_stop() {
  if ! load_state; then echo "redis-sentinel: nothing to stop in $DIR"; return 0; fi
  stop_all
  echo "redis-sentinel: stopped ($SERVERS $SENTINELS)"
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  failover) do_failover ;;
  -h|--help|help) usage ;;
  *) echo "redis-sentinel: unknown command '$cmd'" >&2; usage ;;
esac
