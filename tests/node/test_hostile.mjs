// Hostile input and overload against `osprey serve` on loopback (the tiny synthetic model): each
// probe that once crashed, hung or silently clamped, as a test. Bounded: every loop has a count and
// every wait a deadline. Usage: node test_hostile.mjs OSPREY_BINARY
import { spawnSync, execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { assert, finish, metric, sleep, startServer as startServerIn, test } from "./harness.mjs";

const osprey = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "osprey-hostile-"));
const modelDir = path.join(tmp, "tiny");
execFileSync(osprey, ["synth", "--preset", "tiny", "--seed", "3", "--out", modelDir, "--quiet"]);

// A 4,096-token context (the model's is 131,072), so that the limits below are quick to reach.
const startServer = (extra = [], port) =>
  startServerIn(osprey, modelDir, ["--max-seq-len", "4096", ...extra], port === undefined ? {} : { port });
const alive = (s) => s.proc.exitCode === null && s.proc.signalCode === null;

async function post(base, route, body, raw = false) {
  const r = await fetch(`${base}${route}`, { method: "POST", headers: { "Content-Type": "application/json" },
                                             body: raw ? body : JSON.stringify(body) });
  return { status: r.status, body: await r.json().catch(() => null), headers: r.headers };
}
const chat = (extra) => ({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...extra });

function nested(levels, key) {  // {"type": "object", KEY: {"x": {...}}} levels deep, built as text
  const open = `{"type":"object","${key}":{"x":`, close = "}}";
  return open.repeat(levels) + `{"type":"string"}` + close.repeat(levels);
}
async function timed(fn) { const t = Date.now(); await fn(); return Date.now() - t; }

const s = await startServer();

await test("deeply nested tool parameters are a 400, and the server stays up", async () => {
  for (const [levels, key] of [[30000, "properties"], [100000, "items"], [1000, "properties"]]) {
    const body = `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"x"}],` +
                 `"tools":[{"type":"function","function":{"name":"f","parameters":${nested(levels, key)}}}]}`;
    const r = await post(s.base, "/v1/chat/completions", body, true);
    assert(r.status === 400, `${levels} levels: HTTP ${r.status}`);
    assert(/nests deeper than 64 levels/.test(r.body.error.message) && r.body.error.param === "tools", JSON.stringify(r.body));
  }
  assert(alive(s), "the server died");
});

await test("deeply nested tool-call arguments are a 400", async () => {
  const args = "{\"a\":".repeat(100000) + "1" + "}".repeat(100000);
  const body = `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"x"},` +
               `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":${args}}}]}]}`;
  const r = await post(s.base, "/v1/chat/completions", body, true);
  assert(r.status === 400 && r.body.error.param === "messages", `HTTP ${r.status} ${JSON.stringify(r.body)}`);
  assert(alive(s), "the server died");
});

await test("a schema that renders past the context is refused before tokenization", async () => {
  // 2,000 properties of 200-byte descriptions: a prompt far over what 4,096 tokens can hold.
  const props = {};
  for (let i = 0; i < 2000; ++i) props[`p${i}`] = { type: "string", description: "y".repeat(200) };
  const t0 = Date.now();
  const r = await post(s.base, "/v1/chat/completions",
                       chat({ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props } } }] }));
  assert(r.status === 400 && r.body.error.code === "context_length_exceeded", `HTTP ${r.status} ${JSON.stringify(r.body)}`);
  assert(Date.now() - t0 < 2000, `took ${Date.now() - t0} ms`);
});

