// The node tests' shared harness: named tests with a pass/fail tally and the plain closing line,
// and `osprey serve` started on a loopback port (by default 0: the server picks a free one and logs it; a
// random fixed port could collide with one in use), waited
// for until /health answers. Every wait is bounded.
import { spawn } from "node:child_process";

let passed = 0, failed = 0;
const servers = [];

export async function test(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}: ${e.stack || e}`);
  }
}
export function assert(cond, msg) { if (!cond) throw new Error(msg || "assertion failed"); }
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `osprey serve --model MODEL --host 127.0.0.1 --port P ...extra`; resolves once /health answers on
// the port the server logged. Fails at once if the server exits, after `seconds` if it never answers.
export async function startServer(osprey, model, extra = [], { port = 0, seconds = 60 } = {}) {
  const proc = spawn(osprey, ["serve", "--model", model, "--host", "127.0.0.1", "--port", String(port), ...extra],
                     { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  servers.push(proc);
  for (let i = 0; i < seconds * 20; ++i) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`server exited: ${log}`);
    const m = log.match(/serving '[^']*' on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) {
      const base = `http://127.0.0.1:${m[1]}`;
      try {
        if ((await fetch(`${base}/health`)).ok) return { base, port: Number(m[1]), proc, log: () => log };
      } catch {}
    }
    await sleep(50);
  }
  throw new Error(`server did not start in ${seconds} s: ${log}`);
}

// A counter or gauge from /metrics.
export async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`osprey_${name} `));
  return Number(line.split(" ")[1]);
}

// Stops every server started, prints "N passed, M failed" and exits with the verdict.
export function finish() {
  for (const p of servers) p.kill("SIGTERM");
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
process.on("exit", () => { for (const p of servers) if (p.exitCode === null) p.kill("SIGKILL"); });
