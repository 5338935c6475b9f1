#!/usr/bin/env bash
# Installs the ioredis versions that test_daemon_compat runs against
# sluiced into DIR (under the build tree: $SLUICE_BUILD_DIR/npm; never in
# the source tree), from the npm registry:
#   ioredis   6.0.0   RESP3 by default (HELLO 3 on connect), Node.js 20+
#   ioredis5  5.11.1  (npm alias of ioredis 5) RESP2, the most deployed line
# On a Node.js older than 20 (Debian 12's own nodejs is 18) only ioredis 5
# is installed. Prints the installed aliases, one per line, and keeps them
# in DIR/installed, so a second run needs no network.
#   tests/integration/ioredis_install.sh DIR
# Exit: 0 installed; 77 cannot be installed here (no node or npm, or no
# network to the registry: the test skips, saying why); other: npm failed.
set -euo pipefail
dir=${1:?usage: ioredis_install.sh DIR}
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (deploy/install-deps.sh installs Debian's nodejs and npm)" >&2
    exit 77
  fi
done
specs=("ioredis5@npm:ioredis@5.11.1")
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -ge 20 ]; then
  specs=("ioredis@6.0.0" "${specs[@]}")
else
  echo "Node.js $(node --version) is older than 20: ioredis 6 needs 20, installing ioredis 5 only" >&2
fi
want=$(printf '%s\n' "${specs[@]}")
mkdir -p "$dir"
if [ -f "$dir/installed.specs" ] && [ "$(cat "$dir/installed.specs")" = "$want" ] && [ -f "$dir/installed" ]; then
  cat "$dir/installed"
  exit 0
fi
rm -f "$dir/installed" "$dir/installed.specs"
log=$dir/npm-install.log
# A private package.json so that npm installs here, not in a parent's.
[ -f "$dir/package.json" ] || echo '{"name": "sluice-test-clients", "private": true}' >"$dir/package.json"
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
  echo "${spec%%@*}"
done >"$dir/installed"
echo "$want" >"$dir/installed.specs"
cat "$dir/installed"
