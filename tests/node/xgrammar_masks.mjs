#!/usr/bin/env node
// Compute XGrammar (@mlc-ai/web-xgrammar 0.1.27, wasm) next-token bitmasks for JSON schemas over a
// byte-level tiktoken vocabulary: the oracle of diff_grammar.mjs (the grammar engine's differential
// test). Run as a command or imported as a module:
//
//   node xgrammar_masks.mjs VOCAB_FILE CASES_FILE [options] > out.jsonl
//
//   import { createXGrammar } from "./xgrammar_masks.mjs";
//   const xgr = await createXGrammar(VOCAB_FILE, { patchBasicSep: true });  // options as below
//   const c = await xgr.compile(schema);   // throws on a schema xgrammar refuses
//   c.reset(); c.acceptBytes(buf) -> bytes accepted; c.mask() -> Int32Array bitmask; c.dispose()
//
// VOCAB_FILE : tiktoken ranks file, lines "BASE64 RANK"; token id = rank.
// CASES_FILE : JSON lines {"schema": <schema object | "json_object">, "prefixes": ["", "{", ...]}
// Output     : one JSON line per (case, prefix):
//   {"case":i,"prefix":j,"allowed":[sorted ids],"accepted_prefix":bool,"can_terminate":bool}
//   (+ "error" when the schema could not be compiled; + "accepted_bytes" when a prefix is rejected)
//
// Options (defaults in brackets):
//   --vocab-size=N        total vocab / logits size, ids past the file are padded [201088]
//   --stop=ID[,ID...]     stop token id(s) [200002]  (<|return|>)
//   --encoding=byte_level|raw
//                         how raw token bytes are handed to TokenizerInfo [byte_level]
//                         byte_level: GPT-2 bytes_to_unicode string, vocabType "byte_level"
//                         raw: Uint8Array of the exact bytes (embind std::string), vocabType "raw"
//   --special=empty|text  ids not in the vocab file (except stop ids) get "" (xgrammar treats
//                         empty-string tokens as special = never allowed) or placeholder text
//                         like "<|reserved_200000|>" (xgrammar then treats them as ordinary text
//                         tokens, allowed e.g. inside JSON strings!) [empty]
//   --strict=true|false   strictMode of compileJSONSchema [true]
//   --any-whitespace      anyWhitespace=true (default false: no whitespace at all)
//   --indent=N            indent (-1 = one line, no newlines) [-1]
//   --separators=C,K      item / key separators, JSON array of 2 strings or "," ":" [[",",":"]]
//   --patch-basic-sep     work around xgrammar bug: the generic basic_array / basic_object rules
//                         (used for "json_object", untyped values, {"type":"object"} without
//                         properties, {"type":"array"} without items ...) hard-code ", " as item
//                         separator even when separators=[",",":"]. With this flag, the EBNF is
//                         generated via Testings._jsonSchemaToEBNF, ", " -> "," is patched in those
//                         rules, and the grammar is compiled with compileGrammar().
//                         (The compiler's cache is always off: with it, compileGrammar() re-parses
//                         the printed grammar, which misreads a non-ASCII character followed by a
//                         hex letter, e.g. "üe" -> U+0FCE.)
//   --feed=tokens|string  feed the prefix as single-byte tokens (acceptToken) or via
//                         GrammarMatcher._acceptString (UTF-8 bytes of the prefix) [tokens]
//   --warmup=N            extra untimed mask computations before each timed one [0]
//   --repeat=N            compute each mask N times; mask_ms = median of the N timings [1]
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

// ---------------------------------------------------------------------------------------------
// Capture wasm stderr messages ([FATAL] ... from XGRAMMAR_CHECK) so errors can be reported.
// Installed by createXGrammar(); `quiet` keeps the messages out of stderr (still captured).
const origConsoleError = console.error.bind(console);
let lastWasmErr = [];
let captureInstalled = false;
function captureWasmErrors(quiet) {
  if (captureInstalled) return;
  captureInstalled = true;
  console.error = (...a) => {
    const s = a.map(String).join(" ");
    lastWasmErr.push(s);
    if (lastWasmErr.length > 20) lastWasmErr.shift();
    if (!quiet) origConsoleError(s.length > 2000 ? s.slice(0, 2000) + "..." : s);
  };
}
let verbose = true;
const log = (...a) => { if (verbose) process.stderr.write(a.join(" ") + "\n"); };

