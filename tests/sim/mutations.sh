#!/usr/bin/env bash
# mutations.sh: each mutation the simulator must catch (issue 22), made on
# purpose in a scratch copy of the tree, must fail at least one check of
# the virtual-time suite: the scoreboard (sim_scoreboard, when built) and
# the fleet tests (test_sim_fleet, test_sim_fleet_world), and the exact
# picks of the callers' turns (test_engine_turn). A mutation that
# leaves everything passing is a blind spot and fails this script.
#
#   tests/sim/mutations.sh [NAME...]     (default: every mutation)
#
# Mutations:
#   refund   a settle gives back what an admission-charged dimension keeps
#            (Azure's tpm corrected to the usage: refund_tokens forced on)
#   early    release timers fire 20 ms before the slot
#   held     the share held back for silent agents is ignored
#   stray    every 429, a stray one too, cuts the rate by aimd_decrease (0.7)
#   retime   agents ignore a re-timing of the schedule (the callers they
#            hold keep their slots when a limit from the headers changes)
#   late     a caller released long after its slot goes out anyway (no
#            re-ask: a frozen agent sends the slots that passed at once)
#   lump     a rise of others' use seen over one span is taken as a lasting
#            rate at once (a neighbour's one-off burst slows the fleet)
#   doubling 429s in a row pause the fleet only as each says (a neighbour
#            that takes every token is probed five times a second)
#   pausespan a span of the headers across a fleet pause is read as
#            others' use (a greedy neighbour's minute becomes debt)
#   turns    the calls waiting in an agent go by arrival alone (callers
#            do not take turns: a caller whose answers are slower falls
#            behind)
#   turnage  a call that takes its turn keeps its own age on the wire (the
#            turn is undone in Redis, where the oldest requests go first)
#   overdue  a call past its max wait (a group call past its deadline)
#            waits for its turn like the others
#   giveback a call that gives its grant back and asks again keeps the
#            count its grant added (counted twice)
#   credit   a caller long behind keeps its count: it goes first for as
#            long as it was behind
#   newstart a new caller starts at the fewest waiting (a stream of new
#            connections passes a caller that keeps its own)
#   share    a call counts a whole turn, however many its caller has out
#            (a connection that multiplexes callers is one caller)
#   forget   a caller is never forgotten (the table grows with every
#            connection ever made)
#   once     a grant counted again without a give-back counts again
#   top      a group's call served on a member's queue has its group count
#            lifted on the member's callers' scale
#
# Each builds the simulator in a release build of its own copy (about a
# minute each on 2 cores) and runs the checks there. Not part of tests/run:
# run it before changing the controller (docs/simulator.md).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
all=(refund early held stray retime late lump doubling pausespan turns turnage overdue giveback credit newstart
     share forget once top)
