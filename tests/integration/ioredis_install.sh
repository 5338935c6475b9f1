#!/usr/bin/env bash
# Installs the ioredis versions that test_daemon_compat runs against
# sluiced into DIR (under the build tree: $SLUICE_BUILD_DIR/npm; never in
# the source tree), from the npm registry:
#   ioredis   6.0.0   RESP3 by default (HELLO 3 on connect), Node.js 20+
#   ioredis5  5.11.1  (npm alias of ioredis 5) RESP2, the most deployed line
# On a Node.js older than 20 (Debian 12's own nodejs is 18) only ioredis 5
# is installed. Prints the installed aliases, one per line (npm_install.sh
# caches them, so a second run needs no network).
#   tests/integration/ioredis_install.sh DIR
# Exit: 0 installed; 77 cannot be installed here (no node or npm, or no
# network to the registry: the test skips, saying why); other: npm failed.
set -euo pipefail
dir=${1:?usage: ioredis_install.sh DIR}
here=$(dirname "$0")
specs=("ioredis5@npm:ioredis@5.11.1")
if command -v node >/dev/null 2>&1; then
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -ge 20 ]; then
    specs=("ioredis@6.0.0" "${specs[@]}")
  else
    echo "Node.js $(node --version) is older than 20: ioredis 6 needs 20, installing ioredis 5 only" >&2
  fi
fi
exec "$here/npm_install.sh" "$dir" sluice-test-clients "${specs[@]}"
