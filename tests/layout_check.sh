#!/usr/bin/env bash
# The layout's promises, checked on a build (ctest runs it as layout_check):
#   1. libsluice.so and libsluice.a define no global symbol but sl_*
#      (lib/sluice.map; the static archive's objcopy step), so a program
#      linking libsluice gets no engine_*, config_* or resp_* names;
#   2. no file under lib/ includes a header of the daemon (agent/), and the
#      core (lib/core/) includes nothing of the library above it
#      (lib/*.h): the core stands on lib/http, lib/include and the
#      embedded scripts only;
#   3. the simulator's provider worlds (tests/sim/world.[ch],
#      scenarios.[ch]) and the mock provider (agent/mock/) include nothing
#      but their own headers and system ones: a model of the providers
#      that shared the governor's code would prove nothing. One exception,
#      named here: the mock serves on the daemon's HTTP transport
#      (agent/http_server.h, agent/http_reader.h), which holds no belief
#      about providers, and that transport in turn includes nothing but
#      itself and system headers (no lib/core, no lib/http: the rate-limit
#      headers it would classify are a belief; no config, no lua, nothing
#      else of agent/).
# Usage: tests/layout_check.sh BUILD_DIR   (from the source tree's root)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${SLUICE_BUILD_DIR:-build}}
fail=0
say() { printf 'layout_check: %s\n' "$*" >&2; fail=1; }

# 1. Exported symbols. nm prints "address type name"; defined globals have
# an upper-case type other than U (undefined), w/v are weak undefined.
check_syms() { # file, nm flags
  local f=$1; shift
  [ -f "$f" ] || { say "$f not built"; return; }
  local bad
  bad=$(nm "$@" --defined-only "$f" 2>/dev/null |
        awk 'NF >= 3 && $2 ~ /^[A-TV-Z]$/ && $3 !~ /^sl_/ && $3 != "SLUICE_0" {print $3}' | sort -u)
  local n
  n=$(nm "$@" --defined-only "$f" 2>/dev/null | awk 'NF >= 3 && $3 ~ /^sl_/' | wc -l)
  [ "$n" -gt 0 ] || say "$f defines no sl_* symbol at all (nm failed?)"
  [ -z "$bad" ] || say "$f exports symbols outside sl_*: $(echo $bad | head -c 400)"
}
so=$(ls "$BUILD"/lib/libsluice.so.* 2>/dev/null | head -1)
check_syms "${so:-$BUILD/lib/libsluice.so}" -D
check_syms "$BUILD/lib/libsluice.a" -g

# 2. Include discipline. A quoted include names a file by basename (the
# include paths are the folders); any name that is a daemon header is out.
daemon_h=$(cd agent && find . -name '*.h' -printf '%f\n' | sort -u)
lib_h=$(find lib -maxdepth 1 -name '*.h' -printf '%f\n' | sort -u)
while IFS= read -r line; do
  file=${line%%:*}
  hdr=$(sed -E 's/.*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"${line#*:}")
  base=${hdr##*/}
  case $hdr in *agent/*) say "$file includes $hdr (a path into agent/)";; esac
  if grep -qx "$base" <<<"$daemon_h" && [ ! -f "lib/core/$base" ] && [ ! -f "lib/$base" ] \
     && [ ! -f "lib/http/$base" ] && [ ! -f "lib/include/$base" ]; then
    say "$file includes $hdr, a daemon header (agent/)"
  fi
  if [[ $file == lib/core/* ]] && grep -qx "$base" <<<"$lib_h" && [ ! -f "lib/core/$base" ]; then
    say "$file (the core) includes $hdr, a header of the library above it (lib/)"
  fi
done < <(grep -rHn --include='*.c' --include='*.h' -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' lib)

# 3. The provider worlds' independence.
for f in tests/sim/world.c tests/sim/world.h tests/sim/scenarios.c tests/sim/scenarios.h; do
  [ -f "$f" ] || continue
  bad=$(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | grep -Ev '"(world|scenarios)\.h"')
  [ -z "$bad" ] || say "$f includes $(echo $bad): the provider worlds share nothing with lib/ or lua/"
done
# ... and so does the mock provider (agent/mock/): its own headers, and
# the HTTP transport's ...
transport_h='"(http_server|http_reader)\.h"'
for f in agent/mock/*.c agent/mock/*.h; do
  [ -f "$f" ] || continue
  bad=$(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | grep -Ev '"mock[a-z_]*\.h"' |
        grep -Ev "$transport_h")
  [ -z "$bad" ] || say "$f includes $(echo $bad): the mock provider shares nothing with lib/ or lua/ (the HTTP transport aside)"
done
# ... which includes nothing of the project but itself.
for f in agent/http_server.c agent/http_server.h agent/http_reader.c agent/http_reader.h; do
  [ -f "$f" ] || { say "$f is missing (the HTTP transport the mock serves on)"; continue; }
  bad=$(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | grep -Ev "$transport_h")
  [ -z "$bad" ] || say "$f includes $(echo $bad): the HTTP transport the mock shares holds nothing of the governor"
done

if [ "$fail" -eq 0 ]; then
  echo "layout_check: libsluice exports only sl_* ($(nm -D --defined-only "${so:-/dev/null}" 2>/dev/null | grep -c ' sl_') symbols); lib/ includes no agent/ header; lib/core/ nothing of lib/; tests/sim/world and agent/mock nothing of the project (the mock: the HTTP transport, itself self-contained)"
fi
exit "$fail"
