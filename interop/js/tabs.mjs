// Issue 31, defect 5, with the official JS SDK: two tabs of one actor whose sockets are cut at
// the same moment each keep their subscriptions (docs/protocol.md "Restore records"). The same
// scenario as interop/test_tabs.py (the Python SDK, in CI); the JS SDK is not on the npm
// registry CI reaches, so this is a documented manual check (docs/rest-api.md):
//
//   NOLAG_JS_SDK=path/to/js-sdk SKUA_BIN=target/debug/skua node interop/js/tabs.mjs
//
// NOLAG_JS_SDK is a built checkout of github.com/NoLagApp/js-sdk (1.3.0, `npm install`); the
// script starts its own `skua serve --dev` and exits 0 when both tabs got their messages.
import { spawn } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { pathToFileURL } from "node:url";

const sdk = process.env.NOLAG_JS_SDK;
if (!sdk) throw new Error("set NOLAG_JS_SDK to a built checkout of the JS SDK");
// Node.js 20 has no global WebSocket, which the SDK's client reads (`WebSocket.OPEN`); Node 22
// has one. The SDK's own dependency `ws` stands in for it.
globalThis.WebSocket ??= (await import(pathToFileURL(path.join(sdk, "node_modules", "ws", "wrapper.mjs")).href)).default;
const { NoLag } = await import(pathToFileURL(path.join(sdk, "dist", "index.mjs")).href);
const bin = process.env.SKUA_BIN ?? "target/debug/skua";
const within = (p, ms, what) => {
  let timer;
  const late = new Promise((_, no) => (timer = setTimeout(() => no(new Error(`timed out: ${what}`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
};

// A dev node on an ephemeral port.
const node = spawn(bin, ["serve", "--dev", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--store", "sqlite::memory:"]);
const port = await within(new Promise((ok) => {
  node.stdout.on("data", (b) => {
    const m = /^skua listening on \S+:(\d+)\s*$/m.exec(b.toString());
    if (m) ok(Number(m[1]));
  });
}), 15000, "skua listening");

// One proxy per tab: cut() closes its piped sockets, hold() keeps new ones waiting.
function proxy() {
  const pipes = new Set();
  let held = null;
  const server = net.createServer(async (down) => {
    if (held) await held.promise;
    const up = net.connect(port, "127.0.0.1");
    pipes.add([down, up]);
    down.pipe(up).on("error", () => {});
    up.pipe(down).on("error", () => {});
    down.on("error", () => up.destroy());
    up.on("error", () => down.destroy());
  });
  return {
    listen: () => new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server.address().port))),
    cut: () => { for (const [d, u] of pipes) { d.destroy(); u.destroy(); } pipes.clear(); },
    hold: () => { let release; const promise = new Promise((r) => (release = r)); held = { promise, release }; },
    release: () => { held?.release(); held = null; },
    close: () => server.close(),
  };
}

const metric = async (name) => {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  if (!m) throw new Error(`metric ${name} missing`);
  return Number(m[1]);
};
const until = async (pred, what) => {
  const end = Date.now() + 10000;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};
const connected = (client) => new Promise((ok) => client.on("connect", ok));
const got = (client, topic, value) => new Promise((ok) => client.on(topic, (data) => data?.mark === value && ok()));

const TOPICS = ["demo/general/messages", "demo/random/messages"];
const proxies = [proxy(), proxy()];
const tabs = [];
for (const p of proxies) {
  const url = `ws://127.0.0.1:${await p.listen()}/ws`;
  const tab = NoLag("dev-token-alice", { url, reconnectInterval: 100, heartbeatInterval: 0 });
  await within(tab.connect(), 5000, "tab connect");
  tabs.push(tab);
}
for (const [i, tab] of tabs.entries()) {
  await within(new Promise((ok, no) => tab.subscribe(TOPICS[i], (e) => (e ? no(e) : ok()))), 5000, "subscribe");
}
const bob = NoLag("dev-token-bob", { url: `ws://127.0.0.1:${port}/ws`, heartbeatInterval: 0 });
await within(bob.connect(), 5000, "bob connect");

// Tab 1 is cut first and its end is seen, then tab 2: tab 2's record ended last. The reconnects
// are held and let through tab 1 first, so tab 1 claims tab 2's record.
const closed = await metric("skua_connections_closed_total");
proxies.forEach((p) => p.hold());
proxies[0].cut();
await until(async () => (await metric("skua_connections_closed_total")) >= closed + 1, "tab 1 closed");
proxies[1].cut();
await until(async () => (await metric("skua_connections_closed_total")) >= closed + 2, "tab 2 closed");
const back = tabs.map(connected);
proxies[0].release();
await within(back[0], 10000, "tab 1 reconnect");
proxies[1].release();
await within(back[1], 10000, "tab 2 reconnect");

for (const [i, tab] of tabs.entries()) {
  const mark = `tab${i + 1}-${Date.now()}`;
  const arrived = got(tab, TOPICS[i], mark);
  bob.emit(TOPICS[i], { mark });
  await within(arrived, 5000, `tab ${i + 1}'s message on ${TOPICS[i]} after the reconnect`);
  console.log(`tab ${i + 1} got its message on ${TOPICS[i]}`);
}
[...tabs, bob].forEach((c) => c.disconnect());
proxies.forEach((p) => p.close());
node.kill("SIGTERM");
console.log("ok: both tabs kept their subscriptions");
process.exit(0);