// The package says "type":"module" but lib/index.js is a UMD/CommonJS bundle that uses
// require() and __filename, so `import "@mlc-ai/web-xgrammar"` throws
// "ReferenceError: require is not defined in ES module scope". Evaluate it as CommonJS instead.
// Each call gives a fresh wasm instance (needed after a wasm abort()).
export function loadXGrammar() {
  const require = createRequire(import.meta.url);
  const file = require.resolve("@mlc-ai/web-xgrammar/lib/index.js");
  const src = readFileSync(file, "utf8");
  const module = { exports: {} };
  new Function("exports", "require", "module", "__filename", "__dirname", src)(
    module.exports, require, module, file, path.dirname(file));
  return module.exports;
}

// ---------------------------------------------------------------------------------------------
export const DEFAULT_OPTIONS = Object.freeze({
  vocabSize: 201088, stop: [200002], encoding: "byte_level", special: "empty", strict: true,
  anyWhitespace: false, indent: -1, separators: [",", ":"], patchBasicSep: false,
  feed: "tokens", warmup: 0, repeat: 1,
});

function parseArgs(argv) {
  const pos = [];
  const o = { ...DEFAULT_OPTIONS };
  for (const a of argv) {
    if (!a.startsWith("--")) { pos.push(a); continue; }
    const [k, v] = a.slice(2).split(/=(.*)/s);
    switch (k) {
      case "vocab-size": o.vocabSize = parseInt(v, 10); break;
      case "stop": o.stop = v.split(",").map((x) => parseInt(x, 10)); break;
      case "encoding": o.encoding = v; break;
      case "special": o.special = v; break;
      case "strict": o.strict = v !== "false" && v !== "0"; break;
      case "any-whitespace": o.anyWhitespace = v === undefined || (v !== "false" && v !== "0"); break;
      case "indent": o.indent = parseInt(v, 10); break;
      case "separators": {
        let s; try { s = JSON.parse(v); } catch { s = v.split(/(?<=^[^,]*),/); }
        o.separators = v === "default" ? undefined : s; break;
      }
      case "patch-basic-sep": o.patchBasicSep = v === undefined || (v !== "false" && v !== "0"); break;
      case "feed": o.feed = v; break;
      case "warmup": o.warmup = parseInt(v, 10); break;
      case "repeat": o.repeat = Math.max(1, parseInt(v, 10)); break;
      default: throw new Error("unknown option --" + k);
    }
  }
  if (pos.length !== 2) {
    throw new Error("usage: node xgrammar_masks.mjs VOCAB_FILE CASES_FILE [options] > out.jsonl");
  }
  if (!["byte_level", "raw"].includes(o.encoding)) throw new Error("bad --encoding");
  if (!["empty", "text"].includes(o.special)) throw new Error("bad --special");
  if (!["tokens", "string"].includes(o.feed)) throw new Error("bad --feed");
  return { vocabFile: pos[0], casesFile: pos[1], opt: o };
}

// GPT-2 bytes_to_unicode (HF transformers tokenization_gpt2.py); XGrammar's BYTE_LEVEL decoder
// inverts exactly this map, so every byte (incl. 0x00 and invalid-UTF-8 bytes) round-trips.
export function bytesToUnicode() {
  const bs = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const m = new Array(256);
  for (let i = 0; i < bs.length; i++) m[bs[i]] = String.fromCodePoint(cs[i]);
  return m;
}

// Names of the o200k / harmony special tokens (only used with --special=text and for the stop id).
const O200K_SPECIAL = {
  199999: "<|endoftext|>", 200018: "<|endofprompt|>", 200002: "<|return|>",
  200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
  200008: "<|message|>", 200012: "<|call|>",
};
const specialName = (id) => O200K_SPECIAL[id] ?? `<|reserved_${id}|>`;

