#!/usr/bin/env bash
# The docs' pointers into the code, checked (ctest runs it as docs_check):
# every file and function docs/architecture.md names in backticks exists,
# so a move or a rename that leaves the newcomer's map pointing at nothing
# fails the build's tests instead of waiting for a reader to notice.
#   - `path/with/slash.ext` (c, h, lua, md, sh, cmake, txt, yaml): that
#     file, from the source tree's root (a .md also from docs/);
#   - `name.ext` without a slash: a file of that name somewhere in lib/,
#     agent/, lua/, tests/, deploy/ or docs/;
#   - `name()`: a C function defined at the start of a line in a .c or
#     .h file (its name followed by "("), or a Lua function
#     ("function name(" / "local function name(").
# Usage: tests/docs_check.sh [FILE.md ...]   (default docs/architecture.md)
set -uo pipefail
cd "$(dirname "$0")/.."
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(docs/architecture.md)
fail=0
say() { printf 'docs_check: %s\n' "$*" >&2; fail=1; }

for doc in "${files[@]}"; do
  [ -f "$doc" ] || { say "$doc: no such file"; continue; }
  # Each backticked token, with the line it is on.
  while IFS=: read -r line tok; do
    case "$tok" in
      *'()')
        name=${tok%()}
        [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
        if ! grep -rqE "^[A-Za-z_].*[^A-Za-z0-9_]${name}\(|^${name}\(" --include='*.c' --include='*.h' lib agent tests 2>/dev/null &&
           ! grep -rqE "^(local )?function ${name}\(" --include='*.lua' lua tests 2>/dev/null; then
          say "$doc:$line: \`$tok\` names a function no file defines"
        fi
        ;;
      *\**) ;; # a pattern (lua/*.lua), not a file
      */*.c | */*.h | */*.lua | */*.md | */*.sh | */*.cmake | */*.txt | */*.yaml)
        path=${tok#../}
        [ -e "$path" ] || [ -e "docs/$path" ] || say "$doc:$line: \`$tok\` is not a file of the tree"
        ;;
      *.c | *.h | *.lua | *.sh | *.cmake)
        [[ "$tok" =~ ^[A-Za-z0-9_.-]+$ ]] || continue
        [ -n "$(find lib agent lua tests deploy docs -name "$tok" -print -quit 2>/dev/null)" ] ||
          say "$doc:$line: \`$tok\` is no file's name in the tree"
        ;;
    esac
  done < <(grep -noE '`[^` ]+`' "$doc" | sed -E 's/^([0-9]+):`(.*)`$/\1:\2/')
done
[ $fail -eq 0 ] && echo "docs_check: every file and function ${files[*]} names exists"
exit $fail
