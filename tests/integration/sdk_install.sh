#!/usr/bin/env bash
# Installs the providers' own TypeScript SDKs that test_proxy_sdk runs,
# unmodified, into DIR (under the build tree: $SLUICE_BUILD_DIR/npm-sdk;
# never in the source tree), from the npm registry:
#   openai             6.30.1  OpenAI's SDK (with AzureOpenAI), Node.js 20+
#   @anthropic-ai/sdk  1.15.0  Anthropic's SDK
# (openai 7 needs Node.js 22; Debian 12's own nodejs is 18, on which these
# cannot run: then nothing is installed and the test skips, saying why.)
# Prints the installed packages, one per line, and keeps them in
# DIR/installed, so a second run needs no network.
#   tests/integration/sdk_install.sh DIR
# Exit: 0 installed; 77 cannot be installed here (no node or npm, a Node.js
# older than 20, or no network to the registry: the test skips, saying
# why); other: npm failed.
set -euo pipefail
dir=${1:?usage: sdk_install.sh DIR}
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (deploy/install-deps.sh installs Debian's nodejs and npm)" >&2
    exit 77
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "Node.js $(node --version) is older than 20: the openai and @anthropic-ai/sdk packages need 20" >&2
  exit 77
fi
specs=("openai@6.30.1" "@anthropic-ai/sdk@1.15.0")
want=$(printf '%s\n' "${specs[@]}")
mkdir -p "$dir"
if [ -f "$dir/installed.specs" ] && [ "$(cat "$dir/installed.specs")" = "$want" ] && [ -f "$dir/installed" ]; then
  cat "$dir/installed"
  exit 0
fi
rm -f "$dir/installed" "$dir/installed.specs"
log=$dir/npm-install.log
# A private package.json so that npm installs here, not in a parent's.
[ -f "$dir/package.json" ] || echo '{"name": "sluice-test-sdks", "private": true}' >"$dir/package.json"
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
  echo "${spec%@*}"
done >"$dir/installed"
echo "$want" >"$dir/installed.specs"
cat "$dir/installed"
