#!/usr/bin/env bash
# Two builds of sluice side by side in one run: bench_agent against each
# build's sluiced, and `sluice demo` of each build, rounds alternating so
# that the machine's noise hits both alike. The client side of bench_agent
# is the newer build's binary in every round; only sluiced differs.
#   tests/bench/compare_builds.sh OLD_BUILD NEW_BUILD [rounds (3)] [demo strategies (D,sluice)]
# Prints the medians per build and their ratio (new / old).
set -euo pipefail
OLD=$(cd "$1" && pwd); NEW=$(cd "$2" && pwd); ROUNDS=${3:-3}; DEMO=${4:-D,sluice}
for b in "$OLD" "$NEW"; do
  for f in agent/sluiced sluice; do [ -x "$b/$f" ] || { echo "compare_builds: $b/$f not built" >&2; exit 2; }; done
done
[ -x "$NEW/tests/bench_agent" ] || { echo "compare_builds: $NEW/tests/bench_agent not built" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) {print "-"; exit} m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; print m}'; }
for r in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    b=$OLD; [ $side = new ] && b=$NEW
    echo "round $r: $side ($b)" >&2
    if ! SLUICE_BUILD_DIR=$b "$NEW/tests/bench_agent" 2 >"$out/agent.$side.$r" 2>&1; then
      # a failed round is left out of the medians, and says why
      echo "round $r: bench_agent against the $side build failed:" >&2
      tail -5 "$out/agent.$side.$r" >&2
      : >"$out/agent.$side.$r"
    fi
    # the demo table of that build (its own mock, Redis and workers)
    (cd "$out" && "$b/sluice" demo --strategies "$DEMO" --sluiced "$b/agent/sluiced" >"$out/demo.$side.$r" 2>&1) || true
  done
done
row() { # file pattern, awk column: prints the figure of every round
  local side=$1 pat=$2 col=$3
  for r in $(seq 1 "$ROUNDS"); do { grep -F -- "$pat" "$out/agent.$side.$r" || true; } | head -1 | awk -F'|' -v c="$col" '{gsub(/ /,"",$c); print $c}'; done
}
printf '\n| figure | old | new | new / old |\n|---|---:|---:|---:|\n'
# pattern@column@name: the first line of bench_agent's output with the
# pattern, the figure in that |-separated column
for spec in "through sluiced (ACQUIRE + SETTLE on the socket)@3@p50 us" \
            "through sluiced (ACQUIRE + SETTLE on the socket)@4@p99 us" \
            "| 1 |@3@grants/s, 1 caller" "| 64 |@3@grants/s, 64 callers" "| 1000 |@3@grants/s, 1000 callers" \
            "| 1000 |@4@script calls per grant, 1000 callers"; do
  pat=${spec%%@*}; rest=${spec#*@}; col=${rest%%@*}; name=${rest#*@}
  o=$(row old "$pat" "$col" | median); n=$(row new "$pat" "$col" | median)
  ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { if (o+0 > 0) printf "%.2f", n/o; else print "-" }')
  printf '| %s | %s | %s | %s |\n' "$name" "$o" "$n" "$ratio"
done
demo_fig() { # side, field counted from the end of the sluice row ("%" is 1, util 2, eff RPM 3, wall 5, p50 9)
  for r in $(seq 1 "$ROUNDS"); do
    { grep '^sluice (shared budget)' "$out/demo.$1.$r" || true; } | awk -v k="$2" '{ v=$(NF-k+1); gsub(/[^0-9.]/,"",v); print v }'
  done
}
for spec in "5|demo sluice wall s" "9|demo sluice p50 s" "3|demo sluice eff RPM"; do
  k=${spec%%|*}; name=${spec#*|}
  o=$(demo_fig old "$k" | median); n=$(demo_fig new "$k" | median)
  ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { if (o+0 > 0) printf "%.2f", n/o; else print "-" }')
  printf '| %s | %s | %s | %s |\n' "$name" "$o" "$n" "$ratio"
done
echo
for side in old new; do
  echo "demo table, $side build, last round:"
  sed -n '/^strategy/,/^$/p' "$out/demo.$side.$ROUNDS"
  echo
done
