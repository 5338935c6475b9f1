#!/usr/bin/env bash
# Installs the providers' own TypeScript SDKs that test_proxy_sdk runs,
# unmodified, into DIR (under the build tree: $SLUICE_BUILD_DIR/npm-sdk;
# never in the source tree), from the npm registry:
#   openai             6.30.1  OpenAI's SDK (with AzureOpenAI), Node.js 20+
#   @anthropic-ai/sdk  1.15.0  Anthropic's SDK
# (openai 7 needs Node.js 22; Debian 12's own nodejs is 18, on which these
# cannot run: then nothing is installed and the test skips, saying why.)
# Prints the installed packages, one per line (npm_install.sh caches
# them, so a second run needs no network).
#   tests/integration/sdk_install.sh DIR
# Exit: 0 installed; 77 cannot be installed here (no node or npm, a Node.js
# older than 20, or no network to the registry: the test skips, saying
# why); other: npm failed.
set -euo pipefail
dir=${1:?usage: sdk_install.sh DIR}
here=$(dirname "$0")
if command -v node >/dev/null 2>&1; then
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -lt 20 ]; then
    echo "Node.js $(node --version) is older than 20: the openai and @anthropic-ai/sdk packages need 20" >&2
    exit 77
  fi
fi
exec "$here/npm_install.sh" "$dir" sluice-test-sdks "openai@6.30.1" "@anthropic-ai/sdk@1.15.0"
