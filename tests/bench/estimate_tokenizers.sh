#!/usr/bin/env bash
# sluice's prompt estimate (lib/core/estimate.h) beside three tokenizers
# the providers publish, over texts in nine scripts, CSV, a log, prose,
# code and JSON: OpenAI's o200k_base (GPT-4o and later) and cl100k_base
# (GPT-4, GPT-3.5) from the npm package gpt-tokenizer 4.0.0, and Anthropic's @anthropic-ai/tokenizer
# 0.0.4 (the Claude 2 tokenizer, the only one Anthropic published; newer
# Claude models count through the API only). The packages go under the
# build tree (tests/integration/npm_install.sh), never the source tree.
#   SLUICE_BUILD_DIR=build-rel tests/bench/estimate_tokenizers.sh
# Prints a Markdown table: tokens per code point for each tokenizer, and
# each tokenizer's count over sluice's estimate (above 1: sluice charges
# too little at first; the calibrated estimates learn the ratio).
# Exit 77 when node, npm or the registry is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${SLUICE_BUILD_DIR:-$src/build-rel}
est=$build/tests/bench_estimate
[ -x "$est" ] || { echo "no $est: build the tests first (cmake --build $build)" >&2; exit 1; }
dir=$build/npm-tokenizers
"$src/tests/integration/npm_install.sh" "$dir" sluice-tokenizers gpt-tokenizer@4.0.0 @anthropic-ai/tokenizer@0.0.4 >/dev/null
files=("$here"/corpus/*.txt "$src/docs/architecture.md" "$src/lib/core/engine_call.c" "$src/lua/reserve.lua"
       "$src/tests/bench/reserve_same.py" "$src/deploy/grafana/sluice.json")
"$est" "${files[@]}" | (cd "$dir" && node -e '
const o200 = require("gpt-tokenizer/encoding/o200k_base");
const cl100 = require("gpt-tokenizer/encoding/cl100k_base");
const claude = require("@anthropic-ai/tokenizer");
const fs = require("fs");
const lines = fs.readFileSync(0, "utf8").trim().split("\n");
console.log("| text | code points | sluice | o200k | cl100k | claude-2 | o200k / sluice | cl100k / sluice | claude-2 / sluice |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const l of lines) {
  const [path, points, est] = l.split("\t");
  const t = fs.readFileSync(path, "utf8");
  const n = [o200.encode(t).length, cl100.encode(t).length, claude.countTokens(t)];
  const per = (x) => (x / points).toFixed(2);
  const name = path.replace(/.*\/(corpus\/)?/, "");
  console.log(`| ${name} | ${points} | ${per(est)} | ${n.map(per).join(" | ")} | ${n.map((x) => (x / est).toFixed(2)).join(" | ")} |`);
}')
