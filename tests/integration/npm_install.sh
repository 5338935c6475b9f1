#!/usr/bin/env bash
# Installs npm packages for a test into DIR (under the build tree, never
# the source tree), from the npm registry, and caches them: the packages'
# names go to DIR/installed (printed, one per line) with the specs asked
# for in DIR/installed.specs, so a second run with the same specs needs no
# network. Used by sdk_install.sh and ioredis_install.sh, which choose the
# packages.
#   tests/integration/npm_install.sh DIR LABEL SPEC...
# (LABEL names DIR's private package.json; a SPEC may be an npm alias,
# ioredis5@npm:ioredis@5.11.1, whose name is the alias.)
# Exit: 0 installed; 77 cannot be installed here (no node or npm, or no
# network to the registry: the test skips, saying why); other: npm failed.
set -euo pipefail
dir=${1:?usage: npm_install.sh DIR LABEL SPEC...}
label=${2:?usage: npm_install.sh DIR LABEL SPEC...}
shift 2
specs=("$@")
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (deploy/install-deps.sh installs Debian's nodejs and npm)" >&2
    exit 77
  fi
done
want=$(printf '%s\n' "${specs[@]}")
mkdir -p "$dir"
if [ -f "$dir/installed.specs" ] && [ "$(cat "$dir/installed.specs")" = "$want" ] && [ -f "$dir/installed" ]; then
  cat "$dir/installed"
  exit 0
fi
rm -f "$dir/installed" "$dir/installed.specs"
log=$dir/npm-install.log
# A private package.json so that npm installs here, not in a parent's.
[ -f "$dir/package.json" ] || echo "{\"name\": \"$label\", \"private\": true}" >"$dir/package.json"
if ! (cd "$dir" && timeout 240 npm install --no-audit --no-fund --no-save --fetch-retries=1 \
        --fetch-timeout=30000 "${specs[@]}") >"$log" 2>&1; then
  if grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|ECONNRESET|network' "$log"; then
    echo "npm cannot reach the registry: $(grep -Em1 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|ECONNRESET|network' "$log")" >&2
    exit 77
  fi
  echo "npm install ${specs[*]} failed:" >&2
  tail -20 "$log" >&2
  exit 1
fi
for spec in "${specs[@]}"; do
  name=${spec%%@npm:*} # an alias is named by itself
  echo "${name%@*}"    # the version goes; a scope's leading @ stays
done >"$dir/installed"
echo "$want" >"$dir/installed.specs"
cat "$dir/installed"
