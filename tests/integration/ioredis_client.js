// ioredis, the stock Node.js Redis client, against sluiced.
//
//   node ioredis_client.js MODULES PACKAGE SOCKET DEPLOYMENT [PROTOCOL]
//
// Loads PACKAGE (ioredis, or the alias ioredis5) from MODULES/node_modules
// (ioredis_install.sh puts it there) and connects to SOCKET with ioredis'
// defaults: only the path is given, and PROTOCOL (2 or 3) when stated;
// with 3 also replyMapping "resp3" (ioredis 6), so that a map arrives as
// an object rather than flattened.
// ioredis then runs its own handshake (HELLO 3 in ioredis 6, CLIENT
// SETINFO, the INFO ready check). It acquires a slot, settles it, reads
// CLIENT INFO (what the daemon saw) and an error reply, and prints one line
// that tests/integration/test_daemon_compat.c asserts:
//   ioredis ok: package=.. version=.. protocol=.. grant=.. waited_ms=..
//   reserved=.. settle=OK resp=.. lib-name=.. lib-ver=.. status=..
// Any surprise exits 1 with a message on stderr; it never waits more than
// 20 s (ioredis would otherwise retry a refused connection for ever).
"use strict";
const path = require("path");

const [modules, pkg, sock, dep, protocol] = process.argv.slice(2);
if (!dep) {
  console.error("usage: ioredis_client.js MODULES PACKAGE SOCKET DEPLOYMENT [PROTOCOL]");
  process.exit(2);
}
const Redis = require(path.join(modules, "node_modules", pkg));
const version = require(path.join(modules, "node_modules", pkg, "package.json")).version;

setTimeout(() => {
  console.error("ioredis client: no answer within 20 s");
  process.exit(1);
}, 20000).unref();

function fail(what) {
  throw new Error(what);
}

async function main() {
  const options = { path: sock };
  if (protocol) options.protocol = Number(protocol);
  if (protocol === "3") options.replyMapping = "resp3"; /* ioredis 5 ignores both */
  const r = new Redis(options);
  r.on("error", (e) => console.error("ioredis error event: " + e.message));
  try {
    const grant = await r.call("ACQUIRE", dep, "TOKENS", "10");
    if (!Array.isArray(grant) || !String(grant[0]).startsWith(dep + ":") || grant[2] !== 10)
      fail("unexpected grant " + JSON.stringify(grant));
    const settle = await r.call("SETTLE", grant[0], "TOKENS", "7", "STATUS", "ok");
    if (settle !== "OK") fail("SETTLE answered " + JSON.stringify(settle));
    const info = String(await r.call("CLIENT", "INFO"));
    const field = (k) => (info.match(new RegExp("(?:^| )" + k + "=(\\S*)")) || [])[1];
    // STATUS: a flat field/value array in RESP2; in RESP3 a map, which
    // ioredis' default ("legacy") reply mapping hands over flattened too,
    // and "resp3" as an object.
    const status = await r.call("STATUS", dep);
    const shape = Array.isArray(status) ? "array" : status instanceof Map ? "map" : typeof status;
    const flat =
      shape === "array" ? status : [...(shape === "map" ? status.entries() : Object.entries(status))].flat();
    if (flat[0] !== "deployment" || flat[1] !== dep) fail("unexpected STATUS " + JSON.stringify(flat.slice(0, 4)));
    let refused = "";
    try {
      await r.call("ACQUIRE", "no-such-deployment");
    } catch (e) {
      refused = e.message;
    }
    if (!refused.includes("unknown deployment")) fail("an unknown deployment answered " + JSON.stringify(refused));
    console.log(
      `ioredis ok: package=${pkg} version=${version} protocol=${protocol || "default"} grant=${grant[0]} ` +
        `waited_ms=${grant[1]} reserved=${grant[2]} settle=${settle} resp=${field("resp")} ` +
        `lib-name=${field("lib-name")} lib-ver=${field("lib-ver")} status=${shape}`
    );
  } finally {
    r.disconnect();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error("ioredis client failed: " + (e && e.stack ? e.stack : e));
    process.exit(1);
  }
);
