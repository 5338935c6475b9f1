#!/usr/bin/env bash
# One code style (.clang-format at the root), checked on every test run
# (ctest: format_check): every tracked C file formats to itself. To
# reformat after a change:
#   clang-format -i $(git ls-files '*.c' '*.h')
# Prints the files that differ and the first lines of each difference.
set -uo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$CF" ]; then
  echo "format_check: clang-format is not installed (deploy/install-deps.sh installs clang-format-14)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find lib agent tests -name '*.[ch]' | sort)
fi
bad=0
for f in "${files[@]}"; do
  if ! diff -q "$f" <("$CF" --style=file "$f") >/dev/null; then
    echo "format_check: $f differs from clang-format's:" >&2
    diff "$f" <("$CF" --style=file "$f") | head -8 >&2
    bad=$((bad + 1))
  fi
done
echo "format_check: ${#files[@]} files, $bad not in the house style"
[ "$bad" -eq 0 ]
