#!/usr/bin/env bash
# deploy_check: checks what deploy/ ships, with real tools, in about 30 s.
#   (a) systemd: `systemd-analyze verify` of deploy/sluiced.service and
#       deploy/sluiced.sysusers applied to a scratch root (skipped without
#       systemd-analyze / systemd-sysusers);
#   (b) deploy/redis-cluster.sh: start in a temp dir, cluster_state:ok with 3
#       masters and 3 replicas, sluice's scripts run through `redis-cli -c` for
#       deployments on different masters, start again is a no-op, stop leaves
#       no process and no file;
#   (c) deploy/redis-sentinel.sh: start, a crash failover (--kill) promotes
#       the replica, stop;
#   (d) deploy/acl.conf loaded as the aclfile of a private redis-server 7:
#       the sluice user runs every script (EVALSHA) on sluice keys and nothing
#       else (FLUSHALL, KEYS, other keys, SCRIPT FLUSH, CONFIG... refused),
#       every command lua/*.lua calls is granted, the read-only user reads
#       and cannot write, the default user is off, and the file as shipped
#       (placeholders) does not load;
#   (e) deploy/k8s/*.yaml parse (python3 yaml) and agree with each other
#       (socket path, volumes, Secret, ConfigMap), `kubectl kustomize`
#       renders them (offline; skipped without kubectl), and the embedded
#       sluiced.yaml passes `sluiced --check-config` when a built sluiced
#       is found ($SLUICED, else build*/agent/sluiced);
#   (f) shellcheck of the scripts, when installed.
# Uses 127.0.0.1 and free ports only (the scripts bind-check them); stops
# everything it started, also on failure or Ctrl-C. Prints one line per
# check and "deploy_check: N passed, N failed, N skipped"; exits 1 if any
# check failed.
#   tests/deploy_check.sh            all
#   tests/deploy_check.sh acl k8s    only some of: systemd cluster sentinel acl k8s shellcheck
# bash -c '...' snippets take their values as "$1"...: single quotes on purpose.
# shellcheck disable=SC2016
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

