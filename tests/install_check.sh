#!/usr/bin/env bash
# install_check: `cmake --install BUILD --prefix DIR` into a scratch prefix,
# then docs/library.md's compile line against it, as a user would, with
# PKG_CONFIG_PATH pointing at DIR only: sluice.pc must find the header and
# the libraries under DIR (its prefix comes from ${pcfiledir}), not under
# the prefix given at configure time. The example is linked against the
# installed libsluice.so and started with --help; the README's C example
# ("Use it") is built the way it says.
#   tests/install_check.sh BUILD_DIR [EXTRA_LINK_FLAGS...]
# EXTRA_LINK_FLAGS: what the build's own link lines carry (the sanitizers
# of an ASan build, whose libsluice.so needs their runtime).
set -euo pipefail
build=${1:?usage: install_check.sh BUILD_DIR [EXTRA_LINK_FLAGS...]}
shift
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/sluice-install-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "install_check: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$dir/prefix" >"$dir/install.log" 2>&1 || { cat "$dir/install.log"; fail "cmake --install failed"; }
pc=$(find "$dir/prefix" -name sluice.pc | head -1)
[ -n "$pc" ] || fail "no sluice.pc under $dir/prefix"
export PKG_CONFIG_PATH=$(dirname "$pc")
inc=$(pkg-config --variable=includedir sluice)
lib=$(pkg-config --variable=libdir sluice)
case "$(cd "$inc" 2>/dev/null && pwd)" in
  "$dir/prefix"/*) ;;
  *) fail "includedir '$inc' is not under the install prefix $dir/prefix (sluice.pc: $(head -1 "$pc"))" ;;
esac
[ -f "$inc/sluice.h" ] || fail "$inc/sluice.h is missing"
[ -e "$lib/libsluice.so" ] || fail "$lib/libsluice.so is missing"
# docs/library.md's line, shared, for the libuv example.
# shellcheck disable=SC2046
cc -std=c11 -D_POSIX_C_SOURCE=200809L "$src/lib/examples/governed_call.c" -o "$dir/worker" \
   $(pkg-config --cflags --libs sluice libcurl libuv) -pthread "$@" -Wl,-rpath,"$lib" \
  || fail "docs/library.md's compile line failed against $dir/prefix"
"$dir/worker" --help >"$dir/help.txt" 2>&1 || true
grep -qi "usage" "$dir/help.txt" || { cat "$dir/help.txt"; fail "the installed example does not start"; }
# (grep reads it all: with -q it would stop at the first match, ldd would
# get SIGPIPE, and pipefail would call that a failure now and then)
ldd "$dir/worker" | grep "$lib/libsluice.so" >/dev/null || fail "the example is not linked against the installed libsluice.so"
# The README's C example ("Use it"), with its own compile line: the API it
# shows must build, warning-free, against the installed header and library.
awk '/^```c$/ {on=1; next} on && /^```$/ {exit} on {print}' "$src/README.md" >"$dir/app.c"
grep -q "sl_acquire" "$dir/app.c" || fail "no C example with sl_acquire in README.md"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "$dir/app.c" -o "$dir/app" $(pkg-config --cflags --libs sluice) "$@" \
   -Wl,-rpath,"$lib" || fail "README.md's C example does not build against $dir/prefix"
echo "install_check: installed to a scratch prefix; sluice.pc resolves there; the examples build; governed_call starts"