export function loadVocab(file, vocabSize) {
  const tokens = new Array(vocabSize).fill(null); // Buffer or null
  const text = readFileSync(file, "utf8");
  let n = 0;
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const [b64, rankStr] = t.split(/\s+/);
    const rank = parseInt(rankStr, 10);
    if (!(rank >= 0 && rank < vocabSize)) throw new Error(`rank out of range: ${line}`);
    if (tokens[rank] !== null) throw new Error(`duplicate rank ${rank}`);
    tokens[rank] = Buffer.from(b64, "base64");
    n++;
  }
  return { tokens, nFile: n };
}

// ---------------------------------------------------------------------------------------------
export async function buildTokenizer(xg, tokens, opt) {
  const b2u = bytesToUnicode();
  const stopSet = new Set(opt.stop);
  const encoded = new Array(tokens.length);
  let nSpecial = 0;
  for (let id = 0; id < tokens.length; id++) {
    const t = tokens[id];
    if (t === null) {
      nSpecial++;
      // Stop tokens are classified by id (before the "empty string = special" rule), so their
      // string does not matter; give them their name.
      encoded[id] = stopSet.has(id) || opt.special === "text" ? specialName(id) : "";
      if (opt.encoding === "raw") encoded[id] = new Uint8Array(Buffer.from(encoded[id], "utf8"));
    } else if (opt.encoding === "byte_level") {
      let s = "";
      for (const b of t) s += b2u[b];
      encoded[id] = s;
    } else {
      encoded[id] = new Uint8Array(t.buffer, t.byteOffset, t.length);
    }
  }
  const t0 = performance.now();
  const ti = await xg.TokenizerInfo.createTokenizerInfo(
    encoded, opt.encoding, false, opt.vocabSize, opt.stop);
  const t1 = performance.now();
  // No compile cache: with the cache on, compileGrammar() keys a grammar by its printed form and
  // parses that again, and the printer writes a non-ASCII code point as \xHH, which swallows a
  // hex-digit letter after it on the way back ("blüe" -> "bl\xfce" -> "bl" U+0FCE).
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(ti, false);
  log(`[xgrammar] TokenizerInfo: vocabSize=${ti.getVocabSize()} encoding=${opt.encoding} ` +
      `special(pad) ids=${nSpecial} (${opt.special}) stop=${JSON.stringify(opt.stop)} ` +
      `built in ${(t1 - t0).toFixed(0)} ms`);
  return { ti, compiler };
}

