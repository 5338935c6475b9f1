# shellcheck shell=bash
# Helpers shared by deploy/redis-cluster.sh and deploy/redis-sentinel.sh,
# which source this file. Nodes live in $DIR/<port>/ (redis.conf,
# redis.pid, redis.log) on $HOST; the caller sets HOST, DIR, WAIT_S,
# REDIS_CLI and defines die().

# 0 when HOST:port can be bound now, as redis-server binds (SO_REUSEADDR:
# connections in TIME_WAIT do not count, a listener does).
port_free() {
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$HOST" "$1" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
  else
    # No python3: a refused connection is the best we can tell.
    if (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; then return 1; fi
  fi
}

# 0 when ports $1 .. $1+$2-1 are free, and with $3 = bus their cluster bus
# ports (+10000) too.
ports_free() {
  local b=$1 n=$2 bus=${3:-} i
  for ((i = 0; i < n; i++)); do
    port_free $((b + i)) || return 1
    if [ "$bus" = bus ]; then port_free $((b + i + 10000)) || return 1; fi
  done
}

cli() { local p=$1; shift; "$REDIS_CLI" -h "$HOST" -p "$p" --no-auth-warning "$@"; }

# The pid of the redis-server (or sentinel) of port $1, if it is running.
node_pid() {
  local f=$DIR/$1/redis.pid pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-" || return 1
  echo "$pid"
}

node_up() { node_pid "$1" >/dev/null && [ "$(cli "$1" PING 2>/dev/null)" = PONG ]; }

wait_up() {
  local p=$1 i
  for ((i = 0; i < WAIT_S * 10; i++)); do
    node_up "$p" && return 0
    sleep 0.1
  done
  die "$HOST:$p did not answer PING within ${WAIT_S}s (see $DIR/$p/redis.log)"
}
