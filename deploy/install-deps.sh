#!/usr/bin/env bash
# Installs what sluice needs to build, test and run on Debian 12.
# Idempotent: does nothing (and needs no network) when everything is there.
#   deploy/install-deps.sh           install what is missing (as root)
#   deploy/install-deps.sh --check   exit 1 if something is missing
set -euo pipefail
PKGS=(build-essential cmake pkg-config git
      libhiredis-dev libuv1-dev libcurl4-openssl-dev libyaml-dev libcmocka-dev
      libhttp-parser-dev libjansson-dev tzdata
      redis-server redis-tools python3 python3-yaml python3-redis python3-httpx shellcheck clang clang-format-14 libclang-rt-14-dev valgrind)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm, for the ioredis test (tests/integration/ioredis_install.sh):
# Debian's nodejs and npm when there is no node or npm on PATH. Checked by
# command, not by package: a Node.js from elsewhere (NodeSource's nodejs
# bundles npm, and conflicts with Debian's npm package) is kept.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "missing packages: ${missing[*]}" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (sudo $0)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