await test("type errors and bad tools are a 400 naming the field, never a 500", async () => {
  const cases = [
    [{ tool_choice: { type: "function", function: { name: 5 } }, tools: [{ type: "function", function: { name: "f" } }] }, "tool_choice"],
    [{ tools: [{ type: "function", function: { name: "get weather<|call|>" } }] }, "tools"],
    [{ tools: [{ type: "function", function: { name: "x".repeat(65) } }] }, "tools"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "strng" } } } } }] }, "tools"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {}, required: ["a"] } } }] }, "tools"],
    [{ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", required: "a" } } }] }, "tools"],
    [{ messages: [{ role: "user", content: [{ type: "text", text: 5 }] }] }, "messages"],
    [{ max_tokens: "many" }, "max_tokens"],
    [{ messages: [{ role: 1, content: "x" }] }, "messages"],
    [{ tools: [{ type: 5, function: { name: "f" } }] }, "tools"],
    [{ temperature: "hot" }, "temperature"],
  ];
  for (const [extra, param] of cases) {
    const r = await post(s.base, "/v1/chat/completions", chat(extra));
    assert(r.status === 400, `${JSON.stringify(extra)}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    assert(r.body.error.param === param, `${JSON.stringify(extra)}: param ${r.body.error.param}, ${r.body.error.message}`);
  }
});

await test("type errors on /v1/responses are a 400 naming the path, never a 500", async () => {
  for (const [input, param] of [[[{ type: 1 }], "input[0].type"], [[{ role: 5, content: "x" }], "input[0].role"],
                                [[{ role: "user", content: [{ type: 5 }] }], "input[0].content[0].type"]]) {
    const r = await post(s.base, "/v1/responses", { model: "tiny", input, max_output_tokens: 2 });
    assert(r.status === 400 && r.body.error.param === param, `${JSON.stringify(input)}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  }
});

await test("a Content-Length that is not a number is a 400", async () => {
  const data = await new Promise((resolve, reject) => {
    let got = "";
    const sock = net.connect(s.port, "127.0.0.1", () =>
      sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}"));
    sock.on("data", (d) => { got += d; if (got.includes("}")) { sock.destroy(); resolve(got); } });
    sock.on("error", reject);
    sock.on("close", () => resolve(got));
    setTimeout(() => reject(new Error("no answer in 5 s")), 5000);
  });
  assert(data.startsWith("HTTP/1.1 400") && /not a byte count/.test(data), data.slice(0, 200));
});

await test("max_tokens beyond the context is a 400 that says the numbers", async () => {
  const r = await post(s.base, "/v1/chat/completions", chat({ max_tokens: 1000000 }));
  assert(r.status === 400 && r.body.error.code === "context_length_exceeded", `HTTP ${r.status}`);
  assert(/maximum context length is 4096 tokens/.test(r.body.error.message) && /1000000 in the completion/.test(r.body.error.message),
         r.body.error.message);
  const c = await post(s.base, "/v1/completions", { model: "tiny", prompt: "hello", max_tokens: 5000 });
  assert(c.status === 400 && c.body.error.param === "max_tokens", `completions: HTTP ${c.status}`);
});