export function patchBasicSeparators(ebnf, comma) {
  // basic_array ::= (("[" "" basic_any (", " basic_any)* "" "]") | ("[" "" "]"))
  // basic_object ::= ("{" "" basic_string ":" basic_any (", " basic_string ":" basic_any)* ...
  return ebnf.split("\n").map((l) => {
    if (/^basic_(array|object)\b/.test(l)) {
      return l.replace(/\(", " basic_/g, `(${JSON.stringify(comma)} basic_`);
    }
    return l;
  }).join("\n");
}

export async function compileCase(xg, compiler, schema, opt) {
  const schemaStr = schema === "json_object" ? '{"type":"object"}'
    : typeof schema === "string" ? schema : JSON.stringify(schema);
  if (!opt.patchBasicSep) {
    return compiler.compileJSONSchema(
      schemaStr, opt.anyWhitespace, opt.indent, opt.separators, opt.strict);
  }
  let ebnf = await xg.Testings._jsonSchemaToEBNF(
    schemaStr, opt.anyWhitespace, opt.indent, opt.separators, opt.strict);
  if (opt.separators) ebnf = patchBasicSeparators(ebnf, opt.separators[0]);
  return compiler.compileGrammar(ebnf, "root");
}

export function bitmaskToIds(mask, vocabSize) {
  const out = [];
  for (let w = 0; w < mask.length; w++) {
    let v = mask[w];
    if (v === 0) continue;
    const base = w * 32;
    for (let b = 0; b < 32; b++) {
      if ((v >>> b) & 1) {
        const id = base + b;
        if (id < vocabSize) out.push(id);
      }
    }
  }
  return out;
}

function stats(a) {
  if (!a.length) return "n=0";
  const s = a.slice().sort((x, y) => x - y);
  const mean = s.reduce((x, y) => x + y, 0) / s.length;
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return `n=${s.length} mean=${mean.toFixed(3)}ms median=${q(0.5).toFixed(3)}ms ` +
         `p90=${q(0.9).toFixed(3)}ms max=${s[s.length - 1].toFixed(3)}ms min=${s[0].toFixed(3)}ms`;
}


// ---------------------------------------------------------------------------------------------
// Module API: one wasm instance, tokenizer info and compiler; per schema a matcher fed bytes as
// single-byte tokens.
export async function createXGrammar(vocabFile, options = {}) {
  const opt = { ...DEFAULT_OPTIONS, ...options };
  verbose = !!options.verbose;
  captureWasmErrors(!options.verbose);
  const { tokens } = loadVocab(vocabFile, opt.vocabSize);
  const byteTok = new Array(256).fill(-1);
  for (let id = 0; id < tokens.length; id++) {
    const t = tokens[id];
    if (t && t.length === 1 && byteTok[t[0]] < 0) byteTok[t[0]] = id;
  }
  if (byteTok.some((x) => x < 0)) throw new Error("the vocabulary lacks a single-byte token for some byte");
  let xg = loadXGrammar();
  let { ti, compiler } = await buildTokenizer(xg, tokens, opt);
  return {
    tokens, byteTok, options: opt,
    async compile(schema) {
      lastWasmErr = [];
      let cg, matcher;
      try {
        cg = await compileCase(xg, compiler, schema, opt);
        matcher = await xg.GrammarMatcher.createGrammarMatcher(cg, opt.stop, false);
      } catch (e) {
        const wasmMsg = lastWasmErr.filter((s) => /FATAL|Error|error/.test(s)).join(" | ");
        const msg = `${e && e.message ? e.message : String(e)}${wasmMsg ? " :: " + wasmMsg : ""}`;
        if (/Aborted/.test(msg)) {  // the wasm instance is dead: a fresh one for the next schema
          xg = loadXGrammar();
          ({ ti, compiler } = await buildTokenizer(xg, tokens, opt));
        }
        throw new Error(msg.slice(0, 1000));
      }
      return {
        reset() { matcher.reset(); },
        // Feeds the bytes one single-byte token at a time; returns how many were accepted.
        acceptBytes(bytes) {
          let n = 0;
          for (const b of bytes) {
            if (!matcher.acceptToken(byteTok[b])) break;
            n++;
          }
          return n;
        },
        mask() { return matcher.getNextTokenBitmask(); },
        dispose() { matcher.dispose(); cg.dispose(); },
      };
    },
    dispose() { compiler.dispose(); ti.dispose(); },
  };
}

// ---------------------------------------------------------------------------------------------
async function main() {
  const { vocabFile, casesFile, opt } = parseArgs(process.argv.slice(2));
  log(`[xgrammar] options: ${JSON.stringify(opt)}`);
  const { tokens, nFile } = loadVocab(vocabFile, opt.vocabSize);
  log(`[xgrammar] vocab file tokens: ${nFile}, padded to ${opt.vocabSize}`);

  // single-byte token ids, to feed prefixes byte-exactly
  const byteTok = new Array(256).fill(-1);
  for (let id = 0; id < tokens.length; id++) {
    const t = tokens[id];
    if (t && t.length === 1 && byteTok[t[0]] < 0) byteTok[t[0]] = id;
  }
  const missingBytes = byteTok.filter((x) => x < 0).length;
  if (missingBytes && opt.feed === "tokens") {
    log(`[xgrammar] ${missingBytes} bytes have no single-byte token; using --feed=string`);
    opt.feed = "string";
  }

  const cases = readFileSync(casesFile, "utf8").split("\n").filter((l) => l.trim())
    .map((l) => JSON.parse(l));

  let xg = loadXGrammar();
  let { ti, compiler } = await buildTokenizer(xg, tokens, opt);
  const reinit = async () => {
    log("[xgrammar] wasm aborted; re-instantiating module + tokenizer");
    xg = loadXGrammar();
    ({ ti, compiler } = await buildTokenizer(xg, tokens, opt));
  };

  const maskTimes = [];
  const compileTimes = [];
  const stopSet = new Set(opt.stop);
  const out = [];
  const flush = () => { if (out.length) { process.stdout.write(out.join("")); out.length = 0; } };

  for (let ci = 0; ci < cases.length; ci++) {
    const c = cases[ci];
    const prefixes = c.prefixes ?? [""];
    let cg = null, matcher = null;
    lastWasmErr = [];
    const tc0 = performance.now();
    try {
      cg = await compileCase(xg, compiler, c.schema, opt);
      matcher = await xg.GrammarMatcher.createGrammarMatcher(cg, opt.stop, false);
    } catch (e) {
      const wasmMsg = lastWasmErr.filter((s) => /FATAL|Error|error/.test(s)).join(" | ");
      const msg = `${e && e.message ? e.message : String(e)}${wasmMsg ? " :: " + wasmMsg : ""}`;
      log(`[xgrammar] case ${ci}: compile failed: ${msg.slice(0, 500)}`);
      for (let pj = 0; pj < prefixes.length; pj++) {
        out.push(JSON.stringify({ case: ci, prefix: pj, allowed: [], accepted_prefix: false,
          can_terminate: false, error: msg.slice(0, 1000) }) + "\n");
      }
      flush();
      if (/Aborted/.test(msg)) await reinit();
      continue;
    }
    const tc1 = performance.now();
    compileTimes.push(tc1 - tc0);

    for (let pj = 0; pj < prefixes.length; pj++) {
      const bytes = Buffer.from(prefixes[pj], "utf8");
      matcher.reset();
      let ok = true, nAcc = 0;
      if (opt.feed === "tokens") {
        for (const b of bytes) {
          if (!matcher.acceptToken(byteTok[b])) { ok = false; break; }
          nAcc++;
        }
      } else {
        ok = bytes.length === 0 ? true
          : matcher._acceptString(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length));
        nAcc = ok ? bytes.length : 0;
      }
      const rec = { case: ci, prefix: pj, allowed: [], accepted_prefix: ok, can_terminate: false };
      if (ok) {
        for (let w = 0; w < opt.warmup; w++) await matcher.getNextTokenBitmask();
        let mask = null;
        const ts = [];
        for (let r = 0; r < opt.repeat; r++) {
          const t0 = performance.now();
          mask = await matcher.getNextTokenBitmask();
          ts.push(performance.now() - t0);
        }
        ts.sort((x, y) => x - y);
        const dt = ts[ts.length >> 1];
        maskTimes.push(dt);
        rec.allowed = bitmaskToIds(mask, opt.vocabSize);
        rec.can_terminate = rec.allowed.some((id) => stopSet.has(id));
        rec.mask_ms = +dt.toFixed(3);
      } else {
        rec.accepted_bytes = opt.feed === "tokens" ? nAcc : null; // unknown with _acceptString
      }
      out.push(JSON.stringify(rec) + "\n");
      log(`[xgrammar] case ${ci} prefix ${pj} ${JSON.stringify(prefixes[pj]).slice(0, 60)}: ` +
          (ok ? `allowed=${rec.allowed.length} can_terminate=${rec.can_terminate} ` +
                `mask=${rec.mask_ms}ms` : `REJECTED after ${nAcc} bytes`));
    }
    flush();
    matcher.dispose();
    cg.dispose();
  }
  flush();
  log(`[xgrammar] compile time per case: ${stats(compileTimes)}`);
  log(`[xgrammar] time per mask (getNextTokenBitmask incl. copy to JS): ${stats(maskTimes)}`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  captureWasmErrors(false);
  main().catch((e) => {
    // never let node print the offending (1 MB) source line of the bundle
    origConsoleError("[xgrammar] fatal: " + (e && e.stack ? String(e.stack).slice(0, 3000) : e));
    process.exit(1);
  });
}
