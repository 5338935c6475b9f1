// The providers' own TypeScript SDKs, unmodified, as the callers of a
// proxy (or of `sluice mock` directly): OpenAI's `openai` (OpenAI and
// AzureOpenAI clients) and Anthropic's `@anthropic-ai/sdk`, installed by
// tests/integration/sdk_install.sh into MODULES/node_modules.
//
//   node sdk_client.js MODULES SDK BASE MODEL N CONCURRENCY STREAM MAX_RETRIES API_KEY [MAX_TOKENS [TAG]]
//
//   SDK          openai     OpenAI({baseURL: BASE + "/v1"})
//                azure      AzureOpenAI({endpoint: BASE, apiVersion, deployment: MODEL})
//                anthropic  Anthropic({baseURL: BASE})
//   STREAM       yes | no   (OpenAI streams ask stream_options.include_usage)
//   MAX_RETRIES  the SDK's own maxRetries
//   TAG          a name for this process in its output (default SDK)
//
// Only the base URL (and, for Azure, the endpoint, API version and
// deployment), the key and maxRetries are given: everything else is the
// SDK's default. N requests are sent, CONCURRENCY at a time; each prints
// one JSON line on stdout when it ends:
//   {"tag","sdk","i","status","stream","events","complete","input_tokens",
//    "output_tokens","text_chars","t","ms","error"[,"error_type"]}
// t is when the request started (wall clock, ms since the epoch), ms how
// long it took (retries included); error_type, on a failed request, the
// class of what the SDK threw (e.g. AuthenticationError for a 401).
// status is the HTTP status (0: no HTTP answer, e.g. refused connection);
// complete is 1 when the answer was whole: a plain answer with its usage,
// or a stream with every event that closes it (OpenAI: a finish_reason
// chunk and the usage chunk, then the end; Anthropic: message_start,
// message_delta with the usage, message_stop). input_tokens counts every
// input token the provider reported (Anthropic's cached ones included).
// A last line {"tag","summary":{...}} sums them up.
//
// With SLUICE_START_FILE set in the environment, the client first loads
// its SDK and builds its client, prints {"tag","ready":1} and waits until
// that file exists before its first request: a fleet of clients starts
// at one moment, not as each process happens to finish loading. Exit 0 when every
// request was answered 200 and complete, 1 otherwise, 2 on bad arguments.
"use strict";
const fs = require("fs");
const path = require("path");

const args = process.argv.slice(2);
if (args.length < 9) {
  console.error(
    "usage: sdk_client.js MODULES SDK BASE MODEL N CONCURRENCY STREAM MAX_RETRIES API_KEY [MAX_TOKENS [TAG]]",
  );
  process.exit(2);
}
const [modules, sdk, base, model, nArg, concArg, streamArg, retriesArg, apiKey, maxTokArg, tagArg] = args;
const n = Number(nArg), concurrency = Number(concArg), maxRetries = Number(retriesArg);
const maxTokens = maxTokArg ? Number(maxTokArg) : 32;
const stream = streamArg === "yes";
const tag = tagArg || sdk;
if (!["openai", "azure", "anthropic"].includes(sdk) || !(n >= 0) || !(concurrency >= 1) || !(maxRetries >= 0)) {
  console.error("sdk_client.js: SDK is openai, azure or anthropic; N >= 0, CONCURRENCY >= 1, MAX_RETRIES >= 0");
  process.exit(2);
}
const req = (name) => require(path.resolve(modules, "node_modules", name));

// 400 characters: 100 input tokens as the mock (and sluice) count them.
const PROMPT = "the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its quota ".repeat(4);

function makeClient() {
  // A request never waits for ever: 120 s, the SDKs' own timeout option.
  const common = { apiKey, maxRetries, timeout: 120000 };
  if (sdk === "anthropic") {
    const Anthropic = req("@anthropic-ai/sdk").default ?? req("@anthropic-ai/sdk");
    return new Anthropic({ ...common, baseURL: base });
  }
  const openai = req("openai");
  if (sdk === "azure")
    return new openai.AzureOpenAI({ ...common, endpoint: base, apiVersion: "2024-10-21", deployment: model });
  return new openai.OpenAI({ ...common, baseURL: base + "/v1" });
}

const client = makeClient();
const messages = [{ role: "user", content: PROMPT }];