await test("a declared Content-Length over the limit is a 413 at once", async () => {
  const ms = await timed(() => new Promise((resolve, reject) => {
    const sock = net.connect(s.port, "127.0.0.1", () => {
      sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000000\r\n\r\n{");
    });
    let data = "";
    sock.on("data", (d) => { data += d; if (data.includes("\r\n\r\n")) { sock.destroy(); resolve(); } });
    sock.on("error", reject);
    setTimeout(() => reject(new Error("no answer in 5 s")), 5000);
    sock.on("close", () => { assert(data.startsWith("HTTP/1.1 413"), data.slice(0, 40)); resolve(); });
  }));
  assert(ms < 1000, `413 took ${ms} ms`);
});

await test("150 half-open connections do not starve /health", async () => {
  const socks = [];
  for (let i = 0; i < 150; ++i) {
    const c = net.connect(s.port, "127.0.0.1", () => c.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"));
    c.on("error", () => {});
    socks.push(c);
  }
  await sleep(300);
  const worst = Math.max(...await Promise.all([0, 1, 2, 3, 4].map(() => timed(async () => assert((await fetch(`${s.base}/health`)).ok)))));
  socks.forEach((c) => c.destroy());
  assert(worst < 500, `/health took ${worst} ms`);
});

// A burst of connections must not overflow the listening socket's accept queue (cpp-httplib
// listens with a backlog of 5): each connection dropped there waits on the client's SYN
// retransmission (1 s, then 3 s, 7 s...), past which clients time out. Measured with the backlog of
// 5: 300 concurrent /health requests took 1.5-69 s, most of them over 1.1 s, and once 141 failed;
// with the widened queue, 0.3 s. The kernel counts those drops (TcpExt ListenOverflows and
// ListenDrops in /proc/net/netstat, per network namespace): where it can be read, that count must
// not move, which holds however loaded the machine is; the latency bound is then only a loose
// backstop (a loaded 2-core CI machine answered the burst's 90th percentile in over 0.95 s with no
// drop at all).
function listenDrops() {
  try {
    const [head, values] = fs.readFileSync("/proc/net/netstat", "utf8").split("\n").filter((l) => l.startsWith("TcpExt:"));
    const names = head.split(/\s+/), nums = values.split(/\s+/);
    return Number(nums[names.indexOf("ListenOverflows")]) + Number(nums[names.indexOf("ListenDrops")]);
  } catch {
    return null;
  }
}
await test("a burst of 300 connections is accepted at once: none dropped from the accept queue", async () => {
  const lat = [];
  const before = listenDrops();
  const results = await Promise.all(Array.from({ length: 300 }, async () => {
    const t0 = performance.now();
    const r = await fetch(`${s.base}/health`);
    await r.text();
    lat.push(performance.now() - t0);
    return r.status;
  }));
  const after = listenDrops();
  assert(results.every((x) => x === 200), `statuses ${[...new Set(results)]}`);
  lat.sort((a, b) => a - b);
  const p90 = lat[Math.floor(lat.length * 0.9)];
  const timing = `90th percentile ${p90.toFixed(0)} ms, slowest ${lat[lat.length - 1].toFixed(0)} ms`;
  if (before !== null && after !== null && Number.isFinite(before) && Number.isFinite(after)) {
    assert(after === before, `${after - before} connections dropped from a listening socket's accept queue (${timing})`);
    assert(p90 < 3000, `${timing}`);
  } else {
    // No counters to read: a connection dropped from the accept queue cannot be answered before the
    // client's first SYN retransmission, 1 s on (with the backlog of 5 the 90th percentile measured
    // 1.1-1.5 s, widened 0.3-0.4 s).
    assert(p90 < 950, `${timing}: connections waited on SYN retransmissions`);
  }
});

await test("200 concurrent chat requests: all answered, /health fast and the held requests counted meanwhile", async () => {
  const body = JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 8 });
  const all = Array.from({ length: 200 }, () =>
    fetch(`${s.base}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body })
      .then(async (r) => ({ status: r.status, text: await r.text() })));
  await sleep(100);
  const held = await metric(s.base, "http_requests_admitted");
  const worst = Math.max(...await Promise.all([0, 1, 2, 3, 4].map(() => timed(async () => assert((await fetch(`${s.base}/health`)).ok)))));
  const results = await Promise.all(all);
  assert(results.every((r) => r.status === 200 && JSON.parse(r.text).choices), JSON.stringify(results.filter((r) => r.status !== 200)[0]));
  assert(held > 0, "the admitted requests were not counted");
  assert(worst < 500, `/health took ${worst} ms under load`);
});

await test("a second server on the same port refuses to start", async () => {
  const r = spawnSync(osprey, ["serve", "--model", modelDir, "--host", "127.0.0.1", "--port", String(s.port)], { encoding: "utf8", timeout: 60000 });
  assert(r.status !== 0 && r.status !== null, `exit ${r.status}`);
  assert(/address in use/.test(r.stderr), r.stderr.slice(-300));
  assert(alive(s));
});

await test("--port 0 logs the port it bound", async () => {
  const z = await startServer([], 0);  // startServer reads the logged port and reaches /health there
  assert(z.port > 0);
  z.proc.kill("SIGTERM");
});

await test("a KV cache smaller than the context serves what fits and refuses the rest with a 400", async () => {
  const k = await startServer(["--kv-blocks", "12"]);  // 12 blocks of 16 positions shared by both layer groups
  const m = await (await fetch(`${k.base}/v1/models/tiny`)).json();
  assert(m.context_length > 16 && m.context_length < 192, `context_length ${m.context_length}`);
  const ok = await post(k.base, "/v1/completions", { model: "tiny", prompt: [1, 2, 3], max_tokens: 8 });
  assert(ok.status === 200 && ok.body.usage.completion_tokens === 8, `HTTP ${ok.status} ${JSON.stringify(ok.body)}`);
  const big = await post(k.base, "/v1/completions", { model: "tiny", prompt: [1, 2, 3], max_tokens: 400 });
  assert(big.status === 400 && big.body.error.code === "context_length_exceeded", `HTTP ${big.status}`);
  assert(new RegExp(`maximum context length is ${m.context_length} tokens`).test(big.body.error.message), big.body.error.message);
  k.proc.kill("SIGTERM");
});

async function settle(base) {  // waits (bounded) until nothing runs and no KV block is held
  for (let i = 0; i < 100; ++i) {
    if (await metric(base, "running_batch_size") === 0 && await metric(base, "kv_cache_blocks_used") === 0) return;
    await sleep(100);
  }
  throw new Error("requests still running after 10 s");
}
// A client that leaves: a raw socket, closed after a second (node's fetch keeps reading an aborted
// body to reuse its connection, so it never leaves).
function leaveAfter(port, body, ms, route = "/v1/chat/completions") {
  return new Promise((resolve) => {
    const text = JSON.stringify(body);
    const sock = net.connect(port, "127.0.0.1", () => sock.write(
      `POST ${route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`));
    sock.on("data", () => {});
    sock.on("error", () => {});
    setTimeout(() => { sock.destroy(); resolve(); }, ms);
  });
}
for (const stream of [false, true]) {
  await test(`a ${stream ? "streaming" : "non-streaming"} client that leaves cancels its generation and frees its KV`, async () => {
    await settle(s.base);
    const before = { gen: await metric(s.base, "generation_tokens_total"), gone: await metric(s.base, "client_disconnects_total") };
    await leaveAfter(s.port, { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3000, ignore_eos: true, stream }, 1000);
    await settle(s.base);  // cancelled within a step or two, its KV freed
    const generated = await metric(s.base, "generation_tokens_total") - before.gen;
    assert(generated < 3000, `${generated} tokens generated after the client left`);
    assert(await metric(s.base, "client_disconnects_total") === before.gone + 1, "the disconnect was not counted");
    assert(await metric(s.base, "http_requests_admitted") === 0, "a ticket leaked");
  });
}

// A client that leaves while its long prompt is still prefilling (24,000 tokens: tens of seconds on
// the CPU machine) is noticed within a probe or two, not when the first token comes.
const long = await startServerIn(osprey, modelDir, ["--max-seq-len", "32768"]);
for (const stream of [false, true]) {
  await test(`a ${stream ? "streaming" : "non-streaming"} client that leaves during prefill is noticed at once`, async () => {
    const gone = await metric(long.base, "client_disconnects_total");
    const prompt = Array.from({ length: 24000 }, (_, i) => 1000 + (i % 50000));
    await leaveAfter(long.port, { model: "tiny", prompt, max_tokens: 4, stream }, 1500, "/v1/completions");
    const t = Date.now();
    while (await metric(long.base, "http_requests_admitted") > 0 && Date.now() - t < 20000) await sleep(100);
    const ms = Date.now() - t;
    assert(ms < 5000, `the request was held ${ms} ms after its client left`);
    assert(await metric(long.base, "client_disconnects_total") === gone + 1, "the disconnect was not counted");
    await settle(long.base);
  });
}

// Admission: with --max-batch 2 --max-queue 2 at most 4 requests are held; the rest get a 429 at once.
const small = await startServer(["--max-batch", "2", "--max-queue", "2"]);
await test("--max-queue bounds every request the server holds; over it a 429 with Retry-After at once", async () => {
  // 40 at once, each long enough (4,000 tokens: seconds even two at a time, on a loaded CI machine)
  // that none finishes before the others are answered.
  const body = JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4000, ignore_eos: true });
  const results = [];
  for (let i = 0; i < 40; ++i)
    fetch(`${small.base}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body })
      .then((r) => results.push({ status: r.status, retry: r.headers.get("retry-after") })).catch(() => {});
  for (let i = 0; i < 200 && results.filter((r) => r.status === 429).length < 36; ++i) await sleep(50);
  const busy = results.filter((r) => r.status === 429);
  assert(busy.length === 36, `${busy.length} refused of ${results.length} answered: ${JSON.stringify(results.map((r) => r.status))}`);
  // A non-streaming answer's headers come with its first token: the admitted ones show up as 200s.
  assert(results.filter((r) => r.status !== 429).every((r) => r.status === 200), JSON.stringify(results));
  assert(results.filter((r) => r.status === 200).length <= 4, "more than max_batch + max_queue admitted");
  assert(busy.every((r) => r.retry === "1"), "a 429 without Retry-After");
  const held = await metric(small.base, "http_requests_admitted");
  assert(held === 4, `the admitted count (${held}) is not what runs and waits (4)`);
});

fs.rmSync(tmp, { recursive: true, force: true });
finish();