want=("$@")
[ ${#want[@]} -eq 0 ] && want=("${all[@]}")
work=$(mktemp -d /tmp/sluice-mutations-XXXXXX)
trap 'rm -rf "$work"' EXIT

mutate() { # NAME DIR: applies the mutation; fails when the code it edits moved
  local d=$2
  case $1 in
    refund) sed -i 's/F("refund_tokens", "%d", c->refunds.tokens ? 1 : 0);/F("refund_tokens", "%d", 1);/' "$d/lib/core/engine_redis.c"
            grep -q 'F("refund_tokens", "%d", 1);' "$d/lib/core/engine_redis.c" ;;
    early)  sed -i 's/uv_timer_start(&c->timer, on_release, at - now, 0);/uv_timer_start(\&c->timer, on_release, at - now > 20 ? at - now - 20 : 0, 0);/' "$d/lib/core/engine_call.c"
            grep -q 'at - now - 20' "$d/lib/core/engine_call.c" ;;
    held)   sed -i 's/if q > 0 then share = math.min(q \/ live, 0.99) end/if q > 0 then share = 0 end/' "$d/lua/common.lua"
            grep -q 'if q > 0 then share = 0 end' "$d/lua/common.lua" ;;
    stray)  sed -i -e "s/if outcome == 'throttled' and reserved > last_decrease and not decreased and not explained\$/if outcome == 'throttled' and not decreased and (true or not explained)/" \
                   -e 's/and throttle_count() then/and (throttle_count() or true) then/' "$d/lua/settle.lua"
            grep -q 'throttle_count() or true' "$d/lua/settle.lua" && grep -q '(true or not explained)' "$d/lua/settle.lua" ;;
    retime) sed -i 's/^static void dep_retime_waiting(dep \*d, double k, double lag_ms) {$/&\n    if (k > 0) return;/' "$d/lib/core/engine_call.c"
            grep -q '    if (k > 0) return;' "$d/lib/core/engine_call.c" ;;
    late)   sed -i 's/(now > c->release_ms + ENGINE_LATE_RELEASE_MS \&\& dep_ready(d))/(0 \&\& dep_ready(d))/' "$d/lib/core/engine_call.c"
            grep -q 'c->lapsed || (0 && dep_ready(d))' "$d/lib/core/engine_call.c" ;;
    lump)   sed -i -e 's/^      elseif rise then$/      elseif true then/' -e 's/^        x = math.min(rise, rate)$/        x = rate/' "$d/lua/settle.lua"
            grep -q '^      elseif true then$' "$d/lua/settle.lua" && grep -q '^        x = rate$' "$d/lua/settle.lua" ;;
    doubling) sed -i 's/^      local grown = pause \* math.pow(2, math.min(k - 1, 20))$/      local grown = pause/' "$d/lua/settle.lua"
            grep -q '^      local grown = pause$' "$d/lua/settle.lua" ;;
    pausespan) sed -i "s/^  if sl_num(st, 'pause_from', 0) > s0 then$/  if false then/" "$d/lua/settle.lua"
            grep -q '^  if false then$' "$d/lua/settle.lua" ;;
    turns)  sed -i 's/^engine_call \*engine__list_next(engine \*e, call_list \*l, uint64_t now) {$/&\n    if (e) return l->head;/' "$d/lib/core/engine_turn.c"
            grep -q '^    if (e) return l->head;$' "$d/lib/core/engine_turn.c" ;;
    turnage) sed -i 's/^static void take_oldest_age(call_list \*l, engine_call \*best) {$/&\n    if (l) return;/' "$d/lib/core/engine_turn.c"
            grep -q '^    if (l) return;$' "$d/lib/core/engine_turn.c" ;;
    overdue) sed -i 's/^        if (overdue(c, now)) return c;$/        if (0 \&\& overdue(c, now)) return c;/' "$d/lib/core/engine_turn.c"
            grep -q '^        if (0 && overdue(c, now)) return c;$' "$d/lib/core/engine_turn.c" ;;
    giveback) sed -i 's/^    c->turn->n -= c->turn_inc;$/    c->turn->n -= 0;/' "$d/lib/core/engine_turn.c"
            grep -q '^    c->turn->n -= 0;$' "$d/lib/core/engine_turn.c" ;;
    credit) sed -i 's/^    double lo = c->turn_top - ENGINE_TURN_CREDIT, was = t->n;$/    double lo = -1e300, was = t->n;/' "$d/lib/core/engine_turn.c"
            grep -q '^    double lo = -1e300, was = t->n;$' "$d/lib/core/engine_turn.c" ;;
    newstart) sed -i 's/^        t->n = l->turn_floor + 1;$/        t->n = l->turn_floor;/' "$d/lib/core/engine_turn.c"
            grep -q '^        t->n = l->turn_floor;$' "$d/lib/core/engine_turn.c" ;;
    share)  sed -i 's|^    t->n = (t->n > lo ? t->n : lo) + 1.0 / (double)(t->out ? t->out : 1);$|    t->n = (t->n > lo ? t->n : lo) + 1.0;|' "$d/lib/core/engine_turn.c"
            grep -q '^    t->n = (t->n > lo ? t->n : lo) + 1.0;$' "$d/lib/core/engine_turn.c" ;;
    forget) sed -i 's/^            if (!t->out && now - t->seen_ms >= ENGINE_TURN_FORGET_MS) {$/            if (!t->out \&\& now < t->seen_ms) {/' "$d/lib/core/engine_turn.c"
            grep -q '^            if (!t->out && now < t->seen_ms) {$' "$d/lib/core/engine_turn.c" ;;
    once)   sed -i 's/^    if (!t || c->turn_inc > 0) return; \/\* counted once a call \*\/$/    if (!t) return;/' "$d/lib/core/engine_turn.c"
            grep -q '^    if (!t) return;$' "$d/lib/core/engine_turn.c" ;;
    top)    sed -i 's/^    if (turn_count(best, tag) >= 0) best->turn_top = most;$/    best->turn_top = most;/' "$d/lib/core/engine_turn.c"
            grep -q '^    best->turn_top = most;$' "$d/lib/core/engine_turn.c" ;;
    *) echo "mutations.sh: unknown mutation '$1' (one of: ${all[*]})" >&2; return 2 ;;
  esac
}

blind=0
for m in "${want[@]}"; do
  d=$work/$m
  mkdir -p "$d"
  (cd "$src" && git ls-files -z | xargs -0 cp --parents -t "$d")
  if ! mutate "$m" "$d"; then
    echo "mutations.sh: $m: the code it mutates has moved; update the script"; blind=1; continue
  fi
  b=$d/build
  cmake -S "$d" -B "$b" -DCMAKE_BUILD_TYPE=Release >/dev/null 2>&1
  targets="test_engine_turn test_sim_fleet test_sim_fleet_world"
  grep -q sim_scoreboard "$d/tests/sim/CMakeLists.txt" && targets="$targets sim_scoreboard"
  # shellcheck disable=SC2086
  if ! cmake --build "$b" -j"$(nproc)" --target $targets >"$d/build.log" 2>&1; then
    echo "mutations.sh: $m: the mutated tree does not build (see $d/build.log)"; blind=1; continue
  fi
  caught=""
  for t in $targets; do
    exe=$(find "$b" -name "$t" -type f -perm -u+x | head -1)
    args=()
    [ "$t" = sim_scoreboard ] && args=(--seeds 3)
    if ! SLUICE_BUILD_DIR=$b SLUICE_SOURCE_DIR=$d timeout 600 "$exe" "${args[@]}" >"$d/$t.log" 2>&1; then
      caught="$caught $t"
    fi
  done
  if [ -n "$caught" ]; then echo "mutations.sh: $m: caught by$caught"
  else echo "mutations.sh: $m: NOT caught (a blind spot: logs in $d)"; blind=1; trap - EXIT; fi
done
exit $blind