PASS=0 FAIL=0 SKIP=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
skip() { SKIP=$((SKIP + 1)); echo "skip - $*"; }
# check "description" command...: ok if the command succeeds.
check() { local d=$1; shift; if "$@"; then ok "$d"; else fail "$d"; fi; }
# cond; v $? "description": ok if the condition held.
v() { if [ "$1" = 0 ]; then ok "$2"; else fail "$2"; fi; }

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-deploy-check.XXXXXX")
ACL_PID=
cleanup() {
  [ -f "$T/cluster/cluster.env" ] && deploy/redis-cluster.sh stop --dir "$T/cluster" >/dev/null 2>&1
  [ -f "$T/sentinel/sentinel.env" ] && deploy/redis-sentinel.sh stop --dir "$T/sentinel" >/dev/null 2>&1
  if [ -n "$ACL_PID" ] && kill -0 "$ACL_PID" 2>/dev/null; then
    kill "$ACL_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$ACL_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$ACL_PID" 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'echo "deploy_check: interrupted"; exit 130' INT TERM

want() { [ $# -eq 0 ] && return 0; local w; for w in "${SELECTED[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
SELECTED=("$@")
sel() { [ ${#SELECTED[@]} -eq 0 ] || want "$1"; }

# The eleven keys of deployment $1 (lua/common.lua).
dep_keys() { local k; for k in limits state grants leases refq:requests refq:tokens daily retry agents refq:input refq:output; do printf '%s\n' "sluice:{$1}:$k"; done; }
script_text() { cat lua/common.lua "lua/$1.lua"; }

# ---- (a) systemd -------------------------------------------------------------------------
check_systemd() {
  if ! command -v systemd-analyze >/dev/null; then
    skip "systemd-analyze verify deploy/sluiced.service (no systemd-analyze)"
  else
    # verify wants ExecStart= to exist: point it at a built sluiced or a stub.
    local bin
    bin=$(find_sluiced) || { bin=$T/bin/sluiced; mkdir -p "$T/bin"; printf '#!/bin/sh\nexit 0\n' >"$bin"; chmod +x "$bin"; }
    mkdir -p "$T/unit"
    sed "s#/usr/local/bin/sluiced#$bin#g" deploy/sluiced.service >"$T/unit/sluiced.service"
    local out
    if out=$(systemd-analyze verify "$T/unit/sluiced.service" 2>&1) && [ -z "$out" ]; then
      ok "systemd-analyze verify deploy/sluiced.service (ExecStart=$bin): no warnings"
    else
      fail "systemd-analyze verify deploy/sluiced.service"; printf '%s\n' "$out" | sed 's/^/       /'
    fi
    if out=$(systemd-analyze security --offline=true "$T/unit/sluiced.service" 2>&1 | grep 'Overall exposure'); then
      echo "       ${out#→ }"
    fi
  fi
  # systemd expands $VAR in Exec lines itself: a shell variable needs $$.
  local bad
  bad=$(grep -E '^Exec[A-Za-z]*=' deploy/sluiced.service | sed 's/\$\$//g' | grep -E '\$' | grep -vE '\$MAINPID\b' || true)
  [ -z "$bad" ]; v $? "deploy/sluiced.service: no shell \$ left for systemd to expand${bad:+: $bad}"
  if ! command -v systemd-sysusers >/dev/null; then
    skip "deploy/sluiced.sysusers (no systemd-sysusers)"
  else
    mkdir -p "$T/sysroot/etc/sysusers.d"
    cp deploy/sluiced.sysusers "$T/sysroot/etc/sysusers.d/sluiced.conf"
    if systemd-sysusers --root="$T/sysroot" >/dev/null 2>&1 &&
       grep -q '^sluice:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$T/sysroot/etc/passwd" &&
       grep -q '^sluice:x:' "$T/sysroot/etc/group"; then
      ok "deploy/sluiced.sysusers creates user and group sluice (systemd-sysusers --root)"
    else
      fail "deploy/sluiced.sysusers (systemd-sysusers --root)"
    fi
  fi
}

find_sluiced() {
  local c
  for c in "${SLUICED:-}" build-asan/agent/sluiced build/agent/sluiced build-rel/agent/sluiced; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$ROOT/${c#"$ROOT"/}"; return 0; }
  done
  return 1
}

# ---- (b) Redis Cluster -------------------------------------------------------------------
check_cluster() {
  local D=$T/cluster out p
  if ! out=$(deploy/redis-cluster.sh start --dir "$D" 2>&1); then
    fail "deploy/redis-cluster.sh start"; printf '%s\n' "$out" | tail -20 | sed 's/^/       /'; return
  fi
  local seeds ports
  seeds=$(deploy/redis-cluster.sh seeds --dir "$D")
  ok "deploy/redis-cluster.sh start: seeds $seeds"
  ports=$(tr ',' '\n' <<<"$seeds" | cut -d: -f2)
  p=$(head -1 <<<"$ports")
  local info
  info=$(redis-cli -c -p "$p" CLUSTER INFO | tr -d '\r')
  check "redis-cli -c -p $p cluster info: cluster_state:ok, 16384 slots, size 3" \
    bash -c 'grep -q "^cluster_state:ok$" <<<"$1" && grep -q "^cluster_slots_ok:16384$" <<<"$1" && grep -q "^cluster_size:3$" <<<"$1"' _ "$info"
  local nodes masters replicas
  nodes=$(redis-cli -p "$p" CLUSTER NODES)
  masters=$(awk '$3 ~ /master/ && NF >= 9 {n++} END {print n+0}' <<<"$nodes")
  replicas=$(awk '$3 ~ /slave/ {n++} END {print n+0}' <<<"$nodes")
  [ "$masters" = 3 ] && [ "$replicas" = 3 ]; v $? "3 masters with slots, 3 replicas (got $masters, $replicas)"
  local bad=0
  for q in $ports; do
    case "$(redis-cli -p "$q" CONFIG GET bind | sed -n 2p)" in 127.0.0.1) ;; *) bad=1 ;; esac
  done
  [ "$bad" = 0 ]; v $? "every node binds 127.0.0.1 only"

  # Deployments on different masters: configure + reserve through redis-cli -c.
  # The scripts are loaded on every node first (from stdin: a script is
  # longer than one command-line argument may be, 128 KiB), then run by
  # EVALSHA wherever -c follows the key.
  local dep q owner owners="" served=0 sha_conf="" sha_res=""
  for q in $ports; do
    sha_conf=$(script_text configure | redis-cli -p "$q" -x SCRIPT LOAD 2>/dev/null)
    sha_res=$(script_text reserve | redis-cli -p "$q" -x SCRIPT LOAD 2>/dev/null)
  done
  for dep in gpt-4o gpt-4o-mini claude-3 llama-70b embed-large o1; do
    mapfile -t K < <(dep_keys "$dep")
    if redis-cli -c -p "$p" EVALSHA "$sha_conf" "${#K[@]}" "${K[@]}" rpm 600 tpm 100000 | grep -q OK &&
       ! redis-cli -c -p "$p" EVALSHA "$sha_res" "${#K[@]}" "${K[@]}" 2 100 60000 100 60000 | grep -q ERR &&
       [ "$(redis-cli -c -p "$p" HGET "sluice:{$dep}:state" granted_total)" = 2 ]; then
      served=$((served + 1))
    fi
    # The master that holds it answers without a MOVED (no -c here).
    owner="?"
    for q in $ports; do
      if [ "$(redis-cli -p "$q" ROLE | head -1)" = master ] &&
         [ "$(redis-cli -p "$q" EXISTS "sluice:{$dep}:limits" 2>/dev/null)" = 1 ]; then owner=$q; fi
    done
    owners+="$dep@$owner "
  done
  local distinct
  distinct=$(tr ' ' '\n' <<<"$owners" | sed -n 's/.*@\([0-9]*\)$/\1/p' | sort -u | wc -l)
  [ "$served" = 6 ] && [ "$distinct" -ge 2 ] && [[ "$owners" != *"@?"* ]]
  v $? "configure + reserve via redis-cli -c: 6 deployments on $distinct masters ($owners)"

  local pids1 pids2
  pids1=$(cat "$D"/*/redis.pid | sort | tr '\n' ' ')
  if deploy/redis-cluster.sh start --dir "$D" >/dev/null 2>&1; then
    pids2=$(cat "$D"/*/redis.pid | sort | tr '\n' ' ')
    [ "$pids1" = "$pids2" ]; v $? "start again is a no-op (same 6 processes)"
  else
    fail "start again is a no-op"
  fi
  check "status says ok" bash -c "deploy/redis-cluster.sh status --dir '$D' | grep -q 'redis-cluster: ok'"
  deploy/redis-cluster.sh stop --dir "$D" >/dev/null 2>&1
  local alive=0 pid
  for pid in $pids1; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
  [ "$alive" = 0 ] && [ ! -e "$D" ]; v $? "stop: no node left running, $D removed"
  deploy/redis-cluster.sh status --dir "$D" >/dev/null 2>&1
  [ $? = 3 ]; v $? "status after stop exits 3 (not running)"
}

# ---- (c) Sentinel ------------------------------------------------------------------------
check_sentinel() {
  local D=$T/sentinel out
  if ! out=$(deploy/redis-sentinel.sh start --dir "$D" 2>&1); then
    fail "deploy/redis-sentinel.sh start"; printf '%s\n' "$out" | tail -20 | sed 's/^/       /'; return
  fi
  ok "deploy/redis-sentinel.sh start: $(grep -E '^(master|sentinels):' <<<"$out" | tr '\n' ' ')"
  check "status: quorum and replication ok" bash -c "deploy/redis-sentinel.sh status --dir '$D' | grep -q 'redis-sentinel: ok'"
  if out=$(deploy/redis-sentinel.sh failover --kill --dir "$D" 2>&1) && grep -q 'new master' <<<"$out"; then
    ok "failover --kill: $(grep 'new master' <<<"$out" | sed 's/^redis-sentinel: //')"
  else
    fail "failover --kill"; printf '%s\n' "$out" | sed 's/^/       /'
  fi
  if out=$(deploy/redis-sentinel.sh start --dir "$D" 2>&1) && grep -q slave <<<"$out"; then
    ok "start after the crash brings the old master back as a replica"
  else
    fail "start after the crash"; printf '%s\n' "$out" | sed 's/^/       /'
  fi
  local pids
  pids=$(cat "$D"/*/redis.pid 2>/dev/null | tr '\n' ' ')
  deploy/redis-sentinel.sh stop --dir "$D" >/dev/null 2>&1
  local alive=0 pid
  for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
  [ "$alive" = 0 ] && [ ! -e "$D" ]; v $? "stop: nothing left running, $D removed"
}

# ---- (d) ACL -----------------------------------------------------------------------------
check_acl() {
  local D=$T/acl
  mkdir -p "$D"
  local ver
  ver=$(redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/')
  # As shipped, the placeholders must keep the file from loading.
  cp deploy/acl.conf "$D/users.acl"
  redis-server --port 0 --unixsocket "$D/shipped.sock" --aclfile "$D/users.acl" --save '' \
    --dir "$D" --logfile "$D/shipped.log" --daemonize no >/dev/null 2>&1 &
  local sp=$!
  for _ in $(seq 20); do kill -0 "$sp" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$sp" 2>/dev/null; then
    kill "$sp"; wait "$sp" 2>/dev/null
    fail "deploy/acl.conf as shipped must not load (placeholder hashes)"
  else
    wait "$sp" 2>/dev/null
    # Every error must be a placeholder hash, on exactly the placeholder lines.
    local errs want
    errs=$(grep -o 'users\.acl:[0-9]*: [^.]*' "$D/shipped.log" | sort -u)
    want=$(grep -n 'SHA256_OF' deploy/acl.conf | cut -d: -f1 |
           sed 's/.*/users.acl:&: The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters/' | sort -u)
    if [ -n "$errs" ] && [ "$errs" = "$want" ]; then
      ok "deploy/acl.conf as shipped does not load: only its $(wc -l <<<"$want") placeholder hashes are refused"
    else
      fail "deploy/acl.conf as shipped: refused for another reason:"; grep 'ACL errors' "$D/shipped.log" | cut -c1-300 | sed 's/^/       /'
    fi
  fi

  local h_admin h_sluice h_ro
  h_admin=$(printf %s admin-pw | sha256sum | cut -d' ' -f1)
  h_sluice=$(printf %s sluice-pw | sha256sum | cut -d' ' -f1)
  h_ro=$(printf %s ro-pw | sha256sum | cut -d' ' -f1)
  sed -e "s/#SHA256_OF_ADMIN_PASSWORD/#$h_admin/" -e "s/#SHA256_OF_SLUICE_PASSWORD/#$h_sluice/" \
      -e "s/#SHA256_OF_SLUICE_RO_PASSWORD/#$h_ro/" deploy/acl.conf >"$D/users.acl"
  # enable-debug-command yes: so that DEBUG below is refused by the ACL alone.
  redis-server --port 0 --unixsocket "$D/r.sock" --unixsocketperm 700 --aclfile "$D/users.acl" --save '' \
    --enable-debug-command yes \
    --appendonly no --dir "$D" --logfile "$D/redis.log" --pidfile "$D/redis.pid" --daemonize yes >/dev/null 2>&1
  for _ in $(seq 100); do [ -S "$D/r.sock" ] && [ -s "$D/redis.pid" ] && break; sleep 0.05; done
  ACL_PID=$(cat "$D/redis.pid" 2>/dev/null)
  if [ -z "$ACL_PID" ]; then fail "redis-server $ver with deploy/acl.conf as aclfile"; sed 's/^/       /' "$D/redis.log"; return; fi
  local A=(redis-cli -s "$D/r.sock" --no-auth-warning --user admin --pass admin-pw)
  local S=(redis-cli -s "$D/r.sock" --no-auth-warning --user sluice --pass sluice-pw)
  local RO=(redis-cli -s "$D/r.sock" --no-auth-warning --user sluice-ro --pass ro-pw)
  local users
  users=$("${A[@]}" ACL USERS 2>&1 | tr '\n' ' ')
  [ "$users" = "admin default sluice sluice-ro " ]; v $? "redis-server $ver loads deploy/acl.conf as its aclfile (hashes filled in): users $users"
  check "default user is off: an unauthenticated PING is refused" \
    bash -c '[[ "$(redis-cli -s "$1" PING 2>&1)" == *NOAUTH* ]]' _ "$D/r.sock"
  check "sluice: wrong password refused" \
    bash -c '[[ "$(redis-cli -s "$1" --no-auth-warning --user sluice --pass wrong PING 2>&1)" == *WRONGPASS* ]]' _ "$D/r.sock"

  # The agent's connect sequence: AUTH (by redis-cli), SELECT, PING, SCRIPT LOAD.
  check "sluice: PING, SELECT 0, CLIENT SETNAME, ROLE, INFO server" bash -c '
    [ "$("$@" PING)" = PONG ] && [ "$("$@" SELECT 0)" = OK ] && [ "$("$@" CLIENT SETNAME sluiced-test)" = OK ] &&
    [ "$("$@" ROLE | head -1)" = master ] && "$@" INFO server | grep -q redis_version' _ "${S[@]}"
  local s sha all_loaded=1
  declare -A SHA
  for s in configure reserve settle retry heartbeat status; do
    sha=$(script_text "$s" | "${S[@]}" -x SCRIPT LOAD 2>&1)
    if [[ "$sha" =~ ^[0-9a-f]{40}$ ]]; then SHA[$s]=$sha; else all_loaded=0; echo "       SCRIPT LOAD $s: $sha"; fi
  done
  [ "$all_loaded" = 1 ]; v $? "sluice: SCRIPT LOAD of all 6 scripts"
  [ "$all_loaded" = 1 ] || return
  mapfile -t K < <(dep_keys gpt-4o)
  local r
  r=$("${S[@]}" EVALSHA "${SHA[configure]}" "${#K[@]}" "${K[@]}" rpm 600 tpm 150000 max_concurrency 4 2>&1 | head -1)
  [ "$r" = OK ]; v $? "sluice: EVALSHA configure on sluice:{gpt-4o}:* ($r)"
  # Judged by the state it leaves (the reply layout is the scripts' business).
  r=$("${S[@]}" EVALSHA "${SHA[reserve]}" "${#K[@]}" "${K[@]}" 2 1000 60000 1000 60000 2>&1)
  [[ "$r" != *ERR* && "$r" != *NOPERM* ]] && [ "$("${A[@]}" HGET 'sluice:{gpt-4o}:state' granted_total)" = 2 ]
  v $? "sluice: EVALSHA reserve (2 items granted)"
  local gid
  gid=$("${A[@]}" HKEYS 'sluice:{gpt-4o}:grants' | head -1)
  r=$("${S[@]}" EVALSHA "${SHA[settle]}" "${#K[@]}" "${K[@]}" 1 "$gid" 800 ok -1 2>&1)
  [[ "$r" == *settled* ]] && [ "$("${A[@]}" HGET 'sluice:{gpt-4o}:state' settled_ok)" = 1 ]
  v $? "sluice: EVALSHA settle of grant $gid"
  # {live, pause_shift_ms, now_us, backlogs}: the first line is the live count.
  r=$("${S[@]}" EVALSHA "${SHA[heartbeat]}" "${#K[@]}" "${K[@]}" agent-1 5000 2>&1 | head -1)
  [ "$r" = 1 ]; v $? "sluice: EVALSHA heartbeat ($r live)"
  r=$("${S[@]}" EVALSHA "${SHA[retry]}" "${#K[@]}" "${K[@]}" withdraw 2>&1 | head -1)
  [[ "$r" =~ ^[01]$ ]]; v $? "sluice: EVALSHA retry ($r)"
  r=$("${S[@]}" EVALSHA "${SHA[status]}" "${#K[@]}" "${K[@]}" 2>&1 | head -2 | tail -1)
  [ "$r" = gpt-4o ]; v $? "sluice: EVALSHA status ($r)"

  # Refused. Each must be a NOPERM (or the script's ACL error), not just any error.
  denied() {
    local what=$1; shift
    local o; o=$("${S[@]}" "$@" 2>&1)
    if [[ "$o" == *NOPERM* || "$o" == *"no permissions"* || "$o" == *"can't run this command"* ]]; then
      ok "sluice cannot $what"
    else
      fail "sluice cannot $what: got '$o'"
    fi
  }
  denied "FLUSHALL" FLUSHALL
  denied "FLUSHDB" FLUSHDB
  denied "KEYS *" KEYS '*'
  denied "SCAN" SCAN 0
  denied "CONFIG GET" CONFIG GET maxmemory
  denied "CONFIG SET" CONFIG SET maxmemory 1
  denied "SHUTDOWN" SHUTDOWN NOSAVE
  denied "ACL LIST" ACL LIST
  denied "SCRIPT FLUSH" SCRIPT FLUSH
  denied "SCRIPT KILL" SCRIPT KILL
  denied "FUNCTION LOAD" FUNCTION LOAD "#!lua name=x
redis.register_function('f', function() return 1 end)"
  denied "DEBUG" DEBUG SLEEP 0
  denied "PUBLISH" PUBLISH ch hello
  denied "GET a key outside sluice:*" GET 'other:key'
  denied "HGETALL a key outside sluice:*" HGETALL 'app:{gpt-4o}:state'
  denied "HSET a key outside sluice:*" HSET 'app:limits' rpm 1
  denied "DEL a key outside sluice:*" DEL 'app:limits'
  local okeys=(); for k in "${K[@]}"; do okeys+=("x${k}"); done
  denied "EVALSHA status with keys outside sluice:*" EVALSHA "${SHA[status]}" "${#okeys[@]}" "${okeys[@]}"
  denied "EVAL a script that writes outside sluice:*" EVAL "return redis.call('SET', 'other:key', 'x')" 0
  denied "EVAL a script that runs FLUSHALL" EVAL "return redis.call('FLUSHALL')" 0
  "${A[@]}" SET other:key untouched >/dev/null
  [ "$("${A[@]}" GET other:key)" = untouched ]; v $? "a key outside sluice:* is untouched"

  # Cluster-mode commands (permission only: this server has no cluster mode).
  local c dr bad=""
  for c in "CLUSTER SLOTS" "CLUSTER SHARDS" "ASKING" "READONLY" "HELLO 2" "AUTH sluice x" "CLIENT SETNAME a"; do
    # shellcheck disable=SC2086
    dr=$("${A[@]}" ACL DRYRUN sluice $c 2>&1)
    [ "$dr" = OK ] || bad+="$c: $dr; "
  done
  [ -z "$bad" ]; v $? "sluice may run CLUSTER SLOTS, CLUSTER SHARDS, ASKING, READONLY, HELLO, AUTH, CLIENT SETNAME (ACL DRYRUN)${bad:+: $bad}"
  bad=""
  for c in "CLUSTER NODES" "CLUSTER RESET" "CLUSTER FAILOVER" "CLIENT KILL ID 1" "CLIENT LIST" "MONITOR" "SUBSCRIBE ch" "REPLICAOF NO ONE"; do
    # shellcheck disable=SC2086
    dr=$("${A[@]}" ACL DRYRUN sluice $c 2>&1)
    [ "$dr" = OK ] && bad+="$c; "
  done
  [ -z "$bad" ]; v $? "sluice may not run CLUSTER NODES/RESET/FAILOVER, CLIENT KILL/LIST, MONITOR, SUBSCRIBE, REPLICAOF (ACL DRYRUN)${bad:+: allowed $bad}"

  # Every command the scripts call must be granted (Redis checks in-script calls).
  local used missing=""
  used=$(grep -ohE "redis\.p?call\('[A-Za-z]+'" lua/*.lua | sed -E "s/.*'([A-Za-z]+)'/\1/" | tr '[:upper:]' '[:lower:]' | sort -u)
  local rules
  rules=" $(grep '^user sluice on ' deploy/acl.conf) "
  for c in $used; do [[ "$rules" == *" +$c "* ]] || missing+="$c "; done
  [ -z "$missing" ]; v $? "every command lua/*.lua calls is granted to sluice ($(wc -w <<<"$used") commands)${missing:+: missing $missing}"
  if grep -qE "redis\.p?call\([^']" lua/*.lua; then
    fail "lua/*.lua calls a command by a non-literal name: the ACL check above cannot see it"
  fi

  # The read-only user.
  r=$("${RO[@]}" HGETALL 'sluice:{gpt-4o}:limits' 2>&1 | head -1)
  [ -n "$r" ] && [[ "$r" != *NOPERM* ]]; v $? "sluice-ro: HGETALL sluice:{gpt-4o}:limits ($r ...)"
  r=$("${RO[@]}" EVALSHA_RO "${SHA[status]}" "${#K[@]}" "${K[@]}" 2>&1 | head -2 | tail -1)
  [ "$r" = gpt-4o ]; v $? "sluice-ro: EVALSHA_RO status ($r)"
  r=$("${RO[@]}" HSET 'sluice:{gpt-4o}:limits' rpm 1 2>&1)
  [[ "$r" == *NOPERM* ]]; v $? "sluice-ro cannot HSET limits"
  r=$("${RO[@]}" EVALSHA "${SHA[reserve]}" "${#K[@]}" "${K[@]}" 1 1 1000 2>&1)
  [[ "$r" == *NOPERM* ]]; v $? "sluice-ro cannot EVALSHA reserve"
  r=$("${RO[@]}" EVALSHA_RO "${SHA[reserve]}" "${#K[@]}" "${K[@]}" 1 1 1000 2>&1)
  [[ "$r" == *ERR* || "$r" == *NOPERM* ]]; v $? "sluice-ro cannot EVALSHA_RO reserve (a write inside is refused)"
  r=$("${RO[@]}" SCAN 0 2>&1)
  [[ "$r" == *NOPERM* ]]; v $? "sluice-ro cannot SCAN"
  # A script of its own would let a read-only user stall the server for
  # every client (a loop answers BUSY to all until SCRIPT KILL, which it
  # may not run): only the agents' loaded scripts, by EVALSHA_RO.
  # (ACL DRYRUN: checked without running it.)
  local ev bad=""
  for ev in "EVAL_RO" "EVAL" "FCALL_RO"; do
    r=$("${A[@]}" ACL DRYRUN sluice-ro "$ev" "while true do end" 0 2>&1)
    [ "$r" = OK ] && bad+="$ev; "
  done
  [ -z "$bad" ]; v $? "sluice-ro may not run a script of its own (EVAL_RO, EVAL, FCALL_RO)${bad:+: allowed $bad}"
  [ "$("${A[@]}" HGET 'sluice:{gpt-4o}:limits' rpm)" = 600 ]; v $? "limits unchanged by the refused writes"
}

# ---- (e) Kubernetes ----------------------------------------------------------------------
check_k8s() {
  if ! python3 -c 'import yaml' 2>/dev/null; then
    skip "deploy/k8s/*.yaml (no python3 yaml)"
    return
  fi
  local out
  if out=$(python3 - "$T" <<'EOF' 2>&1
import os, posixpath, sys, yaml
tmp = sys.argv[1]
docs = {}
errors = []
for name in sorted(os.listdir('deploy/k8s')):
    if not name.endswith('.yaml'):
        continue
    with open(os.path.join('deploy/k8s', name)) as f:
        for d in yaml.safe_load_all(f):
            if d is None:
                continue
            for k in ('apiVersion', 'kind'):
                if k not in d:
                    errors.append(f'{name}: no {k}')
            docs.setdefault(d.get('kind'), []).append((name, d))
print('parsed:', ', '.join(f'{k}' for k in sorted(docs)))

kust = docs['Kustomization'][0][1]
for r in kust['resources']:
    if not os.path.exists(os.path.join('deploy/k8s', r)):
        errors.append(f'kustomization: missing {r}')

cm = docs['ConfigMap'][0][1]
secret = docs['Secret'][0][1]
dep = docs['Deployment'][0][1]
cfg = yaml.safe_load(cm['data']['sluiced.yaml'])
sock = cfg['agent']['socket']
pwfile = cfg['redis']['password_file']
spec = dep['spec']['template']['spec']
if dep['spec']['selector']['matchLabels'].items() - dep['spec']['template']['metadata']['labels'].items():
    errors.append('selector does not match the pod labels')
vols = {v['name']: v for v in spec['volumes']}
side = [c for c in spec.get('initContainers', []) if c['name'] == 'sluiced']
if not side:
    errors.append('no sluiced sidecar in initContainers')
side = side[0]
if side.get('restartPolicy') != 'Always':
    errors.append('sidecar is not a native sidecar (restartPolicy: Always)')
worker = spec['containers'][0]

def mount_for(c, path):
    best = None
    for m in c.get('volumeMounts', []):
        mp = m['mountPath'].rstrip('/')
        if path == mp or path.startswith(mp + '/'):
            if best is None or len(mp) > len(best['mountPath']):
                best = m
    return best

for c in (side, worker):
    for m in c.get('volumeMounts', []):
        if m['name'] not in vols:
            errors.append(f"{c['name']}: volumeMount {m['name']} has no volume")
    m = mount_for(c, posixpath.dirname(sock) + '/x')
    if not m or 'emptyDir' not in vols.get(m['name'], {}):
        errors.append(f"{c['name']}: the socket {sock} is not on the shared emptyDir")
sm, wm = mount_for(side, sock), mount_for(worker, sock)
if sm and wm and sm['name'] != wm['name']:
    errors.append('sidecar and worker mount different volumes at the socket path')

for p in ('startupProbe', 'readinessProbe', 'livenessProbe'):
    cmd = side.get(p, {}).get('exec', {}).get('command', [])
    if cmd[:1] != ['redis-cli'] or sock not in cmd or 'PING' not in cmd:
        errors.append(f'{p}: expected redis-cli -s {sock} PING, got {cmd}')

m = mount_for(side, pwfile)
if not m or 'secret' not in vols.get(m['name'], {}):
    errors.append(f'password_file {pwfile} is not on a Secret volume')
else:
    sv = vols[m['name']]['secret']
    if sv['secretName'] != secret['metadata']['name']:
        errors.append('Secret name mismatch')
    key = posixpath.relpath(pwfile, m['mountPath'])
    if key not in secret.get('stringData', {}) and key not in secret.get('data', {}):
        errors.append(f'Secret has no key {key}')
if mount_for(worker, pwfile) and 'secret' in vols.get(mount_for(worker, pwfile)['name'], {}):
    errors.append('the worker must not mount the Redis password')
cmv = [v for v in vols.values() if 'configMap' in v]
if not cmv or cmv[0]['configMap']['name'] != cm['metadata']['name']:
    errors.append('ConfigMap name mismatch')
args = side.get('args', [])
cfgpath = args[args.index('--config') + 1] if '--config' in args else None
m = mount_for(side, cfgpath or '/nonexistent')
if not m or 'configMap' not in vols.get(m['name'], {}):
    errors.append(f'--config {cfgpath} is not on the ConfigMap volume')
sc = spec.get('securityContext', {})
if not sc.get('runAsNonRoot'):
    errors.append('pod does not set runAsNonRoot')
for c in (side, worker):
    csc = c.get('securityContext', {})
    if csc.get('allowPrivilegeEscalation') is not False or not csc.get('readOnlyRootFilesystem'):
        errors.append(f"{c['name']}: securityContext not hardened")
# The socket must be usable by the worker: same group via fsGroup.
if 'fsGroup' not in sc:
    errors.append('no fsGroup: the worker may not be able to use the socket')

with open(os.path.join(tmp, 'k8s-sluiced.yaml'), 'w') as f:
    f.write(cm['data']['sluiced.yaml'].replace(pwfile, os.path.join(tmp, 'k8s-redis.pass')))
with open(os.path.join(tmp, 'k8s-redis.pass'), 'w') as f:
    f.write('example\n')
print(f'socket {sock} on emptyDir in both containers; probes PING it; password {pwfile} from Secret {secret["metadata"]["name"]}')
if errors:
    print('\n'.join(errors))
    sys.exit(1)
EOF
  ); then
    ok "deploy/k8s/*.yaml parse and agree: $(tr '\n' ' ' <<<"$out")"
  else
    fail "deploy/k8s/*.yaml"; printf '%s\n' "$out" | sed 's/^/       /'
  fi
  if command -v kubectl >/dev/null; then
    # Offline: kustomize only renders, it talks to no cluster.
    if out=$(timeout 30 kubectl kustomize deploy/k8s 2>&1) && [ "$(grep -c '^kind:' <<<"$out")" = 3 ]; then
      ok "kubectl kustomize deploy/k8s renders ConfigMap, Secret, Deployment"
    else
      fail "kubectl kustomize deploy/k8s"; printf '%s\n' "$out" | head -20 | sed 's/^/       /'
    fi
  else
    skip "kubectl kustomize deploy/k8s (no kubectl)"
  fi
  local bin
  if bin=$(find_sluiced); then
    if out=$("$bin" --check-config "$T/k8s-sluiced.yaml" 2>&1); then
      ok "the ConfigMap's sluiced.yaml passes sluiced --check-config ($bin)"
    else
      fail "the ConfigMap's sluiced.yaml: $out"
    fi
    if out=$("$bin" --check-config deploy/sluiced.example.yaml 2>&1); then
      ok "deploy/sluiced.example.yaml passes sluiced --check-config"
    else
      fail "deploy/sluiced.example.yaml: $out"
    fi
    check_image_libs "$bin"
  else
    skip "sluiced --check-config of the ConfigMap's YAML (no built sluiced; set SLUICED=)"
  fi
}

# The image's runtime stage installs the package of every library sluiced
# links (readelf's NEEDED, each found with dpkg -S; libc6's are in the
# base image) and ca-certificates (HTTPS to the providers). No image is
# built here (no registry): this is what one would lack at its start.
check_image_libs() {
  local bin=$1 lib pkg missing=() runtime
  if ! command -v readelf >/dev/null || ! command -v dpkg >/dev/null; then
    skip "deploy/k8s/Dockerfile runtime libraries (no readelf or dpkg)"
    return
  fi
  # The packages of the last stage's apt-get install line(s).
  runtime=$(awk '/^FROM /{stage=$0; text=""} {text=text" "$0} END{print text}' deploy/k8s/Dockerfile)
  for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    pkg=$(dpkg -S "*/$lib" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$pkg" ] || { missing+=("$lib (no package)"); continue; }
    # The C library is the base image's; a sanitizer's runtime is a test
    # build's (the image builds Release).
    case "$pkg" in libc6 | libc6-* | libasan* | libubsan* | liblsan* | libtsan*) continue ;; esac
    grep -qw -- "$pkg" <<<"$runtime" || missing+=("$pkg ($lib)")
  done
  grep -qw ca-certificates <<<"$runtime" || missing+=("ca-certificates (HTTPS)")
  if [ ${#missing[@]} -eq 0 ]; then
    ok "deploy/k8s/Dockerfile's runtime stage installs every library sluiced links, and ca-certificates"
  else
    fail "deploy/k8s/Dockerfile's runtime stage lacks: ${missing[*]}"
  fi
}

check_shellcheck() {
  if ! command -v shellcheck >/dev/null; then skip "shellcheck (not installed)"; return; fi
  local out
  if out=$(shellcheck -x deploy/redis-local.sh deploy/redis-cluster.sh deploy/redis-sentinel.sh tests/deploy_check.sh tests/bench/bench_redis_node.sh 2>&1); then
    ok "shellcheck deploy/redis-local.sh deploy/redis-cluster.sh deploy/redis-sentinel.sh tests/deploy_check.sh tests/bench/bench_redis_node.sh"
  else
    fail "shellcheck"; printf '%s\n' "$out" | head -40 | sed 's/^/       /'
  fi
}

for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "deploy_check: $tool not found (deploy/install-deps.sh)"; exit 1; }
done
t0=$SECONDS
sel systemd && check_systemd
sel cluster && check_cluster
sel sentinel && check_sentinel
sel acl && check_acl
sel k8s && check_k8s
sel shellcheck && check_shellcheck
echo "deploy_check: took $((SECONDS - t0)) s"
echo "deploy_check: $PASS passed, $FAIL failed, $SKIP skipped"
[ "$FAIL" = 0 ]