// One OpenAI-style call (OpenAI or Azure). Returns the record's fields.
async function openaiCall() {
  const params = { model, messages, max_tokens: maxTokens };
  if (!stream) {
    const { data, response } = await client.chat.completions.create(params).withResponse();
    const u = data.usage;
    const text = data.choices?.[0]?.message?.content ?? "";
    return {
      status: response.status,
      events: 0,
      complete: u && data.choices?.[0]?.finish_reason ? 1 : 0,
      input_tokens: u?.prompt_tokens ?? 0,
      output_tokens: u?.completion_tokens ?? 0,
      text_chars: text.length,
    };
  }
  const { data: s, response } = await client.chat.completions
    .create({ ...params, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  let events = 0, finished = false, usage = null, chars = 0, afterUsage = 0;
  for await (const chunk of s) {
    events++;
    if (usage) afterUsage++;
    const c = chunk.choices?.[0];
    if (c?.delta?.content) chars += c.delta.content.length;
    if (c?.finish_reason) finished = true;
    if (chunk.usage) usage = chunk.usage;
  }
  return {
    status: response.status,
    events,
    complete: finished && usage && afterUsage === 0 ? 1 : 0,
    input_tokens: usage?.prompt_tokens ?? 0,
    output_tokens: usage?.completion_tokens ?? 0,
    text_chars: chars,
  };
}

function anthropicInput(u) {
  return (u?.input_tokens ?? 0) + (u?.cache_read_input_tokens ?? 0) + (u?.cache_creation_input_tokens ?? 0);
}

async function anthropicCall() {
  const params = { model, messages, max_tokens: maxTokens };
  if (!stream) {
    const { data, response } = await client.messages.create(params).withResponse();
    const text = (data.content ?? []).map((b) => b.text ?? "").join("");
    return {
      status: response.status,
      events: 0,
      complete: data.usage && data.stop_reason ? 1 : 0,
      input_tokens: anthropicInput(data.usage),
      output_tokens: data.usage?.output_tokens ?? 0,
      text_chars: text.length,
    };
  }
  const { data: s, response } = await client.messages.create({ ...params, stream: true }).withResponse();
  let events = 0, start = null, delta = null, stopped = false, chars = 0;
  for await (const ev of s) {
    events++;
    if (ev.type === "message_start") start = ev.message;
    else if (ev.type === "content_block_delta" && ev.delta?.type === "text_delta") chars += ev.delta.text.length;
    else if (ev.type === "message_delta") delta = ev;
    else if (ev.type === "message_stop") stopped = true;
  }
  // message_delta's usage is cumulative: its output_tokens is the answer's.
  return {
    status: response.status,
    events,
    complete: start && delta?.usage && delta.delta?.stop_reason && stopped ? 1 : 0,
    input_tokens: anthropicInput(start?.usage),
    output_tokens: delta?.usage?.output_tokens ?? 0,
    text_chars: chars,
  };
}

const summary = { requests: 0, ok: 0, complete: 0, status: {}, input_tokens: 0, output_tokens: 0 };

async function one(i) {
  const t0 = performance.now();
  const t = Math.round((performance.timeOrigin + t0) * 10) / 10;
  let rec;
  try {
    rec = await (sdk === "anthropic" ? anthropicCall() : openaiCall());
    rec.error = null;
  } catch (e) {
    // The SDKs' APIError carries the HTTP status; a connection error has none.
    rec = { status: e?.status ?? 0, events: 0, complete: 0, input_tokens: 0, output_tokens: 0, text_chars: 0 };
    rec.error = String(e?.message ?? e).slice(0, 300);
    rec.error_type = e?.constructor?.name ?? typeof e;
  }
  const out = { tag, sdk, i, ...rec, stream: stream ? 1 : 0, t, ms: Math.round((performance.now() - t0) * 10) / 10 };
  summary.requests++;
  summary.status[out.status] = (summary.status[out.status] ?? 0) + 1;
  if (out.status === 200) summary.ok++;
  if (out.complete) summary.complete++;
  summary.input_tokens += out.input_tokens;
  summary.output_tokens += out.output_tokens;
  process.stdout.write(JSON.stringify(out) + "\n");
}

// SLUICE_START_FILE: ready, then wait for the start (polled every 5 ms).
async function startGate() {
  const file = process.env.SLUICE_START_FILE;
  if (!file) return;
  process.stdout.write(JSON.stringify({ tag, ready: 1 }) + "\n");
  while (!fs.existsSync(file)) await new Promise((r) => setTimeout(r, 5));
}

async function main() {
  await startGate();
  let next = 0;
  const workers = [];
  for (let w = 0; w < Math.min(concurrency, n); w++)
    workers.push(
      (async () => {
        while (next < n) await one(next++);
      })(),
    );
  await Promise.all(workers);
  process.stdout.write(JSON.stringify({ tag, summary }) + "\n");
  process.exitCode = summary.ok === n && summary.complete === n ? 0 : 1;
}

main().catch((e) => {
  console.error("sdk_client.js:", e);
  process.exit(1);
});
